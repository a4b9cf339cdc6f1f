package procfs

import (
	"encoding/binary"
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// What a stdio MCP server started by a Node.js host reads is not a pipe
// but one end of a unix socketpair (libuv's "pipe"). Whether its peer can
// still write is not in /proc: the kernel's sock_diag netlink interface
// says it (linux/unix_diag.h, kept here because x/sys/unix lacks it).
const (
	udiagShowPeer     = 0x4
	unixDiagShutdown  = 6
	rcvShutdown       = 1 // sk_shutdown bit: nothing more will be received
	unixDiagReqSize   = 24
	unixDiagMsgSize   = 16
	nlmsgHeaderLength = 16
)

// ErrNoSuchSocket: no unix socket has the inode (it is closed, or not a
// unix socket).
var ErrNoSuchSocket = errors.New("no unix socket with that inode")

// UnixPeerClosed reports whether the unix socket with inode ino can
// receive nothing more: its peer closed (every process that held the
// other end exited or closed it) or shut down writing. A stream
// socketpair's survivor sees that as soon as the last holder of the other
// end is gone.
func UnixPeerClosed(ino uint64) (bool, error) {
	if ino > 0xffffffff {
		return false, fmt.Errorf("sock_diag: inode %d does not fit the request", ino)
	}
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.NETLINK_SOCK_DIAG)
	if err != nil {
		return false, fmt.Errorf("sock_diag: %w", err)
	}
	defer unix.Close(fd)
	req := make([]byte, nlmsgHeaderLength+unixDiagReqSize)
	le := binary.NativeEndian
	le.PutUint32(req[0:], uint32(len(req)))
	le.PutUint16(req[4:], unix.SOCK_DIAG_BY_FAMILY)
	le.PutUint16(req[6:], unix.NLM_F_REQUEST)
	le.PutUint32(req[8:], 1) // sequence
	r := req[nlmsgHeaderLength:]
	r[0] = unix.AF_UNIX
	le.PutUint32(r[4:], 0xffffffff) // every state
	le.PutUint32(r[8:], uint32(ino))
	le.PutUint32(r[12:], udiagShowPeer)
	le.PutUint32(r[16:], 0xffffffff) // no cookie
	le.PutUint32(r[20:], 0xffffffff)
	if err := unix.Sendto(fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return false, fmt.Errorf("sock_diag: send: %w", err)
	}
	buf := make([]byte, 4096)
	n, _, err := unix.Recvfrom(fd, buf, 0)
	if err != nil {
		return false, fmt.Errorf("sock_diag: receive: %w", err)
	}
	for b := buf[:n]; len(b) >= nlmsgHeaderLength; {
		l, typ := int(le.Uint32(b[0:])), le.Uint16(b[4:])
		if l < nlmsgHeaderLength || l > len(b) {
			break
		}
		data := b[nlmsgHeaderLength:l]
		b = b[(l+3)&^3:]
		switch typ {
		case unix.NLMSG_ERROR:
			if len(data) < 4 {
				return false, fmt.Errorf("sock_diag: error without a code")
			}
			switch errno := unix.Errno(-int32(le.Uint32(data[:4]))); errno {
			case 0:
				continue
			case unix.ENOENT:
				return false, ErrNoSuchSocket
			default:
				return false, fmt.Errorf("sock_diag: %w", errno)
			}
		case unix.SOCK_DIAG_BY_FAMILY:
			if len(data) < unixDiagMsgSize {
				return false, fmt.Errorf("sock_diag: short answer")
			}
			for attrs := data[unixDiagMsgSize:]; len(attrs) >= 4; {
				al, at := int(le.Uint16(attrs[0:])), le.Uint16(attrs[2:])
				if al < 4 || al > len(attrs) {
					break
				}
				if at == unixDiagShutdown && al >= 5 {
					return attrs[4]&rcvShutdown != 0, nil
				}
				attrs = attrs[min((al+3)&^3, len(attrs)):]
			}
			return false, fmt.Errorf("sock_diag: the answer for inode %d says nothing of shutdown (kernel too old?)", ino)
		}
	}
	return false, fmt.Errorf("sock_diag: no answer for inode %d", ino)
}
