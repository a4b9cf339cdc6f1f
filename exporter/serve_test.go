package exporter

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
)

// A peer's second /metrics while its first is served is answered 429 at
// once; another peer's, and the probes, are served.
func TestOneMetricsRequestAtATimePerPeer(t *testing.T) {
	p := NewPeers()
	inside, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	h := p.oneAtATime(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/metrics" && r.Context().Value(peerKey{}) == "uid 1000" {
			once.Do(func() { close(inside) })
			<-release
		}
		w.WriteHeader(200)
	}))
	req := func(peer, path string) int {
		r := httptest.NewRequestWithContext(context.WithValue(context.Background(), peerKey{}, peer), "GET", path, nil)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code
	}
	first := make(chan int)
	go func() { first <- req("uid 1000", "/metrics") }()
	<-inside
	if c := req("uid 1000", "/metrics"); c != http.StatusTooManyRequests {
		t.Errorf("a second /metrics of the same peer: %d, want 429", c)
	}
	if c := req("uid 1000", "/healthz"); c != 200 {
		t.Errorf("the same peer's probe: %d, want 200", c)
	}
	if c := req("uid 0", "/metrics"); c != 200 {
		t.Errorf("another peer's /metrics: %d, want 200", c)
	}
	close(release)
	if c := <-first; c != 200 {
		t.Errorf("the first: %d", c)
	}
	if c := req("uid 1000", "/metrics"); c != 200 {
		t.Errorf("the peer's next /metrics: %d, want 200", c)
	}
	if n := p.Refused()["peer-in-flight"]; n != 1 {
		t.Errorf("refused in flight: %d, want 1", n)
	}
}
