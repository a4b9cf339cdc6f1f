package containers

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Bounds of CgroupKill.
const (
	cgroupKillWait  = 5 * time.Second // for the cgroup to empty
	cgroupKillRound = 10 * time.Millisecond
	maxCgroupDirs   = 1024 // a container's cgroup and its descendants
)

// CgroupDir returns the cgroup directory of the container with full ID
// id, found from its init process pid (Container.Pid): the directory of
// pid's cgroup in the unified hierarchy, else in the v1 pids, memory or
// name=systemd hierarchy, wherever /proc/self/mountinfo says that is
// mounted. It accepts only a cgroup whose last path element holds id
// (`/docker/<id>`, `/system.slice/docker-<id>.scope`), so a process that
// is not in that container's cgroup, or an ID that does not match, is an
// error and never a directory CgroupKill would empty.
func CgroupDir(pid int, id string) (string, error) {
	if pid <= 0 {
		return "", fmt.Errorf("cgroup of container %s: pid %d", short(id), pid)
	}
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		return "", fmt.Errorf("cgroup of container %s: %w", short(id), err)
	}
	lines, err := parseProcCgroup(string(data))
	if err != nil {
		return "", fmt.Errorf("cgroup of container %s: /proc/%d/cgroup: %w", short(id), pid, err)
	}
	mounts, err := readCgroupMounts()
	if err != nil {
		return "", fmt.Errorf("cgroup of container %s: %w", short(id), err)
	}
	dir, err := findCgroupDir(lines, mounts, id, isDir)
	if err != nil {
		return "", fmt.Errorf("cgroup of container %s: pid %d: %w", short(id), pid, err)
	}
	return dir, nil
}

// CgroupKill sends SIGKILL to every process in cgroup directory dir and
// its descendants, and waits (up to 5 s) until none is left. killed is
// how many processes were signalled (on cgroup v2 with cgroup.kill: how
// many were there when it was written).
//
// dir must be a container's cgroup: in a mounted cgroup file system, its
// last element holding a container ID (as CgroupDir returns). Anything
// else is refused. A directory that is no longer there is an error
// wrapping fs.ErrNotExist: the container is gone.
//
// On cgroup v2 it writes "1" to cgroup.kill (Linux 5.14+), which the
// kernel applies to every process, and to processes forked meanwhile.
// Elsewhere (v1, or v2 without cgroup.kill) it reads cgroup.procs and, for
// each process, opens a pidfd, then reads the process's cgroup from
// /proc/PID/cgroup, and signals through the pidfd only if the process is
// still in dir: a PID recycled by a process elsewhere never gets a signal
// (if the pidfd's process were gone and its PID reused, the signal
// through the pidfd fails, whatever /proc says). It repeats until
// cgroup.procs is empty, for processes forked while it ran.
func CgroupKill(dir string) (killed int, err error) {
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return 0, fmt.Errorf("cgroup kill: %w", err)
	}
	mounts, err := readCgroupMounts()
	if err != nil {
		return 0, fmt.Errorf("cgroup kill %s: %w", dir, err)
	}
	m, cg, ok := locate(mounts, real)
	if !ok {
		return 0, fmt.Errorf("cgroup kill %s: not in a mounted cgroup file system", dir)
	}
	if heldID(cg) == "" {
		return 0, fmt.Errorf("cgroup kill %s: cgroup %s is not a container's (its name holds no 64-hex container ID)", dir, cg)
	}
	if m.v2 {
		n, err := killV2(real)
		if !errors.Is(err, fs.ErrNotExist) {
			if err != nil {
				return n, fmt.Errorf("cgroup kill %s: %w", dir, err)
			}
			return n, nil
		}
		// No cgroup.kill: Linux before 5.14.
	}
	n, err := killEach(real, m, cg)
	if err != nil {
		return n, fmt.Errorf("cgroup kill %s: %w", dir, err)
	}
	return n, nil
}

// killV2 writes cgroup.kill and waits until the cgroup is unpopulated. An
// error wrapping fs.ErrNotExist means there is no cgroup.kill.
func killV2(dir string) (int, error) {
	f, err := os.OpenFile(filepath.Join(dir, "cgroup.kill"), os.O_WRONLY, 0)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	pids, err := procsBelow(dir)
	if removed(err) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	if _, err := f.WriteString("1"); removed(err) {
		return 0, nil
	} else if err != nil {
		return 0, fmt.Errorf("write cgroup.kill: %w", err)
	}
	deadline := time.Now().Add(cgroupKillWait)
	for {
		populated, err := populatedV2(dir)
		if removed(err) { // emptied, then removed by its engine
			return len(pids), nil
		}
		if err != nil {
			return len(pids), err
		}
		if !populated {
			return len(pids), nil
		}
		if time.Now().After(deadline) {
			left, _ := procsBelow(dir)
			return len(pids), fmt.Errorf("%d processes left %v after cgroup.kill", len(left), cgroupKillWait)
		}
		time.Sleep(cgroupKillRound)
	}
}

// removed reports whether err says a cgroup directory is gone: not
// there when opened (ENOENT), or removed between open and read (ENODEV).
// An engine removes a container's cgroup as soon as it is empty, so
// after a kill both are how success looks.
func removed(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ENODEV)
}

// populatedV2 reads "populated" from a v2 cgroup's cgroup.events: whether
// it or a descendant holds a process.
func populatedV2(dir string) (bool, error) {
	data, err := os.ReadFile(filepath.Join(dir, "cgroup.events"))
	if err != nil {
		return false, err
	}
	for _, l := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(l, "populated "); ok {
			return v != "0", nil
		}
	}
	return false, errors.New("cgroup.events has no populated line")
}

// killEach signals every process of cgroup cg (directory dir, in mount
// m) one pidfd at a time until none is left.
func killEach(dir string, m cgroupMount, cg string) (int, error) {
	signalled := map[int]bool{}
	deadline := time.Now().Add(cgroupKillWait)
	for {
		pids, err := procsBelow(dir)
		if removed(err) && len(pids) == 0 { // emptied, then removed by its engine
			return len(signalled), nil
		}
		if err != nil {
			return len(signalled), err
		}
		if len(pids) == 0 {
			return len(signalled), nil
		}
		if time.Now().After(deadline) {
			return len(signalled), fmt.Errorf("%d processes left after %v", len(pids), cgroupKillWait)
		}
		for _, pid := range pids {
			ok, err := killIfIn(pid, m, cg)
			if err != nil {
				return len(signalled), err
			}
			if ok {
				signalled[pid] = true
			}
		}
		time.Sleep(cgroupKillRound)
	}
}

// killIfIn sends SIGKILL to process pid if, once a pidfd of it is open,
// it is in cgroup cg of mount m or below it. It reports whether it sent
// one.
func killIfIn(pid int, m cgroupMount, cg string) (bool, error) {
	fd, err := unix.PidfdOpen(pid, 0)
	if errors.Is(err, unix.ESRCH) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("pidfd_open %d (needs Linux 5.3): %w", pid, err)
	}
	defer unix.Close(fd)
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		return false, nil // gone
	}
	lines, err := parseProcCgroup(string(data))
	if err != nil || !inCgroup(lines, m, cg) {
		return false, nil
	}
	err = unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0)
	if errors.Is(err, unix.ESRCH) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("pidfd_send_signal %d: %w", pid, err)
	}
	return true, nil
}

// procsBelow returns the processes of cgroup directory dir and its
// descendants (at most maxCgroupDirs directories).
func procsBelow(dir string) ([]int, error) {
	var pids []int
	dirs := 0
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p != dir && removed(err) {
				return nil // a descendant removed meanwhile
			}
			return err
		}
		if !d.IsDir() {
			return nil
		}
		if dirs++; dirs > maxCgroupDirs {
			return fmt.Errorf("more than %d cgroups below %s", maxCgroupDirs, dir)
		}
		data, err := os.ReadFile(filepath.Join(p, "cgroup.procs"))
		if removed(err) && p != dir {
			return nil
		}
		if err != nil {
			return err
		}
		for _, f := range bytes.Fields(data) {
			pid, err := strconv.Atoi(string(f))
			if err != nil || pid <= 0 {
				return fmt.Errorf("%s: pid %q", path.Join(p, "cgroup.procs"), f)
			}
			pids = append(pids, pid)
		}
		return nil
	})
	return pids, err
}

// readCgroupMounts returns the cgroup mounts of this process's mount
// namespace.
func readCgroupMounts() ([]cgroupMount, error) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	mounts := parseCgroupMounts(string(data))
	if len(mounts) == 0 {
		return nil, errors.New("no cgroup file system mounted")
	}
	return mounts, nil
}

func isDir(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}
