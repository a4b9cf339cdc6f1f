package safefile

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// File is a file Open read, with a handle on its real directory.
type File struct {
	// Name is the path as the caller named it; Dir the real directory
	// the walk reached (no symbolic link in it), Base the file's name
	// there.
	Name, Dir, Base string
	// Data is what the file held when it was opened.
	Data []byte

	dirfd    int
	uid, gid uint32
	mode     uint32
	dev, ino uint64
}

// Open walks name (relative names from the working directory) through
// what root or the caller owns, opens the file through its directory's
// handle and reads it whole (at most MaxBytes). mode Write also requires
// the file to be the caller's own. Close releases the handle.
func Open(name string, mode Mode) (*File, error) {
	uid := uint32(os.Geteuid())
	trusted := func(owner uint32) bool { return owner == 0 || owner == uid }
	abs := name
	if !filepath.IsAbs(abs) {
		wd, err := os.Getwd()
		if err != nil {
			return nil, err
		}
		abs = filepath.Join(wd, abs)
	}
	dirfd, dir, base, err := walk(filepath.Clean(abs), uid, trusted)
	if err != nil {
		return nil, err
	}
	f := &File{Name: name, Dir: dir, Base: base, dirfd: dirfd}
	if err := f.read(uid, mode, trusted); err != nil {
		unix.Close(dirfd)
		return nil, err
	}
	return f, nil
}

// walk resolves path (absolute and clean) from "/" through directories
// and links trusted owns, and returns a handle on the real directory of
// its last component, that directory's path, and the component.
func walk(path string, uid uint32, trusted func(uint32) bool) (int, string, string, error) {
	if path == "/" {
		return -1, "", "", fmt.Errorf("%s: is a directory", path)
	}
	for links := 0; ; {
		fd, err := openDir(unix.AT_FDCWD, "/")
		if err != nil {
			return -1, "", "", err
		}
		real := "/"
		comps := strings.Split(path[1:], "/")
		restart := ""
		for i, c := range comps {
			where := filepath.Join(real, c)
			if i == len(comps)-1 {
				var st unix.Stat_t
				err := unix.Fstatat(fd, c, &st, unix.AT_SYMLINK_NOFOLLOW)
				if err == nil && st.Mode&unix.S_IFMT != unix.S_IFLNK {
					return fd, real, c, nil // the file, opened by the caller through fd
				}
				if err != nil {
					unix.Close(fd)
					return -1, "", "", &fs.PathError{Op: "stat", Path: where, Err: err}
				}
			}
			pfd, err := unix.Openat(fd, c, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if err != nil {
				unix.Close(fd)
				return -1, "", "", &fs.PathError{Op: "open", Path: where, Err: err}
			}
			var st unix.Stat_t
			if err := unix.Fstat(pfd, &st); err != nil {
				unix.Close(pfd)
				unix.Close(fd)
				return -1, "", "", &fs.PathError{Op: "stat", Path: where, Err: err}
			}
			switch st.Mode & unix.S_IFMT {
			case unix.S_IFLNK:
				if !trusted(st.Uid) {
					unix.Close(pfd)
					unix.Close(fd)
					return -1, "", "", &NotYoursError{Path: where, What: "symbolic link", Owner: st.Uid, UID: uid}
				}
				target, err := readLink(pfd)
				unix.Close(pfd)
				if err != nil {
					unix.Close(fd)
					return -1, "", "", &fs.PathError{Op: "readlink", Path: where, Err: err}
				}
				if links++; links > maxLinks {
					unix.Close(fd)
					return -1, "", "", &fs.PathError{Op: "open", Path: where, Err: unix.ELOOP}
				}
				if !filepath.IsAbs(target) {
					target = filepath.Join(real, target)
				}
				restart = filepath.Clean(filepath.Join(append([]string{target}, comps[i+1:]...)...))
			case unix.S_IFDIR:
				unix.Close(pfd)
				if !trusted(st.Uid) {
					unix.Close(fd)
					return -1, "", "", &NotYoursError{Path: where, What: "directory", Owner: st.Uid, UID: uid}
				}
				next, err := openDir(fd, c)
				unix.Close(fd)
				if err != nil {
					return -1, "", "", &fs.PathError{Op: "open", Path: where, Err: err}
				}
				// The directory held is the one checked: an exchange
				// between the two opens is refused, not followed.
				var held unix.Stat_t
				if err := unix.Fstat(next, &held); err != nil || held.Dev != st.Dev || held.Ino != st.Ino {
					unix.Close(next)
					return -1, "", "", &fs.PathError{Op: "open", Path: where, Err: errors.New("replaced while it was opened")}
				}
				fd, real = next, where
				continue
			default:
				unix.Close(pfd)
				unix.Close(fd)
				return -1, "", "", &fs.PathError{Op: "open", Path: where, Err: unix.ENOTDIR}
			}
			break // a link: walk its target from "/"
		}
		unix.Close(fd)
		if path = restart; path == "/" {
			return -1, "", "", fmt.Errorf("%s: is a directory", path)
		}
	}
}

// openDir opens name in dirfd as a directory, never through a link.
func openDir(dirfd int, name string) (int, error) {
	for {
		fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err == unix.EINTR {
			continue
		}
		return fd, err
	}
}

// readLink reads the link an O_PATH handle is on.
func readLink(fd int) (string, error) {
	buf := make([]byte, unix.PathMax)
	n, err := unix.Readlinkat(fd, "", buf)
	if err != nil {
		return "", err
	}
	if n >= len(buf) {
		return "", unix.ENAMETOOLONG
	}
	return string(buf[:n]), nil
}

// read opens f.Base in its directory, checks it is a regular file trusted
// owns (the caller's own for Write) and reads it.
func (f *File) read(uid uint32, mode Mode, trusted func(uint32) bool) error {
	where := filepath.Join(f.Dir, f.Base)
	fd, err := unix.Openat(f.dirfd, f.Base, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return &fs.PathError{Op: "open", Path: where, Err: err}
	}
	file := os.NewFile(uintptr(fd), where)
	defer file.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return &fs.PathError{Op: "stat", Path: where, Err: err}
	}
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		return fmt.Errorf("%s: not a regular file", where)
	case !trusted(st.Uid) || mode == Write && st.Uid != uid:
		return &NotYoursError{Path: where, What: "file", Owner: st.Uid, UID: uid}
	case st.Size > MaxBytes:
		return fmt.Errorf("%s: larger than %d bytes", where, MaxBytes)
	}
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(&limited{file, MaxBytes + 1}); err != nil {
		return fmt.Errorf("read %s: %w", where, err)
	}
	if buf.Len() > MaxBytes {
		return fmt.Errorf("%s: larger than %d bytes", where, MaxBytes)
	}
	f.Data = buf.Bytes()
	f.uid, f.gid, f.mode, f.dev, f.ino = st.Uid, st.Gid, st.Mode&0o7777, uint64(st.Dev), uint64(st.Ino)
	return nil
}

type limited struct {
	f *os.File
	n int64
}

func (l *limited) Read(p []byte) (int, error) {
	if l.n <= 0 {
		return 0, nil
	}
	p = p[:min(int64(len(p)), l.n)]
	n, err := l.f.Read(p)
	l.n -= int64(n)
	return n, err
}

// Close releases the directory handle.
func (f *File) Close() error {
	if f.dirfd < 0 {
		return nil
	}
	err := unix.Close(f.dirfd)
	f.dirfd = -1
	return err
}

// Replace keeps what the file held as a backup beside it (BASE.mcptrace-
// backup-TIME, or .2, .3 … when that exists), then replaces the file with
// data atomically: a temporary file renamed over it, each with the old
// file's owner, group and mode, all through the directory's handle. It
// refuses (ErrChanged) when the name no longer holds the file that was
// read. It returns the backup's path.
func (f *File) Replace(data []byte) (string, error) {
	where := filepath.Join(f.Dir, f.Base)
	stamp := f.Base + ".mcptrace-backup-" + time.Now().UTC().Format("20060102T150405Z")
	backup := stamp
	for n := 2; ; n++ {
		err := f.writeNew(backup, f.Data)
		if err == nil {
			break
		}
		if !errors.Is(err, unix.EEXIST) || n > 100 {
			return "", fmt.Errorf("keep a copy of %s: %w; the file was not changed", where, err)
		}
		backup = fmt.Sprintf("%s.%d", stamp, n)
	}
	var rnd [6]byte
	rand.Read(rnd[:])
	tmp := f.Base + ".mcptrace-new-" + hex.EncodeToString(rnd[:])
	if err := f.writeNew(tmp, data); err != nil {
		return "", fmt.Errorf("write %s: %w; the file was not changed", filepath.Join(f.Dir, tmp), err)
	}
	var st unix.Stat_t
	if err := unix.Fstatat(f.dirfd, f.Base, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil || uint64(st.Dev) != f.dev || uint64(st.Ino) != f.ino {
		unix.Unlinkat(f.dirfd, tmp, 0)
		return "", fmt.Errorf("%s: %w; it was not changed (the backup %s holds what was read)", where, ErrChanged, filepath.Join(f.Dir, backup))
	}
	if err := unix.Renameat(f.dirfd, tmp, f.dirfd, f.Base); err != nil {
		unix.Unlinkat(f.dirfd, tmp, 0)
		return "", fmt.Errorf("replace %s: %w; the file was not changed", where, err)
	}
	unix.Fsync(f.dirfd)
	return filepath.Join(f.Dir, backup), nil
}

// writeNew writes a file that must not exist yet in f's directory, with
// the old file's owner, group and mode, and syncs it.
func (f *File) writeNew(name string, data []byte) error {
	fd, err := unix.Openat(f.dirfd, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return err
	}
	file := os.NewFile(uintptr(fd), name)
	_, werr := file.Write(data)
	err = errors.Join(werr, f.keepOwner(fd), file.Sync(), file.Close())
	if err != nil {
		unix.Unlinkat(f.dirfd, name, 0)
	}
	return err
}

// keepOwner gives fd the old file's owner (root may), group (when it is
// not the caller's) and mode.
func (f *File) keepOwner(fd int) error {
	switch {
	case os.Geteuid() == 0:
		if err := unix.Fchown(fd, int(f.uid), int(f.gid)); err != nil {
			return fmt.Errorf("keep owner: %w", err)
		}
	case int(f.gid) != os.Getegid():
		if err := unix.Fchown(fd, -1, int(f.gid)); err != nil {
			return fmt.Errorf("keep group %d: %w", f.gid, err)
		}
	}
	if err := unix.Fchmod(fd, f.mode); err != nil {
		return fmt.Errorf("keep mode: %w", err)
	}
	return nil
}

// PrivateDir checks the directory fd is open on (at path, for messages):
// owned by the effective uid and writable by no group or other user; fix
// says what to do about one that is not. Open it with O_NOFOLLOW, so
// that a symbolic link is refused before this is called.
func PrivateDir(fd int, path, fix string) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("stat %s: %w", path, err)
	}
	euid := os.Geteuid()
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFDIR:
		return fmt.Errorf("%w: %s is not a directory: %s", ErrUnsafeDir, path, fix)
	case st.Uid != uint32(euid):
		return fmt.Errorf("%w: %s is owned by uid %d, not by this process's uid %d: %s", ErrUnsafeDir, path, st.Uid, euid, fix)
	case st.Mode&0o022 != 0:
		return fmt.Errorf("%w: %s has mode %04o, writable by group or others: chmod 0700 %s", ErrUnsafeDir, path, st.Mode&0o7777, path)
	}
	return nil
}

// OpenPrivateDir opens path as a directory, never through a symbolic
// link at its last component, and checks it with PrivateDir.
func OpenPrivateDir(path, fix string) (int, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
		if fi, lerr := os.Lstat(path); lerr == nil && fi.Mode()&fs.ModeSymlink != 0 {
			return -1, fmt.Errorf("%w: %s is a symlink: %s", ErrUnsafeDir, path, fix)
		}
		return -1, fmt.Errorf("%w: %s is not a directory: %s", ErrUnsafeDir, path, fix)
	}
	if err != nil {
		return -1, fmt.Errorf("open %s: %w", path, err)
	}
	if err := PrivateDir(fd, path, fix); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}
