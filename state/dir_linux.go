package state

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/mcptrace/mcptrace/safefile"
)

// dir is the state directory, opened once, checked, and locked. Every file
// operation goes through its descriptor (openat, renameat, unlinkat), so
// swapping the directory for a symlink after Open changes nothing.
type dir struct {
	path string
	fd   int
}

// openDir creates path (0700) when missing, refuses a directory that is a
// symlink, not ours or writable by others, and takes an exclusive lock on it.
func openDir(path string) (*dir, error) {
	if path == "" {
		return nil, errors.New("state: Options.Dir is empty")
	}
	euid := os.Geteuid()
	fix := fmt.Sprintf("use a directory owned by uid %d with mode 0700 (or let the agent create it)", euid)
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		// Parents are searchable (the agent's socket may share one, as
		// /run/mcptrace does); only the state directory itself is private.
		parent := filepath.Dir(path)
		if _, err := os.Stat(parent); errors.Is(err, fs.ErrNotExist) {
			if err := os.MkdirAll(parent, 0o755); err != nil {
				return nil, fmt.Errorf("state: creating %s: %w", parent, err)
			}
			os.Chmod(parent, 0o755) // whatever the umask
		}
		if err := os.Mkdir(path, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			return nil, fmt.Errorf("state: creating %s: %w", path, err)
		}
		fi, err = os.Lstat(path)
	}
	if err != nil {
		return nil, fmt.Errorf("state: %w", err)
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		return nil, fmt.Errorf("%w: %s is a symlink: %s", ErrUnsafeDir, path, fix)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("%w: %s is not a directory: %s", ErrUnsafeDir, path, fix)
	}
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("state: opening %s: %w", path, err)
	}
	d := &dir{path: path, fd: fd}
	// The one check of a private directory, which history.dir gets too.
	if err := safefile.PrivateDir(fd, path, "it holds process command lines: "+fix); err != nil {
		d.close()
		return nil, fmt.Errorf("state: %w", err)
	}
	if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		d.close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s", ErrLocked, path)
		}
		return nil, fmt.Errorf("state: locking %s: %w", path, err)
	}
	return d, nil
}

func (d *dir) close() error { return unix.Close(d.fd) }

// entry is one directory entry; regular is false for anything but a plain
// file (directories, symlinks, fifos...).
type entry struct {
	name    string
	regular bool
}

func (d *dir) list() ([]entry, error) {
	fd, err := unix.Openat(d.fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("state: listing %s: %w", d.path, err)
	}
	f := os.NewFile(uintptr(fd), d.path)
	defer f.Close()
	des, err := f.ReadDir(-1)
	if err != nil {
		return nil, fmt.Errorf("state: listing %s: %w", d.path, err)
	}
	ents := make([]entry, 0, len(des))
	for _, de := range des {
		ents = append(ents, entry{name: de.Name(), regular: de.Type().IsRegular()})
	}
	return ents, nil
}

// readFile reads a whole regular file (never through a symlink, never
// blocking on a fifo).
func (d *dir) readFile(name string) ([]byte, error) {
	fd, err := unix.Openat(d.fd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("state: opening %s: %w", name, err)
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("state: stat %s: %w", name, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("state: %s is not a regular file", name)
	}
	var buf bytes.Buffer
	buf.Grow(int(fi.Size()) + 1)
	if _, err := buf.ReadFrom(f); err != nil {
		return nil, fmt.Errorf("state: reading %s: %w", name, err)
	}
	return buf.Bytes(), nil
}

// size returns a file's size; 0 when it does not exist.
func (d *dir) size(name string) (int64, error) {
	var st unix.Stat_t
	err := unix.Fstatat(d.fd, name, &st, unix.AT_SYMLINK_NOFOLLOW)
	if errors.Is(err, unix.ENOENT) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("state: stat %s: %w", name, err)
	}
	return st.Size, nil
}

func (d *dir) exists(name string) (bool, error) {
	var st unix.Stat_t
	err := unix.Fstatat(d.fd, name, &st, unix.AT_SYMLINK_NOFOLLOW)
	if errors.Is(err, unix.ENOENT) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("state: stat %s: %w", name, err)
	}
	return true, nil
}

// create opens name for writing, 0600, never through a symlink: exclusive
// (fails if it exists) or truncating.
func (d *dir) create(name string, excl bool) (*file, error) {
	flags := unix.O_WRONLY | unix.O_CREAT | unix.O_NOFOLLOW | unix.O_CLOEXEC
	if excl {
		flags |= unix.O_EXCL
	} else {
		flags |= unix.O_TRUNC
	}
	fd, err := unix.Openat(d.fd, name, flags, 0o600)
	if err != nil {
		return nil, fmt.Errorf("state: creating %s: %w", name, err)
	}
	return &file{name: name, fd: fd}, nil
}

func (d *dir) rename(from, to string) error {
	if err := unix.Renameat(d.fd, from, d.fd, to); err != nil {
		return fmt.Errorf("state: renaming %s to %s: %w", from, to, err)
	}
	return nil
}

func (d *dir) remove(name string) error {
	err := unix.Unlinkat(d.fd, name, 0)
	if errors.Is(err, unix.EISDIR) { // a directory that was moved aside (empty, or this fails)
		err = unix.Unlinkat(d.fd, name, unix.AT_REMOVEDIR)
	}
	if err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("state: removing %s: %w", name, err)
	}
	return nil
}

// truncate cuts a regular file to size bytes.
func (d *dir) truncate(name string, size int64) error {
	f, err := d.open(name)
	if err != nil {
		return err
	}
	defer f.close()
	return f.truncate(size)
}

func (d *dir) open(name string) (*file, error) {
	fd, err := unix.Openat(d.fd, name, unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("state: opening %s: %w", name, err)
	}
	return &file{name: name, fd: fd}, nil
}

// sync makes renames and unlinks in the directory durable.
func (d *dir) sync() error {
	if err := unix.Fsync(d.fd); err != nil {
		return fmt.Errorf("state: syncing %s: %w", d.path, err)
	}
	return nil
}

// file is an open file written at explicit offsets: one pwrite(2) per call,
// and the offset does not move past a truncation.
type file struct {
	name string
	fd   int
}

// writeAt writes b at off with a single pwrite(2), and reports a short
// write as an error.
func (f *file) writeAt(b []byte, off int64) error {
	for {
		n, err := unix.Pwrite(f.fd, b, off)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return fmt.Errorf("state: writing %s: %w", f.name, err)
		}
		if n != len(b) {
			return fmt.Errorf("state: writing %s: short write (%d of %d bytes)", f.name, n, len(b))
		}
		return nil
	}
}

func (f *file) truncate(size int64) error {
	if err := unix.Ftruncate(f.fd, size); err != nil {
		return fmt.Errorf("state: truncating %s: %w", f.name, err)
	}
	return nil
}

func (f *file) sync() error {
	if err := unix.Fsync(f.fd); err != nil {
		return fmt.Errorf("state: syncing %s: %w", f.name, err)
	}
	return nil
}

func (f *file) close() error {
	if err := unix.Close(f.fd); err != nil {
		return fmt.Errorf("state: closing %s: %w", f.name, err)
	}
	return nil
}
