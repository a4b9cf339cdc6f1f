//go:build !linux

package api

import (
	"errors"
	"net"
)

func peerCred(net.Conn) (Caller, error) {
	return Caller{}, errors.New("peer credentials are not supported on this OS")
}
