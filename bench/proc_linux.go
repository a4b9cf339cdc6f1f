package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// member is a process the bench started (or a session's member), known by
// pid and start time (field 22 of /proc/PID/stat, clock ticks since boot)
// so that a recycled pid is never taken for it.
type member struct {
	pid   int
	start uint64
}

// procStat returns the parent pid, state and start time of pid.
func procStat(pid int) (ppid int, state byte, start uint64, err error) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, 0, err
	}
	i := bytes.LastIndexByte(data, ')')
	if i < 0 || i+2 >= len(data) {
		return 0, 0, 0, fmt.Errorf("parse /proc/%d/stat", pid)
	}
	f := strings.Fields(string(data[i+2:]))
	if len(f) < 20 {
		return 0, 0, 0, fmt.Errorf("parse /proc/%d/stat: %d fields", pid, len(f))
	}
	ppid, _ = strconv.Atoi(f[1])
	start, _ = strconv.ParseUint(f[19], 10, 64)
	return ppid, f[0][0], start, nil
}

// descendants returns every live process below root (not root itself),
// by current parent, from one read of /proc.
func descendants(root int) []member {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	children := map[int][]member{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		ppid, state, start, err := procStat(pid)
		if err != nil || state == 'Z' {
			continue
		}
		children[ppid] = append(children[ppid], member{pid, start})
	}
	var out []member
	queue := []int{root}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range children[p] {
			out = append(out, c)
			queue = append(queue, c.pid)
		}
	}
	return out
}

// self returns the member for pid, read now.
func self(pid int) (member, error) {
	_, _, start, err := procStat(pid)
	return member{pid, start}, err
}

// pidfd opens a pidfd for m, or returns -1 when m is gone (exited, or its
// pid now names another process).
func (m member) pidfd() (int, error) {
	fd, err := unix.PidfdOpen(m.pid, 0)
	if errors.Is(err, unix.ESRCH) {
		return -1, nil
	}
	if err != nil {
		return -1, fmt.Errorf("pidfd_open %d: %w", m.pid, err)
	}
	// The pidfd pins the process: checked after the open, the start time
	// tells whether it is still the one recorded.
	_, state, start, err := procStat(m.pid)
	if err != nil || start != m.start || state == 'Z' {
		unix.Close(fd)
		return -1, nil
	}
	return fd, nil
}

// killMembers SIGKILLs every member still alive, through pidfds, and
// returns how many it signalled.
func killMembers(ms []member) int {
	n := 0
	for _, m := range ms {
		fd, err := m.pidfd()
		if err != nil || fd < 0 {
			continue
		}
		if unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0) == nil {
			n++
		}
		unix.Close(fd)
	}
	return n
}

// waitGone waits until no member is alive, up to timeout, and returns how
// many still are.
func waitGone(ms []member, timeout time.Duration) int {
	deadline := time.Now().Add(timeout)
	for {
		alive := 0
		for _, m := range ms {
			if _, state, start, err := procStat(m.pid); err == nil && start == m.start && state != 'Z' {
				alive++
			}
		}
		if alive == 0 || time.Now().After(deadline) {
			return alive
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// rssBytes returns VmRSS of pid.
func rssBytes(pid int) (int64, error) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(rest)
			if len(f) >= 1 {
				kb, err := strconv.ParseInt(f[0], 10, 64)
				return kb * 1024, err
			}
		}
	}
	return 0, fmt.Errorf("no VmRSS in /proc/%d/status", pid)
}
