package api

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"unicode/utf16"
)

// Bounds of the API's configurable values, checked here and named by
// package config in its errors.
const (
	// MaxSocketPath is the longest unix socket path: sun_path holds 108
	// bytes with the terminating NUL.
	MaxSocketPath = 107
	// MaxPipePath is the longest named pipe path (Windows): the whole
	// \\.\pipe\NAME string is at most 256 characters.
	MaxPipePath = 256
	// MaxConnectionsLimit bounds api.max-connections: each connection
	// holds two file descriptors (socket, pidfd) and a goroutine.
	MaxConnectionsLimit = 4096
)

// IsAbsPath reports whether p is an absolute path: a Linux one (the
// agent's settings are Linux paths on every system the CLI runs on, and
// Windows reads "/run/…" as relative to the current drive) or one this
// system calls absolute (C:\… on Windows).
func IsAbsPath(p string) bool { return strings.HasPrefix(p, "/") || filepath.IsAbs(p) }

// CheckSocketPath says what is wrong with a socket path, if anything: an
// absolute unix socket path, or on Windows a named pipe path
// (\\.\pipe\NAME).
func CheckSocketPath(p string) error {
	if pipeSockets {
		return checkPipePath(p)
	}
	if !IsAbsPath(p) {
		return fmt.Errorf("must be an absolute path, got %q", p)
	}
	if len(p) > MaxSocketPath {
		return fmt.Errorf("must be at most %d bytes long (a unix socket path), got %d", MaxSocketPath, len(p))
	}
	return nil
}

// pipePrefix starts the path of a named pipe on this machine.
const pipePrefix = `\\.\pipe\`

// checkPipePath accepts a local named pipe path: \\.\pipe\ (in any case)
// and a name without backslashes, at most MaxPipePath characters in all.
func checkPipePath(p string) error {
	if len(p) < len(pipePrefix) || !strings.EqualFold(p[:len(pipePrefix)], pipePrefix) {
		return fmt.Errorf("must be a named pipe path, %sNAME, got %q", pipePrefix, p)
	}
	name := p[len(pipePrefix):]
	switch {
	case name == "":
		return fmt.Errorf("must name the pipe after %s, got %q", pipePrefix, p)
	case strings.Contains(name, `\`):
		return fmt.Errorf("a pipe name has no backslash, got %q", name)
	case utf16Len(p) > MaxPipePath:
		return fmt.Errorf("must be at most %d characters long (a named pipe path), got %d", MaxPipePath, utf16Len(p))
	}
	return nil
}

// utf16Len is how many UTF-16 characters Windows counts in s.
func utf16Len(s string) int {
	n := 0
	for _, r := range s {
		n += utf16.RuneLen(r)
	}
	return n
}

// CheckSocketMode accepts the modes a unix socket honours as written: read
// and write for the owner, and for group and others either both or none.
// Connecting needs write permission, read alone grants nothing, execute
// means nothing on a socket, and 0000 would not leave the socket closed
// (the agent took a zero mode as "unset" and opened it to everyone).
func CheckSocketMode(m os.FileMode) error {
	if m&^os.ModePerm != 0 {
		return fmt.Errorf("must be permission bits between 0000 and 0777, got %04o", uint32(m))
	}
	owner, group, other := m>>6&7, m>>3&7, m&7
	if owner != 6 || (group != 0 && group != 6) || (other != 0 && other != 6) {
		return fmt.Errorf("must be 0600, 0660, 0606 or 0666 (read and write for the owner; for group and others both or none: connecting needs write, execute means nothing on a socket), got %04o", uint32(m))
	}
	return nil
}
