package config

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// maxSocketPath is the longest unix socket path: sun_path holds 108 bytes
// with the terminating NUL.
const maxSocketPath = 107

// maxAPIConnections bounds api.max-connections: each connection holds two
// file descriptors (socket, pidfd) and a goroutine.
const maxAPIConnections = 4096

func absPath(p string) error {
	if !filepath.IsAbs(p) {
		return fmt.Errorf("must be an absolute path, got %q", p)
	}
	return nil
}

func socketPath(p string) error {
	if err := absPath(p); err != nil {
		return err
	}
	if len(p) > maxSocketPath {
		return fmt.Errorf("must be at most %d bytes long (a unix socket path), got %d", maxSocketPath, len(p))
	}
	return nil
}

// socketMode accepts the modes a unix socket honours as written: read and
// write for the owner, and for group and others either both or none.
// Connecting needs write permission, read alone grants nothing, execute
// means nothing on a socket, and 0000 would not leave the socket closed (the
// agent took a zero mode as "unset" and opened it to everyone).
func socketMode(m os.FileMode) error {
	if m&^os.ModePerm != 0 {
		return fmt.Errorf("must be permission bits between 0000 and 0777, got %s", formatMode(m))
	}
	owner, group, other := m>>6&7, m>>3&7, m&7
	if owner != 6 || (group != 0 && group != 6) || (other != 0 && other != 6) {
		return fmt.Errorf("must be 0600, 0660, 0606 or 0666 (read and write for the owner; for group and others both or none: connecting needs write, execute means nothing on a socket), got %s", formatMode(m))
	}
	return nil
}

// between accepts v from lo to hi, both included (a count or a duration).
func between[T ~int | ~int64](v, lo, hi T) error {
	if v < lo || v > hi {
		return fmt.Errorf("must be between %v and %v, got %v", lo, hi, v)
	}
	return nil
}

// logLevel accepts the four level names, in any case. slog would also take
// offsets such as "info+2", which name no level the documentation lists.
func logLevel(s string) error {
	switch strings.ToLower(s) {
	case "debug", "info", "warn", "error":
		return nil
	}
	return fmt.Errorf("must be debug, info, warn or error, got %q", s)
}

func oneOf(s string, allowed ...string) error {
	for _, a := range allowed {
		if s == a {
			return nil
		}
	}
	return errors.New("must be " + strings.Join(allowed, " or ") + fmt.Sprintf(", got %q", s))
}

// maxPID is the largest PID the kernel hands out: PIDs are below pid_max,
// which is at most PID_MAX_LIMIT (2^22).
const maxPID = 1<<22 - 1

// pid accepts 0 (no PID) or a PID the kernel can hand out.
func pid(n int) error {
	if n < 0 || n > maxPID {
		return fmt.Errorf("must be 0 or a PID (1 to %d), got %d", maxPID, n)
	}
	return nil
}

// maxActivePerUID is the largest sessions.max-active-per-uid accepted.
const maxActivePerUID = 1 << 16
