package state

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/windows"
)

// dir is the state directory on Windows. Who may write it is settled
// before Open (the agent makes it for SYSTEM and Administrators alone and
// refuses one another user made: agent/securedir_windows.go); here it is
// checked to be a plain directory, not a reparse point, and locked by a
// file held open with no sharing, so a second agent is refused.
type dir struct {
	path string
	lock windows.Handle
}

// lockName is the lock file in the state directory.
const lockName = "lock"

func openDir(path string) (*dir, error) {
	if path == "" {
		return nil, errors.New("state: Options.Dir is empty")
	}
	if err := os.MkdirAll(path, 0o700); err != nil {
		return nil, fmt.Errorf("state: creating %s: %w", path, err)
	}
	fi, err := os.Lstat(path)
	if err != nil {
		return nil, fmt.Errorf("state: %w", err)
	}
	if fi.Mode()&(fs.ModeSymlink|fs.ModeIrregular) != 0 || !fi.IsDir() {
		return nil, fmt.Errorf("%w: %s is not a plain directory (a junction or link?)", ErrUnsafeDir, path)
	}
	p, err := windows.UTF16PtrFromString(filepath.Join(path, lockName))
	if err != nil {
		return nil, err
	}
	h, err := windows.CreateFile(p, windows.GENERIC_READ|windows.GENERIC_WRITE, 0, nil, windows.OPEN_ALWAYS, windows.FILE_ATTRIBUTE_NORMAL, 0)
	if errors.Is(err, windows.ERROR_SHARING_VIOLATION) {
		return nil, fmt.Errorf("%w: %s", ErrLocked, path)
	}
	if err != nil {
		return nil, fmt.Errorf("state: locking %s: %w", path, err)
	}
	return &dir{path: path, lock: h}, nil
}

func (d *dir) close() error { return windows.CloseHandle(d.lock) }

func (d *dir) name(n string) string { return filepath.Join(d.path, n) }

// entry is a name in the directory, and whether it is a regular file.
type entry struct {
	name    string
	regular bool
}

func (d *dir) list() ([]entry, error) {
	des, err := os.ReadDir(d.path)
	if err != nil {
		return nil, fmt.Errorf("state: listing %s: %w", d.path, err)
	}
	ents := make([]entry, 0, len(des))
	for _, de := range des {
		if de.Name() == lockName {
			continue
		}
		ents = append(ents, entry{name: de.Name(), regular: de.Type().IsRegular()})
	}
	return ents, nil
}

// readFile reads a whole regular file (never through a link).
func (d *dir) readFile(name string) ([]byte, error) {
	fi, err := os.Lstat(d.name(name))
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("state: %s is not a regular file", d.name(name))
	}
	return os.ReadFile(d.name(name))
}

func (d *dir) size(name string) (int64, error) {
	fi, err := os.Lstat(d.name(name))
	if err != nil {
		return 0, err
	}
	return fi.Size(), nil
}

func (d *dir) exists(name string) (bool, error) {
	_, err := os.Lstat(d.name(name))
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	return err == nil, err
}

// create opens name for writing, 0600: exclusive (fails if it exists) or
// truncating.
func (d *dir) create(name string, excl bool) (*file, error) {
	disp := uint32(windows.CREATE_ALWAYS)
	if excl {
		disp = windows.CREATE_NEW
	}
	p, err := windows.UTF16PtrFromString(d.name(name))
	if err != nil {
		return nil, err
	}
	// FILE_SHARE_DELETE: a segment is renamed while it is still open, as
	// on Linux.
	h, err := windows.CreateFile(p, windows.GENERIC_WRITE, windows.FILE_SHARE_READ|windows.FILE_SHARE_WRITE|windows.FILE_SHARE_DELETE,
		nil, disp, windows.FILE_ATTRIBUTE_NORMAL, 0)
	if err != nil {
		return nil, fmt.Errorf("state: creating %s: %w", name, err)
	}
	return &file{f: os.NewFile(uintptr(h), d.name(name))}, nil
}

// rename replaces to with from, written through: NTFS journals its
// metadata, and MOVEFILE_WRITE_THROUGH returns once the move is on disk,
// which is what a directory's fsync gives on Linux.
func (d *dir) rename(from, to string) error {
	f, err := windows.UTF16PtrFromString(d.name(from))
	if err != nil {
		return err
	}
	t, err := windows.UTF16PtrFromString(d.name(to))
	if err != nil {
		return err
	}
	if err := windows.MoveFileEx(f, t, windows.MOVEFILE_REPLACE_EXISTING|windows.MOVEFILE_WRITE_THROUGH); err != nil {
		return fmt.Errorf("state: renaming %s to %s: %w", from, to, err)
	}
	return nil
}

func (d *dir) remove(name string) error {
	if err := os.Remove(d.name(name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("state: removing %s: %w", name, err)
	}
	return nil
}

// truncate cuts a regular file to size bytes.
func (d *dir) truncate(name string, size int64) error {
	if err := os.Truncate(d.name(name), size); err != nil {
		return fmt.Errorf("state: truncating %s: %w", name, err)
	}
	return nil
}

// sync: renames are written through (rename), and Windows has no fsync of
// a directory.
func (d *dir) sync() error { return nil }

// file is an open file written at explicit offsets.
type file struct{ f *os.File }

func (f *file) writeAt(b []byte, off int64) error {
	n, err := f.f.WriteAt(b, off)
	if err == nil && n < len(b) {
		err = io.ErrShortWrite
	}
	if err != nil {
		return fmt.Errorf("state: writing %s: %w", f.f.Name(), err)
	}
	return nil
}

func (f *file) truncate(size int64) error { return f.f.Truncate(size) }
func (f *file) sync() error               { return f.f.Sync() }
func (f *file) close() error              { return f.f.Close() }
