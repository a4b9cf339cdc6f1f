package safefile

import (
	"errors"
	"fmt"
)

// Mode is what the caller will do with the file.
type Mode int

const (
	// Read: the file may belong to root or to the caller.
	Read Mode = iota
	// Write: the file will be replaced; it must belong to the caller.
	Write
)

// MaxBytes bounds what Open reads: configuration files are far smaller.
const MaxBytes = 64 << 20

// maxLinks bounds the symbolic links one walk follows, as the kernel's
// MAXSYMLINKS does.
const maxLinks = 40

// NotYoursError is a file, directory or symbolic link on a path that
// belongs to a user who is neither root nor the caller: the caller must
// not act on the path, and that user should.
type NotYoursError struct {
	Path  string // the file, directory or link, as walked
	What  string // "file", "directory" or "symbolic link"
	Owner uint32 // its owner
	UID   uint32 // the caller's effective uid
}

func (e *NotYoursError) Error() string {
	return fmt.Sprintf("%s %s belongs to uid %d, not to uid %d", e.What, e.Path, e.Owner, e.UID)
}

// ErrChanged: the file at the name is not the one that was read any
// more; nothing was replaced.
var ErrChanged = errors.New("the file changed while it was rewritten")

// ErrUnsafeDir: PrivateDir refused a directory.
var ErrUnsafeDir = errors.New("unsafe directory")
