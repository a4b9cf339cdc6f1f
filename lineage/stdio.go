package lineage

import (
	"fmt"
	"strconv"
)

// FileKind says what kind of file one of a process's standard streams
// was when it executed an image.
type FileKind uint8

const (
	// FileUnknown: not recorded (an event of an older agent, a platform
	// that does not say, a file table the kernel could not read).
	FileUnknown FileKind = iota
	// FileClosed: no file at that descriptor.
	FileClosed
	// FilePipe: a pipe or FIFO.
	FilePipe
	// FileSocket: a socket (a Node.js or Bun host's stdio is a unix
	// socketpair).
	FileSocket
	// FileChar: a character device: /dev/null, a terminal.
	FileChar
	// FileRegular: a regular file.
	FileRegular
	// FileOther: a directory, a block device, a symbolic link.
	FileOther
)

var fileKindNames = [...]string{
	FileUnknown: "unknown", FileClosed: "closed", FilePipe: "pipe", FileSocket: "socket",
	FileChar: "char", FileRegular: "file", FileOther: "other",
}

func (k FileKind) String() string {
	if int(k) < len(fileKindNames) {
		return fileKindNames[k]
	}
	return "filekind(" + strconv.Itoa(int(k)) + ")"
}

// MarshalText returns the kind's name; an unknown kind is an error.
func (k FileKind) MarshalText() ([]byte, error) {
	if int(k) >= len(fileKindNames) {
		return nil, fmt.Errorf("unknown file kind %d", k)
	}
	return []byte(fileKindNames[k]), nil
}

// UnmarshalText reads a kind's name, as MarshalText writes it.
func (k *FileKind) UnmarshalText(b []byte) error {
	for i, n := range fileKindNames {
		if n == string(b) {
			*k = FileKind(i)
			return nil
		}
	}
	return fmt.Errorf("unknown file kind %q", b)
}

// Connected reports whether the stream is a pipe or a socket: something
// another process holds the other end of.
func (k FileKind) Connected() bool { return k == FilePipe || k == FileSocket }

// FileKindOfMode returns the kind of a file of inode mode mode (the
// S_IFMT bits, as stat(2) gives them).
func FileKindOfMode(mode uint32) FileKind {
	switch mode & 0o170000 {
	case 0o010000:
		return FilePipe
	case 0o140000:
		return FileSocket
	case 0o020000:
		return FileChar
	case 0o100000:
		return FileRegular
	case 0:
		return FileUnknown
	}
	return FileOther
}

// Stdio is what a process's standard input and output were when it
// executed an image, as the kernel saw them at the exec (or /proc, for a
// process older than the agent). A host talks to the MCP servers it
// starts over pipes or sockets on both; the commands it runs for itself
// often read /dev/null or a terminal, and a launcher's helper is
// commonly started on /dev/null.
type Stdio struct {
	In  FileKind `json:"in,omitzero"`
	Out FileKind `json:"out,omitzero"`
}

// Known reports whether both streams were recorded.
func (s Stdio) Known() bool { return s.In != FileUnknown && s.Out != FileUnknown }

// Connected reports whether both streams are pipes or sockets: the
// process can speak a protocol over stdio with whoever holds the other
// ends.
func (s Stdio) Connected() bool { return s.In.Connected() && s.Out.Connected() }
