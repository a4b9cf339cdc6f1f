//go:build !linux && !windows

package api

import (
	"context"
	"errors"
	"net"
	"os"
)

// DefaultSocket is where clients look for the agent (api.socket): the
// Linux agent's unix socket.
const DefaultSocket = "/run/mcptrace/mcptrace.sock"

// pipeSockets: sockets here are unix sockets.
const pipeSockets = false

// Listen is not supported here: the server cannot tell who connected
// (see bindPeer).
func Listen(string, os.FileMode) (net.Listener, error) {
	return nil, errors.New("serving the API is not supported on this OS")
}

// dial connects to a unix socket.
func dial(ctx context.Context, socket string) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, "unix", socket)
}
