package exporter

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
)

// A bounded peer's /metrics beyond MaxInFlightPerPeer at once is
// answered 429 at once; another peer's, root's beyond it, and the probes
// are served.
func TestMetricsRequestsInFlightAreBoundedPerPeer(t *testing.T) {
	p := NewPeers()
	release := make(chan struct{})
	var inside sync.WaitGroup
	h := p.oneAtATime(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/metrics" && r.Header.Get("Hold") != "" {
			inside.Done()
			<-release
		}
		w.WriteHeader(200)
	}))
	req := func(peer, path string, hold bool) int {
		r := httptest.NewRequestWithContext(context.WithValue(context.Background(), peerKey{}, peer), "GET", path, nil)
		if hold {
			r.Header.Set("Hold", "1")
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code
	}
	held := make(chan int, 2*MaxInFlightPerPeer)
	for _, peer := range []string{"uid 1000", peerRoot} {
		for range MaxInFlightPerPeer {
			inside.Add(1)
			go func() { held <- req(peer, "/metrics", true) }()
		}
	}
	inside.Wait()
	if c := req("uid 1000", "/metrics", false); c != http.StatusTooManyRequests {
		t.Errorf("uid 1000's /metrics beyond %d at once: %d, want 429", MaxInFlightPerPeer, c)
	}
	if c := req("uid 1000", "/healthz", false); c != 200 {
		t.Errorf("the same peer's probe: %d, want 200", c)
	}
	if c := req("uid 1001", "/metrics", false); c != 200 {
		t.Errorf("another peer's /metrics: %d, want 200", c)
	}
	if c := req(peerRoot, "/metrics", false); c != 200 {
		t.Errorf("root's /metrics beyond %d at once: %d, want 200 (root is bound by the total only)", MaxInFlightPerPeer, c)
	}
	close(release)
	for range 2 * MaxInFlightPerPeer {
		if c := <-held; c != 200 {
			t.Errorf("a held request: %d", c)
		}
	}
	if c := req("uid 1000", "/metrics", false); c != 200 {
		t.Errorf("the peer's next /metrics: %d, want 200", c)
	}
	if n := p.Refused()["peer-in-flight"]; n != 1 {
		t.Errorf("refused in flight: %d, want 1", n)
	}
}
