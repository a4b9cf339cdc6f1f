package api

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"sync"

	"golang.org/x/sys/unix"
)

// DefaultSocket is where the agent serves and clients connect
// (api.socket): a unix socket.
const DefaultSocket = "/run/mcptrace/mcptrace.sock"

// pipeSockets: the API is served on a unix socket here.
const pipeSockets = false

// Listen creates the socket's directory (0755) and the socket with mode,
// replacing a stale socket file left by a previous agent. It first takes
// the socket's lock (PATH.lock, flock, held until the listener closes):
// two agents starting at once never both replace the file, and an agent
// still stopping keeps its socket until it is gone. An agent answering
// on the socket, or holding its lock, is ErrServing: Listen then changed
// nothing. The listener's Close removes the socket file, then lets go of
// the lock.
func Listen(path string, mode os.FileMode) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("create socket directory: %w", err)
	}
	lock, err := lockSocket(path)
	if err != nil {
		return nil, err
	}
	if c, err := net.Dial("unix", path); err == nil {
		c.Close()
		lock.Close()
		return nil, fmt.Errorf("listen on %s: %w", path, ErrServing)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		lock.Close()
		return nil, fmt.Errorf("remove stale socket %s: %w", path, err)
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		lock.Close()
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	if err := os.Chmod(path, mode); err != nil {
		l.Close()
		lock.Close()
		return nil, fmt.Errorf("chmod socket %s: %w", path, err)
	}
	return &lockedListener{Listener: l, lock: lock}, nil
}

// lockSocket takes PATH.lock without waiting. The file is the agent's
// own (0600, opened without following a link); a link, or a file of
// another owner (in a directory someone else may write), is not trusted
// to lock anything: it is replaced, once.
func lockSocket(path string) (*os.File, error) {
	name := path + ".lock"
	var f *os.File
	for try := 0; ; try++ {
		fd, err := unix.Open(name, unix.O_RDWR|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if errors.Is(err, unix.ELOOP) && try == 0 {
			// A symbolic link: never followed, replaced.
			if err := os.Remove(name); err != nil {
				return nil, fmt.Errorf("socket lock %s is a symbolic link and cannot be removed: %w", name, err)
			}
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("socket lock: %w", &fs.PathError{Op: "open", Path: name, Err: err})
		}
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			unix.Close(fd)
			return nil, fmt.Errorf("socket lock %s: %w", name, err)
		}
		if st.Uid == uint32(os.Geteuid()) && st.Mode&unix.S_IFMT == unix.S_IFREG {
			f = os.NewFile(uintptr(fd), name)
			break
		}
		unix.Close(fd)
		if try > 0 {
			return nil, fmt.Errorf("socket lock %s belongs to uid %d: put api.socket in a directory only root may write", name, st.Uid)
		}
		if err := os.Remove(name); err != nil {
			return nil, fmt.Errorf("socket lock %s belongs to uid %d and cannot be removed: %w", name, st.Uid, err)
		}
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("listen on %s: %w (it holds %s)", path, ErrServing, name)
		}
		return nil, fmt.Errorf("lock %s: %w", name, err)
	}
	return f, nil
}

// lockedListener holds the socket's lock until it is closed.
type lockedListener struct {
	net.Listener
	lock *os.File
	once sync.Once
	err  error
}

// Close closes the listener, which removes the socket file, then lets go
// of the lock: the next agent finds no socket of this one's.
func (l *lockedListener) Close() error {
	l.once.Do(func() {
		l.err = errors.Join(l.Listener.Close(), l.lock.Close())
	})
	return l.err
}

// dial connects to the agent's socket.
func dial(ctx context.Context, socket string) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, "unix", socket)
}
