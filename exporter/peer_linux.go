package exporter

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"

	"golang.org/x/sys/unix"
)

// identify names c's peer: "uid N" when the kernel finds the connecting
// socket on this host (in this network namespace) and says whose it is,
// "addr IP" for another host. A loopback peer the kernel does not name
// (sock_diag unavailable: no tcp_diag, or a peer in another network
// namespace behind a loopback proxy) is peerUnknown, bound only by the
// total: two connections of whoever that is must not shut out every
// other local scraper.
func identify(c net.Conn) string {
	local, lok := c.LocalAddr().(*net.TCPAddr)
	remote, rok := c.RemoteAddr().(*net.TCPAddr)
	if !lok || !rok {
		return peerUnknown
	}
	if uid, err := socketUID(remote.AddrPort(), local.AddrPort()); err == nil {
		return fmt.Sprintf("uid %d", uid)
	}
	if remote.AddrPort().Addr().Unmap().IsLoopback() {
		return peerUnknown
	}
	return "addr " + remote.AddrPort().Addr().Unmap().String()
}

// errNoSocket: no socket of this host has that pair of addresses.
var errNoSocket = errors.New("no such socket on this host")

// socketUID asks the kernel (NETLINK_SOCK_DIAG, one exact lookup) for the
// uid that owns the TCP socket whose own address is src and whose peer is
// dst. An IPv4 pair is looked up among IPv4 sockets, then among IPv6
// sockets that hold it mapped.
func socketUID(src, dst netip.AddrPort) (uint32, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.NETLINK_SOCK_DIAG)
	if err != nil {
		return 0, fmt.Errorf("sock_diag: %w", err)
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return 0, fmt.Errorf("sock_diag: %w", err)
	}
	tv := unix.Timeval{Sec: 1}
	unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	s, d := src.Addr().Unmap(), dst.Addr().Unmap()
	if s.Is4() && d.Is4() {
		uid, err := diagLookup(fd, unix.AF_INET, s, src.Port(), d, dst.Port())
		if !errors.Is(err, errNoSocket) {
			return uid, err
		}
		s, d = netip.AddrFrom16(s.As16()), netip.AddrFrom16(d.As16())
	}
	return diagLookup(fd, unix.AF_INET6, s, src.Port(), d, dst.Port())
}

// Sizes of the kernel's structures (linux/inet_diag.h).
const (
	sizeofSockID  = 48 // sport, dport, src[4], dst[4], if, cookie[2]
	sizeofDiagReq = 8 + sizeofSockID
	// The uid in struct inet_diag_msg: family, state, timer, retrans
	// (4 bytes), the sockid, then expires, rqueue, wqueue (12 bytes).
	diagMsgUID = 4 + sizeofSockID + 12
)

func diagLookup(fd int, family uint8, src netip.Addr, sport uint16, dst netip.Addr, dport uint16) (uint32, error) {
	req := make([]byte, unix.SizeofNlMsghdr+sizeofDiagReq)
	ne := binary.NativeEndian
	ne.PutUint32(req[0:], uint32(len(req)))
	ne.PutUint16(req[4:], unix.SOCK_DIAG_BY_FAMILY)
	ne.PutUint16(req[6:], unix.NLM_F_REQUEST)
	r := req[unix.SizeofNlMsghdr:]
	r[0], r[1] = family, unix.IPPROTO_TCP
	ne.PutUint32(r[4:], ^uint32(0)) // every state
	id := r[8:]
	binary.BigEndian.PutUint16(id[0:], sport)
	binary.BigEndian.PutUint16(id[2:], dport)
	s, d := src.AsSlice(), dst.AsSlice()
	copy(id[4:20], s)
	copy(id[20:36], d)
	ne.PutUint32(id[40:], ^uint32(0)) // INET_DIAG_NOCOOKIE
	ne.PutUint32(id[44:], ^uint32(0))
	if err := unix.Sendto(fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return 0, fmt.Errorf("sock_diag: %w", err)
	}
	buf := make([]byte, 4096)
	n, _, err := unix.Recvfrom(fd, buf, 0)
	if err != nil {
		return 0, fmt.Errorf("sock_diag: %w", err)
	}
	msgs, err := syscall.ParseNetlinkMessage(buf[:n])
	if err != nil {
		return 0, fmt.Errorf("sock_diag: %w", err)
	}
	for _, m := range msgs {
		switch m.Header.Type {
		case unix.NLMSG_ERROR:
			if len(m.Data) >= 4 {
				if errno := unix.Errno(-int32(ne.Uint32(m.Data))); errno != 0 {
					if errno == unix.ENOENT {
						return 0, errNoSocket
					}
					return 0, fmt.Errorf("sock_diag: %w", errno)
				}
			}
		case unix.SOCK_DIAG_BY_FAMILY:
			if len(m.Data) >= diagMsgUID+4 {
				return ne.Uint32(m.Data[diagMsgUID:]), nil
			}
		}
	}
	return 0, errNoSocket
}
