package api

import (
	"fmt"
	"net"

	"golang.org/x/sys/unix"
)

// peerCred reads SO_PEERCRED from a unix socket connection: the kernel's
// record of who connected, which the client cannot forge.
func peerCred(c net.Conn) (Caller, error) {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return Caller{}, fmt.Errorf("connection is %T, not a unix socket", c)
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return Caller{}, fmt.Errorf("raw conn: %w", err)
	}
	var cred *unix.Ucred
	var serr error
	if err := raw.Control(func(fd uintptr) {
		cred, serr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return Caller{}, fmt.Errorf("control: %w", err)
	}
	if serr != nil {
		return Caller{}, fmt.Errorf("getsockopt SO_PEERCRED: %w", serr)
	}
	return Caller{PID: uint32(cred.Pid), UID: cred.Uid}, nil
}
