//go:build !linux

package exporter

import "net"

// identify names c's peer by its remote address: without sock_diag the
// owner of a local socket is not asked, and a loopback peer is
// peerUnknown, bound by the total only (as one peer, two connections of
// any local user would shut out every other).
func identify(c net.Conn) string {
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok && !a.AddrPort().Addr().Unmap().IsLoopback() {
		return "addr " + a.AddrPort().Addr().Unmap().String()
	}
	return peerUnknown
}
