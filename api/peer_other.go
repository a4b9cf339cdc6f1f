//go:build !linux

package api

import (
	"errors"
	"net"
)

type peer struct {
	pid, uid uint32
	start    uint64
}

var errPeerGone = errors.New("the process that opened this connection has exited or changed")

func bindPeer(net.Conn, bool) (*peer, error) {
	return nil, errors.New("peer credentials are not supported on this OS")
}

func (p *peer) hasPIDFD() bool { return false }
func (p *peer) verify() error  { return errPeerGone }
func (p *peer) close()         {}

func raiseFDLimit() (uint64, error) { return 0, errors.New("not supported on this OS") }

func peerPIDFDSupported() bool { return false }
