package api

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/mcptrace/mcptrace/procfs"
	"github.com/mcptrace/mcptrace/windows/owners"
)

// peer is the process that opened a connection, bound when the connection
// was accepted: its pid, the uid the kernel recorded at connect
// (SO_PEERCRED), its start time, and where the kernel has it (6.5+,
// SO_PEERPIDFD) a pidfd of that very process. A later request on the
// connection acts for the peer only while that process is alive, is the
// same process (not a reused pid) and still has the peer's uid.
type peer struct {
	pid uint32
	uid uint32
	// start is the process's start time in /proc clock ticks
	// (/proc/PID/stat field 22), read at accept.
	start uint64
	// pidfd refers to the connecting process itself; -1 without
	// SO_PEERPIDFD (then only the start time tells a reused pid apart).
	// mu orders its use with close (a connection is closed from another
	// goroutine at shutdown).
	mu     sync.Mutex
	pidfd  int
	closed bool
}

// errPeerGone: the connecting process exited, its pid was reused, or it
// changed uid since the connection was accepted.
var errPeerGone = errors.New("the process that opened this connection has exited or changed")

// bindPeer reads who opened c. With usePIDFD it asks for SO_PEERPIDFD and
// falls back to the start time when the kernel does not know the option.
// Owner tables are for Windows callers: a Linux caller has its uid.
func bindPeer(c net.Conn, usePIDFD bool, _ *owners.Table) (*peer, error) {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return nil, fmt.Errorf("connection is %T, not a unix socket", c)
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return nil, fmt.Errorf("raw conn: %w", err)
	}
	var (
		cred       *unix.Ucred
		credErr    error
		pidfd      = -1
		pidfdErr   error
		pidfdAsked = usePIDFD
	)
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
		if credErr == nil && pidfdAsked {
			pidfd, pidfdErr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_PEERPIDFD)
		}
	}); err != nil {
		return nil, fmt.Errorf("control: %w", err)
	}
	if credErr != nil {
		return nil, fmt.Errorf("getsockopt SO_PEERCRED: %w", credErr)
	}
	if cred.Pid <= 0 {
		return nil, fmt.Errorf("peer pid %d is not visible here (another pid namespace)", cred.Pid)
	}
	if pidfdErr != nil {
		pidfd = -1
		if !errors.Is(pidfdErr, unix.ENOPROTOOPT) && !errors.Is(pidfdErr, unix.EINVAL) {
			// SO_PEERPIDFD exists but failed: the peer is gone already.
			return nil, fmt.Errorf("getsockopt SO_PEERPIDFD: %w", pidfdErr)
		}
	}
	p := &peer{pid: uint32(cred.Pid), uid: cred.Uid, pidfd: pidfd}
	st, err := readPeer(p.pid)
	if err == nil && p.pidfd >= 0 && pidfdExited(p.pidfd) {
		err = errPeerGone // what was read may be a reused pid's
	}
	if err != nil {
		p.close()
		return nil, fmt.Errorf("peer pid %d: %w", p.pid, err)
	}
	if st.euid != p.uid {
		p.close()
		return nil, fmt.Errorf("peer pid %d has uid %d, the socket's peer uid %d: %w", p.pid, st.euid, p.uid, errPeerGone)
	}
	p.start = st.start
	return p, nil
}

// hasPIDFD reports whether the peer is held by a pidfd.
func (p *peer) hasPIDFD() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pidfd >= 0
}

// verify checks that the connecting process still runs, is the same
// process and has the peer's uid.
func (p *peer) verify() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return errPeerGone
	}
	if p.pidfd >= 0 && pidfdExited(p.pidfd) {
		return errPeerGone
	}
	st, err := readPeer(p.pid)
	if err != nil || st.start != p.start || st.euid != p.uid {
		return errPeerGone
	}
	// With a pidfd, the process was alive after the read: what was read
	// is its own, not a reused pid's.
	if p.pidfd >= 0 && pidfdExited(p.pidfd) {
		return errPeerGone
	}
	return nil
}

func (p *peer) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	if p.pidfd >= 0 {
		unix.Close(p.pidfd)
		p.pidfd = -1
	}
}

// pidfdExited reports whether the process of pidfd exited (a pidfd polls
// readable from the exit on, zombie included).
func pidfdExited(fd int) bool {
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(fds, 0)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		return err != nil || n > 0 && fds[0].Revents != 0
	}
}

type peerStat struct {
	start uint64 // ticks since boot
	euid  uint32
}

// readPeer reads the start time and effective uid of a live process (the
// uid SO_PEERCRED reports) through procfs, which reads every file through
// one handle on the process directory, so a pid reused mid-read fails
// instead of mixing two processes. An exited process (a zombie) is
// errPeerGone; a thread-group leader that exited while its other threads
// run is alive.
func readPeer(pid uint32) (peerStat, error) {
	snap, uids, err := procfs.ReadCreds("", pid)
	if errors.Is(err, fs.ErrNotExist) {
		return peerStat{}, fmt.Errorf("%w: %w", errPeerGone, err)
	}
	if err != nil {
		return peerStat{}, err
	}
	return peerStat{start: snap.ID.Tick(), euid: uids.Effective}, nil
}

// raiseFDLimit raises the soft RLIMIT_NOFILE to the hard limit (the Go
// runtime does so too; this says what the limit is) and returns it.
func raiseFDLimit() (uint64, error) {
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		return 0, fmt.Errorf("getrlimit NOFILE: %w", err)
	}
	if lim.Cur < lim.Max {
		lim.Cur = lim.Max
		if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
			unix.Getrlimit(unix.RLIMIT_NOFILE, &lim)
		}
	}
	return lim.Cur, nil
}

// logPeerBinding says how callers are bound when it is not the best way.
func (s *Server) logPeerBinding() {
	if !s.pidfd {
		s.Log.Info("callers are bound by pid and start time: the kernel has no SO_PEERPIDFD (6.5+)")
	}
}

// peerIdentity names how connections are bound (APIStatus.PeerIdentity).
func peerIdentity(pidfd bool) string {
	if pidfd {
		return "pidfd"
	}
	return "start-time"
}

// peerPIDFDSupported reports whether the kernel knows SO_PEERPIDFD (6.5+).
func peerPIDFDSupported() bool {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer unix.Close(fds[0])
	defer unix.Close(fds[1])
	fd, err := unix.GetsockoptInt(fds[0], unix.SOL_SOCKET, unix.SO_PEERPIDFD)
	if err != nil {
		return false
	}
	unix.Close(fd)
	return true
}
