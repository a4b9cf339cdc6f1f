package config

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/mcptrace/mcptrace/api"
	"github.com/mcptrace/mcptrace/exporter"
)

// absPath accepts an absolute path (api.IsAbsPath: Linux paths count as
// absolute on every system).
func absPath(p string) error {
	if !api.IsAbsPath(p) {
		return fmt.Errorf("must be an absolute path, got %q", p)
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

// listenAddress accepts "" (off) or host:port with a numeric port; port 0
// takes a free port, which the agent logs.
func listenAddress(s string) error {
	if s == "" {
		return nil
	}
	_, port, err := net.SplitHostPort(s)
	if err != nil {
		return fmt.Errorf("must be host:port (e.g. %s) or empty for no metrics, got %q", exporter.DefaultListenAddress, s)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("port must be a number from 0 (any free port) to 65535, got %q", port)
	}
	return nil
}
