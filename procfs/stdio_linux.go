package procfs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/mcptrace/mcptrace/lineage"
)

// ReadFacts reads process id's standard input and cgroup through one
// handle on /proc/PID, checking its start time first: a recycled PID
// reads as gone (an error wrapping fs.ErrNotExist).
func ReadFacts(root string, id lineage.ID) (Facts, error) {
	var rd reader
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
func (rd *reader) openIdentified(root string, id lineage.ID, start func(stat []byte) (uint64, error)) (int, error) {
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
// closed or shut down writing. It asks the kernel itself: the process's
// fd 0 is duplicated into this process (pidfd_getfd, which needs ptrace
// access to it: CAP_SYS_PTRACE for other users' processes) and polled
// once, without reading: POLLHUP says no writer holds the pipe, POLLRDHUP
// that the socket's peer will send nothing more. Every holder counts,
// whatever thread, message in flight or file table holds it, which no
// scan of /proc can see. The pidfd pins the identity: a recycled PID
// reads as gone.
func StdinCutOff(root string, id lineage.ID) (bool, error) {
	pidfd, err := unix.PidfdOpen(int(id.PID), 0)
	if err != nil {
		return false, readErr(id.PID, err)
	}
	defer unix.Close(pidfd)
	st, err := ReadStat(root, id.PID)
	if err != nil {
		return false, err
	}
	if !(lineage.ID{PID: id.PID, Start: st.StartTicks * lineage.TickNS}).SameTick(id) {
		return false, readErr(id.PID, fmt.Errorf("%w: %w", errGone, fs.ErrNotExist))
	}
	// Only a pipe or a socket is duplicated: a file on a filesystem its
	// owner serves (FUSE) would make the poll, and the close, wait on
	// that owner. The links are read from /proc, which asks no
	// filesystem, before the duplication and of the duplicate.
	if root == "" {
		root = DefaultRoot
	}
	target, err := os.Readlink(fmt.Sprintf("%s/%d/fd/0", root, id.PID))
	if err != nil {
		return false, readErr(id.PID, err)
	}
	if kind, _ := stdinOf(target); kind != StdinPipe && kind != StdinSocket {
		return false, nil
	}
	fd, err := unix.PidfdGetfd(pidfd, 0, 0)
	if err != nil {
		return false, fmt.Errorf("procfs: stdin of process %d: %w", id.PID, err)
	}
	defer unix.Close(fd)
	if dup, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", fd)); err != nil || dup != target {
		return false, nil // replaced since: not the pipe or socket read above
	}
	pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN | unix.POLLRDHUP}}
	for {
		_, err := unix.Poll(pfd, 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return false, fmt.Errorf("procfs: poll stdin of process %d: %w", id.PID, err)
		}
		return pfd[0].Revents&(unix.POLLHUP|unix.POLLRDHUP) != 0, nil
	}
}
