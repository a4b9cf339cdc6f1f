package etwtest

import (
	"sync"
	"testing"
	"time"

	"github.com/mcptrace/mcptrace/windows/etw"
)

// Session is an ETW session whose events a test delivers. Use New.
type Session struct {
	handler chan *etw.Handler
	stopped chan struct{}
	stop    sync.Once
	fail    chan error

	mu     sync.Mutex
	losses etw.Losses
}

// New returns a Session nothing consumes yet.
func New() *Session {
	return &Session{handler: make(chan *etw.Handler, 1), stopped: make(chan struct{}), fail: make(chan error, 1)}
}

// Consume hands h to Handler and returns when the session is stopped or
// fails (End).
func (s *Session) Consume(h *etw.Handler) error {
	s.handler <- h
	select {
	case <-s.stopped:
		return nil
	case err := <-s.fail:
		return err
	}
}

// Losses returns what SetLosses set.
func (s *Session) Losses() (etw.Losses, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.losses, nil
}

// Stop stops the session: Consume returns.
func (s *Session) Stop() error {
	s.stop.Do(func() { close(s.stopped) })
	return nil
}

// Stopped is closed once the session is stopped.
func (s *Session) Stopped() <-chan struct{} { return s.stopped }

// SetLosses sets the loss counters the session reports.
func (s *Session) SetLosses(l etw.Losses) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.losses = l
}

// End makes Consume return err, as a session that stops by itself.
func (s *Session) End(err error) { s.fail <- err }

// Handler waits (within) until the consumer called Consume and returns
// its Handler; it fails the test otherwise.
func (s *Session) Handler(t testing.TB, within time.Duration) *etw.Handler {
	t.Helper()
	select {
	case h := <-s.handler:
		return h
	case <-time.After(within):
		t.Fatal("nothing started consuming the ETW session")
		return nil
	}
}
