package api

import (
	"errors"
	"fmt"
	"net"
	"runtime"
	"sync"

	"golang.org/x/sys/windows"

	"github.com/mcptrace/mcptrace/windows/owners"
	"github.com/mcptrace/mcptrace/windows/winproc"
)

// peer is the process that opened a pipe connection, bound when the
// connection was accepted: its PID as the pipe has it
// (GetNamedPipeClientProcessId), a handle on that process, held while the
// connection is open (its PID cannot name another process meanwhile), and
// the uid the owners table gives the client's token, read by
// impersonating the client. A later request on the connection acts for
// the peer only while that process runs.
//
// The PID is read from the pipe and the process opened right after: a
// client that exits in between, its PID reused at once, would bind the new
// process. The uid stays its own token's all the same, and a request that
// acts on the caller's process checks that process's owner (callerNode).
type peer struct {
	pid uint32
	uid uint32
	// start is 0: a Windows caller is bound by the handle, not by a start
	// time.
	start uint64
	// mu orders the use of proc with close (a connection is closed from
	// another goroutine at shutdown).
	mu     sync.Mutex
	proc   *winproc.Handle
	closed bool
}

// errPeerGone: the connecting process exited since the connection was
// accepted.
var errPeerGone = errors.New("the process that opened this connection has exited or changed")

// errNoOwners: the server has no table to number callers' tokens with.
var errNoOwners = errors.New("the API server has no owners table (Server.Owners): a caller's token cannot be given a uid")

// bindPeer reads who opened c, a named pipe connection: its process and
// its token's owner in tab.
func bindPeer(c net.Conn, _ bool, tab *owners.Table) (*peer, error) {
	if tab == nil {
		return nil, errNoOwners
	}
	fc, ok := c.(interface{ Fd() uintptr })
	if !ok {
		return nil, fmt.Errorf("connection is %T, not a named pipe", c)
	}
	pipe := windows.Handle(fc.Fd())
	var pid uint32
	if err := windows.GetNamedPipeClientProcessId(pipe, &pid); err != nil {
		return nil, fmt.Errorf("pipe client pid: %w", err)
	}
	proc, err := winproc.Open(pid, 0)
	if err != nil {
		return nil, fmt.Errorf("pipe client: %w", err)
	}
	p := &peer{pid: pid, proc: proc}
	if err := p.verify(); err != nil {
		p.close()
		return nil, fmt.Errorf("pipe client %d: %w", pid, err)
	}
	tok, err := clientToken(pipe)
	if err != nil {
		p.close()
		return nil, fmt.Errorf("pipe client %d: %w", pid, err)
	}
	if p.uid, err = tab.Owner(tok); err != nil {
		p.close()
		return nil, fmt.Errorf("pipe client %d: %w", pid, err)
	}
	return p, nil
}

var procImpersonateNamedPipeClient = windows.NewLazySystemDLL("advapi32.dll").NewProc("ImpersonateNamedPipeClient")

func impersonateNamedPipeClient(pipe windows.Handle) error {
	r, _, err := procImpersonateNamedPipeClient.Call(uintptr(pipe))
	if r == 0 {
		return err
	}
	return nil
}

// clientToken reads the token of the client of pipe: impersonating it on
// a thread of its own, opening the thread's token, reverting. A client
// that connected at identification level (as Client does) suffices; one
// that connected anonymously has no token to read and is refused.
//
// The thread is locked for the impersonation and given back only once
// reverted: if RevertToSelf failed, the goroutine ends still locked, and
// the runtime ends the thread with it rather than run Go code with the
// client's identity.
func clientToken(pipe windows.Handle) (owners.Token, error) {
	type result struct {
		tok owners.Token
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		tok, reverted, err := impersonatedToken(pipe)
		if reverted {
			runtime.UnlockOSThread()
		}
		ch <- result{tok, err}
	}()
	r := <-ch
	return r.tok, r.err
}

// impersonatedToken impersonates the client of pipe on the current
// (locked) thread, opens the thread token and reverts, whatever failed.
// reverted reports whether the thread is itself again.
func impersonatedToken(pipe windows.Handle) (_ owners.Token, reverted bool, _ error) {
	ierr := impersonateNamedPipeClient(pipe)
	var tok windows.Token
	var oerr error
	if ierr == nil {
		// As the agent (openAsSelf): an identification-level token may
		// not open anything itself.
		oerr = windows.OpenThreadToken(windows.CurrentThread(), windows.TOKEN_QUERY, true, &tok)
	}
	if err := windows.RevertToSelf(); err != nil {
		if oerr == nil {
			tok.Close()
		}
		return owners.Token{}, false, fmt.Errorf("revert to self: %w", err)
	}
	if ierr != nil {
		return owners.Token{}, true, fmt.Errorf("impersonate the pipe client: %w", ierr)
	}
	if oerr != nil {
		return owners.Token{}, true, fmt.Errorf("open the pipe client's token: %w", oerr)
	}
	defer tok.Close()
	t, err := winproc.TokenOf(tok)
	if err != nil {
		return owners.Token{}, true, fmt.Errorf("pipe client's token: %w", err)
	}
	return t, true, nil
}

// verify checks that the connecting process still runs.
func (p *peer) verify() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return errPeerGone
	}
	if exited, _, err := p.proc.Exited(); err != nil || exited {
		return errPeerGone
	}
	return nil
}

func (p *peer) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	p.proc.Close()
}

// raiseFDLimit: Windows bounds no handles the API would have to leave
// free.
func raiseFDLimit() (uint64, error) { return 0, errNoFDLimit }

// peerPIDFDSupported: a pidfd is Linux's.
func peerPIDFDSupported() bool { return false }

// logPeerBinding says that no caller can be served without an owners
// table.
func (s *Server) logPeerBinding() {
	if s.Owners == nil {
		s.Log.Error("every connection will be refused", "err", errNoOwners)
	}
}

// peerIdentity names how connections are bound (APIStatus.PeerIdentity).
func peerIdentity(bool) string { return "process-handle" }
