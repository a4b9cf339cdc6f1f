package events

import (
	"fmt"
	"os"

	"github.com/mcptrace/mcptrace/safefile"
	"golang.org/x/sys/unix"
)

// exportDir is the export file's directory, held open: every file of the
// export is created, renamed and removed through it, never by a path
// another user could redirect.
type exportDir struct{ fd int }

func openExportDir(path string) (exportDir, error) {
	if err := os.MkdirAll(path, 0o700); err != nil {
		return exportDir{}, err
	}
	fd, err := safefile.OpenPrivateDir(path, fmt.Sprintf("use a directory owned by uid %d and writable by no one else (the file holds every user's events)", os.Geteuid()))
	if err != nil {
		return exportDir{}, err
	}
	return exportDir{fd}, nil
}

// create opens name for appending, creating it 0600; a symbolic link at
// name is refused.
func (d exportDir) create(name string) (*os.File, error) {
	fd, err := unix.Openat(d.fd, name, unix.O_WRONLY|unix.O_APPEND|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: name, Err: err}
	}
	return os.NewFile(uintptr(fd), name), nil
}

func (d exportDir) rename(from, to string) error {
	if err := unix.Renameat(d.fd, from, d.fd, to); err != nil {
		return &os.LinkError{Op: "rename", Old: from, New: to, Err: err}
	}
	return nil
}

func (d exportDir) remove(name string) error {
	if err := unix.Unlinkat(d.fd, name, 0); err != nil {
		return &os.PathError{Op: "remove", Path: name, Err: err}
	}
	return nil
}

func (d exportDir) close() { unix.Close(d.fd) }
