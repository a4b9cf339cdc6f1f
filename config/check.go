package config

import (
	"errors"
	"fmt"
	"log/slog"
	"math/bits"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// maxSocketPath is the longest unix socket path: sun_path holds 108 bytes
// with the terminating NUL.
const maxSocketPath = 107

// maxAPIConnections bounds api.max-connections: each connection holds two
// file descriptors (socket, pidfd) and a goroutine.
const maxAPIConnections = 4096

// maxRingBuffer bounds the ring buffer, which is locked kernel memory.
const maxRingBuffer = 1 << 30

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

func fileMode(m os.FileMode) error {
	if m&^os.ModePerm != 0 {
		return fmt.Errorf("must be permission bits between 0000 and 0777, got %s", formatMode(m))
	}
	return nil
}

func ringBufferSize(n int) error {
	page := os.Getpagesize()
	if n < page || n > maxRingBuffer || bits.OnesCount(uint(n)) != 1 {
		return fmt.Errorf("must be a power of two multiple of the page size (%d) up to %d, such as %d (8 MiB), got %d",
			page, maxRingBuffer, Default().BPF.RingBufferSize, n)
	}
	return nil
}

func atLeast(d, least time.Duration) error {
	if d < least {
		if least == time.Nanosecond {
			return fmt.Errorf("must be positive, got %s", d)
		}
		return fmt.Errorf("must be at least %s, got %s", least, d)
	}
	return nil
}

func logLevel(s string) error {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return fmt.Errorf("must be debug, info, warn or error, got %q", s)
	}
	return nil
}

func oneOf(s string, allowed ...string) error {
	for _, a := range allowed {
		if s == a {
			return nil
		}
	}
	return errors.New("must be " + strings.Join(allowed, " or ") + fmt.Sprintf(", got %q", s))
}

// pid accepts 0 (no PID) or a PID the kernel can hand out (at most 2^22).
func pid(n int) error {
	if n < 0 || n > 1<<22 {
		return fmt.Errorf("must be 0 or a PID (1 to %d), got %d", 1<<22, n)
	}
	return nil
}

// maxActivePerUID is the largest sessions.max-active-per-uid accepted.
const maxActivePerUID = 1 << 16

// between accepts n in [lo, hi].
func between(n, lo, hi int) error {
	if n < lo || n > hi {
		return fmt.Errorf("must be between %d and %d, got %d", lo, hi, n)
	}
	return nil
}
