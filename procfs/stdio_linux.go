package procfs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/mcptrace/mcptrace/lineage"
)

// ReadFacts reads process id's standard input and cgroup through one
// handle on /proc/PID, checking its start time first: a recycled PID
// reads as gone (an error wrapping fs.ErrNotExist).
func ReadFacts(root string, id lineage.ID) (Facts, error) {
	var rd Reader
	var st Stat
	dfd, err := rd.openIdentified(root, id, func(b []byte) (uint64, error) {
		var err error
		st, err = parseStat(b)
		return st.StartTicks, err
	})
	if err != nil {
		return Facts{}, err
	}
	defer unix.Close(dfd)
	f := Facts{Stat: st}
	target, err := rd.link(dfd, "fd/0")
	switch {
	case err == nil:
		f.Stdin, f.StdinInode = stdinOf(target)
	case errors.Is(err, fs.ErrNotExist): // fd 0 is closed
		f.Stdin = StdinClosed
	default:
		return Facts{}, readErr(id.PID, err)
	}
	target, err = rd.link(dfd, "fd/1")
	switch {
	case err == nil:
		f.Stdout, f.StdoutInode = stdinOf(target)
	case errors.Is(err, fs.ErrNotExist): // fd 1 is closed
		f.Stdout = StdinClosed
	default:
		return Facts{}, readErr(id.PID, err)
	}
	b, err := rd.file(dfd, "status")
	if err != nil {
		return Facts{}, readErr(id.PID, err)
	}
	ss, err := parseStatus(b)
	if err != nil {
		return Facts{}, fmt.Errorf("procfs: %d/status: %w", id.PID, err)
	}
	f.UIDs = ss.uids
	if exe, err := rd.link(dfd, "exe"); err == nil {
		f.Exe = strings.TrimSuffix(exe, " (deleted)")
	}
	if b, err := rd.file(dfd, "cgroup"); err == nil {
		f.Cgroup = cgroupOf(string(b))
	}
	return f, nil
}

// openIdentified opens root/PID as a directory handle and checks through
// it that the process is id: start reads the start time (clock ticks)
// from the stat file, which must match id's at tick precision. A
// recycled PID reads as gone (an error wrapping fs.ErrNotExist), never
// as another process.
func (rd *Reader) openIdentified(root string, id lineage.ID, start func(stat []byte) (uint64, error)) (int, error) {
	if root == "" {
		root = DefaultRoot
	}
	dir := filepath.Join(root, strconv.FormatUint(uint64(id.PID), 10))
	dfd, err := openDir(dir)
	if err != nil {
		return -1, readErr(id.PID, err)
	}
	b, err := rd.file(dfd, "stat")
	if err != nil {
		unix.Close(dfd)
		return -1, readErr(id.PID, err)
	}
	ticks, err := start(b)
	if err != nil {
		unix.Close(dfd)
		return -1, fmt.Errorf("procfs: %s/stat: %w", dir, err)
	}
	if !(lineage.ID{PID: id.PID, Start: ticks * lineage.TickNS}).SameTick(id) {
		unix.Close(dfd)
		return -1, readErr(id.PID, fmt.Errorf("%w: %w", errGone, fs.ErrNotExist))
	}
	return dfd, nil
}

// StdinCutOff reports whether process id's standard input can never be
// written again: a pipe with no writer left, or a unix socket whose peer
// closed or shut down writing (ReadStdio's InCut).
func StdinCutOff(root string, id lineage.ID) (bool, error) {
	st, err := ReadStdio(root, id)
	return st.InCut, err
}

// ReadStdio reports what the kernel says of process id's standard input
// and output (Stdio). It asks the kernel itself: each of the process's
// fd 0 and fd 1 that is a pipe or a socket is duplicated into this
// process (pidfd_getfd, which needs ptrace access to it: CAP_SYS_PTRACE
// for other users' processes) and polled once, without reading or
// writing: POLLHUP on a pipe's read end says no writer holds it, POLLERR
// on its write end that no reader does; POLLHUP or POLLRDHUP on a socket
// that its peer is gone or will send nothing more. Every holder counts,
// whatever thread, message in flight or file table holds it, which no
// scan of /proc can see. The pidfd pins the identity: a recycled PID
// reads as gone.
func ReadStdio(root string, id lineage.ID) (Stdio, error) {
	pidfd, err := unix.PidfdOpen(int(id.PID), 0)
	if err != nil {
		return Stdio{}, readErr(id.PID, err)
	}
	defer unix.Close(pidfd)
	st, err := ReadStat(root, id.PID)
	if err != nil {
		return Stdio{}, err
	}
	if !(lineage.ID{PID: id.PID, Start: st.StartTicks * lineage.TickNS}).SameTick(id) {
		return Stdio{}, readErr(id.PID, fmt.Errorf("%w: %w", errGone, fs.ErrNotExist))
	}
	if root == "" {
		root = DefaultRoot
	}
	var out Stdio
	in, err := pollFD(root, id, pidfd, 0)
	if err != nil {
		return Stdio{}, err
	}
	out.InCut, out.InLocal, out.InPeer = in.cut, in.local, in.peer
	o, err := pollFD(root, id, pidfd, 1)
	if err != nil {
		return Stdio{}, err
	}
	out.OutCut, out.OutLocal, out.OutPeer = o.cut, o.local, o.peer
	return out, nil
}

// fdState is what pollFD found of one fd.
type fdState struct {
	cut, local bool
	peer       uint32
}

// pollFD duplicates fd n of the process behind pidfd and asks the kernel
// whether its other end is gone (see ReadStdio). Only a pipe or a socket
// is duplicated: a file on a filesystem its owner serves (FUSE) would
// make the poll, and the close, wait on that owner. The links are read
// from /proc, which asks no filesystem, before the duplication and of the
// duplicate.
func pollFD(root string, id lineage.ID, pidfd, n int) (fdState, error) {
	target, err := os.Readlink(fmt.Sprintf("%s/%d/fd/%d", root, id.PID, n))
	if errors.Is(err, fs.ErrNotExist) {
		return fdState{}, nil // closed, or the process is gone: checked by the caller's identity
	}
	if err != nil {
		return fdState{}, readErr(id.PID, err)
	}
	kind, _ := stdinOf(target)
	if kind != StdinPipe && kind != StdinSocket {
		return fdState{}, nil
	}
	fd, err := unix.PidfdGetfd(pidfd, n, 0)
	if err != nil {
		return fdState{}, fmt.Errorf("procfs: fd %d of process %d: %w", n, id.PID, err)
	}
	defer unix.Close(fd)
	if dup, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", fd)); err != nil || dup != target {
		return fdState{}, nil // replaced since: not the pipe or socket read above
	}
	var s fdState
	if kind == StdinPipe {
		s.local = true
	} else if dom, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_DOMAIN); err == nil && dom == unix.AF_UNIX {
		s.local = true
		if cred, err := unix.GetsockoptUcred(fd, unix.SOL_SOCKET, unix.SO_PEERCRED); err == nil && cred.Pid > 0 {
			s.peer = uint32(cred.Pid)
		}
	}
	// A pipe's end is read-only or write-only: what the duplicate is open
	// for says which end the process holds.
	fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
	if err != nil {
		return fdState{}, fmt.Errorf("procfs: fd %d of process %d: %w", n, id.PID, err)
	}
	events, gone := int16(unix.POLLIN|unix.POLLRDHUP), int16(unix.POLLHUP|unix.POLLRDHUP)
	if kind == StdinPipe && fl&unix.O_ACCMODE == unix.O_WRONLY {
		events, gone = unix.POLLOUT, unix.POLLERR
	}
	pfd := []unix.PollFd{{Fd: int32(fd), Events: events}}
	for {
		_, err := unix.Poll(pfd, 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return fdState{}, fmt.Errorf("procfs: poll fd %d of process %d: %w", n, id.PID, err)
		}
		s.cut = pfd[0].Revents&gone != 0
		return s, nil
	}
}

// maxHeldFDs bounds the fds HoldsPipes reads of one process.
const maxHeldFDs = 4096

// HoldsPipes reports whether process id holds every one of the pipes
// (by inode: both ends of a pipe have its inode) among its first
// maxHeldFDs open fds: whether it is the other end of a server's stdio.
// A process with more open fds than that, or none of the pipes, holds
// none as far as it can tell.
func HoldsPipes(root string, id lineage.ID, pipes ...uint64) (bool, error) {
	if len(pipes) == 0 {
		return false, nil
	}
	var rd Reader
	dfd, err := rd.openIdentified(root, id, func(b []byte) (uint64, error) {
		st, err := parseStat(b)
		return st.StartTicks, err
	})
	if err != nil {
		return false, err
	}
	defer unix.Close(dfd)
	fdDir, err := unix.Openat(dfd, "fd", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return false, readErr(id.PID, err)
	}
	d := os.NewFile(uintptr(fdDir), "fd")
	defer d.Close()
	names, err := d.Readdirnames(maxHeldFDs)
	if err != nil && len(names) == 0 {
		return false, readErr(id.PID, err)
	}
	want := map[uint64]bool{}
	for _, p := range pipes {
		want[p] = true
	}
	for _, name := range names {
		target, err := rd.link(fdDir, name)
		if err != nil {
			continue
		}
		if kind, ino := stdinOf(target); kind == StdinPipe {
			delete(want, ino)
		}
	}
	return len(want) == 0, nil
}
