package exporter

import (
	"context"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// What one peer of the metrics endpoint may hold. Anyone who reaches the
// address may connect, and a connection costs the agent a file
// descriptor, which the enforcer needs for pidfds: the total is small.
// So that no one peer can fill it (8 keep-alive connections of one local
// user once kept every scrape waiting 10 s), each peer holds at most
// MaxConnectionsPerPeer of them and has at most MaxInFlightPerPeer
// /metrics requests in flight; a connection over the first bound is
// closed at once, a request over the second answered 429, both counted.
// Four and two leave room for a Prometheus pair and a person with curl
// under one uid.
//
// A peer is whom the kernel says: the uid that owns the connecting socket
// when it is on this host (sock_diag; Linux), else the remote address.
// Every uid is a peer of its own, as is every remote address. Root is
// bound by the total alone: it is no attacker, and its scrapers (a
// Prometheus pair, a test, an operator) must not shut each other out. So
// is a loopback connection whose owner the kernel does not say (Windows;
// Linux without tcp_diag), peerUnknown, since one bound for all of them
// would let a few connections of anyone shut out every local scraper.
const (
	MaxConnections        = 16
	MaxConnectionsPerPeer = 4
	MaxInFlightPerPeer    = 2
	IdleTimeout           = 10 * time.Second
)

// peerUnknown is a peer that cannot be told apart from others; peerRoot
// is uid 0 on this host.
const (
	peerUnknown = "unknown"
	peerRoot    = "uid 0"
)

// bounded reports whether peer's connections and requests are bounded
// per peer (else by the total only).
func bounded(peer string) bool { return peer != peerUnknown && peer != peerRoot && peer != "" }

// Peers admits the metrics endpoint's connections by peer and counts
// what it refuses, by reason: "total-cap", "peer-cap" (connections) and
// "peer-in-flight" (a second /metrics of one peer while its first is
// served). One Peers outlives the listeners the agent opens in turn.
type Peers struct {
	mu    sync.Mutex
	conns map[string]int
	total int
	// busy counts the /metrics requests in flight of each bounded peer.
	busy map[string]int

	totalCap, peerCap, inFlight atomic.Uint64
	// identify names a connection's peer (peer_linux.go).
	identify func(net.Conn) string
}

// NewPeers returns an empty Peers.
func NewPeers() *Peers {
	return &Peers{conns: map[string]int{}, busy: map[string]int{}, identify: identify}
}

// Refused is what was refused so far, by reason.
func (p *Peers) Refused() map[string]uint64 {
	return map[string]uint64{"total-cap": p.totalCap.Load(), "peer-cap": p.peerCap.Load(), "peer-in-flight": p.inFlight.Load()}
}

var descMetricsRefused = desc("metrics", "refused_total",
	"Connections and /metrics requests of the metrics endpoint refused, by reason: total-cap, peer-cap (a peer over its connections), peer-in-flight (a peer's /metrics beyond 2 at once). Root is bound by the total only.", "reason")

// Describe and Collect make Peers a collector of its refusals.
func (p *Peers) Describe(ch chan<- *prometheus.Desc) { ch <- descMetricsRefused }

func (p *Peers) Collect(ch chan<- prometheus.Metric) {
	for reason, n := range p.Refused() {
		ch <- prometheus.MustNewConstMetric(descMetricsRefused, prometheus.CounterValue, float64(n), reason)
	}
}

// admit takes a slot for peer, or says why not.
func (p *Peers) admit(peer string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.total >= MaxConnections:
		p.totalCap.Add(1)
		return false
	case bounded(peer) && p.conns[peer] >= MaxConnectionsPerPeer:
		p.peerCap.Add(1)
		return false
	}
	p.total++
	p.conns[peer]++
	return true
}

func (p *Peers) release(peer string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.total--
	if p.conns[peer]--; p.conns[peer] <= 0 {
		delete(p.conns, peer)
	}
}

// listener accepts every connection at once (none waits in the kernel's
// backlog behind another peer's), names its peer, and closes it at once
// when that peer is over its bound or the total is reached.
type listener struct {
	net.Listener
	p *Peers
}

func (l listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		peer := l.p.identify(c)
		if !l.p.admit(peer) {
			c.Close()
			continue
		}
		return &peerConn{Conn: c, peer: peer, p: l.p}, nil
	}
}

// peerConn is an admitted connection; its Close gives its slot back.
type peerConn struct {
	net.Conn
	peer string
	p    *Peers
	once sync.Once
}

func (c *peerConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.p.release(c.peer) })
	return err
}

type peerKey struct{}

// connContext puts the connection's peer in its requests' context.
func connContext(ctx context.Context, c net.Conn) context.Context {
	if pc, ok := c.(*peerConn); ok {
		return context.WithValue(ctx, peerKey{}, pc.peer)
	}
	return ctx
}

// oneAtATime serves /metrics to each bounded peer at most
// MaxInFlightPerPeer requests at a time: one more while those are served
// is answered 429 at once. Other paths (/, the probes) cost nothing to
// speak of and are not held.
func (p *Peers) oneAtATime(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			h.ServeHTTP(w, r)
			return
		}
		peer, _ := r.Context().Value(peerKey{}).(string)
		if !bounded(peer) {
			h.ServeHTTP(w, r) // promhttp's MaxRequestsInFlight bounds these
			return
		}
		p.mu.Lock()
		if p.busy[peer] >= MaxInFlightPerPeer {
			p.mu.Unlock()
			p.inFlight.Add(1)
			w.Header().Set("Retry-After", strconv.Itoa(1))
			http.Error(w, "too many /metrics requests of one peer at a time", http.StatusTooManyRequests)
			return
		}
		p.busy[peer]++
		p.mu.Unlock()
		defer func() {
			p.mu.Lock()
			if p.busy[peer]--; p.busy[peer] <= 0 {
				delete(p.busy, peer)
			}
			p.mu.Unlock()
		}()
		h.ServeHTTP(w, r)
	})
}
