package api

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
)

// DefaultSocket is where the agent serves and clients connect
// (api.socket): a unix socket.
const DefaultSocket = "/run/mcptrace/mcptrace.sock"

// pipeSockets: the API is served on a unix socket here.
const pipeSockets = false

// Listen creates the socket's directory (0755) and the socket with mode,
// replacing a stale socket file left by a previous agent.
func Listen(path string, mode os.FileMode) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("create socket directory: %w", err)
	}
	if c, err := net.Dial("unix", path); err == nil {
		c.Close()
		return nil, fmt.Errorf("listen on %s: another agent is already serving there", path)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("remove stale socket %s: %w", path, err)
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	if err := os.Chmod(path, mode); err != nil {
		l.Close()
		return nil, fmt.Errorf("chmod socket %s: %w", path, err)
	}
	return l, nil
}

// dial connects to the agent's socket.
func dial(ctx context.Context, socket string) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, "unix", socket)
}
