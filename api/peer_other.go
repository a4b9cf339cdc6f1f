//go:build !linux && !windows

package api

import (
	"errors"
	"net"

	"github.com/mcptrace/mcptrace/windows/owners"
)

type peer struct {
	pid, uid uint32
	start    uint64
}

var errPeerGone = errors.New("the process that opened this connection has exited or changed")

func bindPeer(net.Conn, bool, *owners.Table) (*peer, error) {
	return nil, errors.New("peer credentials are not supported on this OS")
}

func (p *peer) hasPIDFD() bool { return false }
func (p *peer) verify() error  { return errPeerGone }
func (p *peer) close()         {}

func raiseFDLimit() (uint64, error) { return 0, errors.New("not supported on this OS") }

func peerPIDFDSupported() bool { return false }

// logPeerBinding says that no caller can be served here.
func (s *Server) logPeerBinding() {
	s.Log.Warn("every connection is refused: telling who connected is not supported on this OS")
}

func peerIdentity(bool) string { return "none" }
