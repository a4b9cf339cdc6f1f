//go:build !linux

package exporter

import "net"

// identify names c's peer by its remote address: without sock_diag the
// owner of a local socket is not asked, and every local user is one peer.
func identify(c net.Conn) string {
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		return "addr " + a.AddrPort().Addr().Unmap().String()
	}
	return "unknown"
}
