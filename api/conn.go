package api

import (
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcptrace/mcptrace/windows/owners"
)

// Limits of the API. The configurable ones have their defaults here and
// are exposed by package config (api.*).
const (
	// DefaultSocketMode lets every local user connect (api.socket-mode):
	// each request is authorized by the caller's kernel-verified identity.
	DefaultSocketMode os.FileMode = 0o666
	// DefaultMaxConnections bounds the connections of all non-root users
	// together (api.max-connections).
	DefaultMaxConnections = 128
	// DefaultMaxConnectionsPerUID bounds the connections of one non-root
	// uid (api.max-connections-per-uid).
	DefaultMaxConnectionsPerUID = 16
	// FDReserve is how many file descriptors the API leaves to the rest
	// of the agent (the enforcer's pidfds, the state files, BPF) below
	// RLIMIT_NOFILE: the connection cap is lowered to fit, each
	// connection taking two (the socket and the peer's pidfd).
	FDReserve = 1024
	// maxBody bounds a request body: the largest one the API takes is a
	// session ID.
	maxBody = 64 << 10
	// maxHeader bounds the request line and headers (http.Server adds
	// 4 KiB of slack).
	maxHeader = 8 << 10

	readHeaderTimeout = 5 * time.Second
	readTimeout       = 10 * time.Second
	// writeTimeout bounds a handler and the write of its answer: a
	// marker waits at most 5s for the graph to catch up.
	writeTimeout = 30 * time.Second
	idleTimeout  = 30 * time.Second
)

// connCounters count what the listener refused.
type connCounters struct {
	overTotal, overUID, identity atomic.Uint64
}

// admission tracks open connections per uid. Root (uid 0) is neither
// counted against nor limited by the caps: root can stop the agent anyway,
// and its requests must get through a flood by other users.
type admission struct {
	maxTotal, maxPerUID int
	mu                  sync.Mutex
	total               int
	perUID              map[uint32]int
	refused             connCounters
}

// admit takes a slot for uid, or says which cap is full.
func (a *admission) admit(uid uint32) error {
	if uid == 0 {
		return nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.total >= a.maxTotal {
		a.refused.overTotal.Add(1)
		return fmt.Errorf("the agent serves at most %d connections of non-root users (api.max-connections)", a.maxTotal)
	}
	if a.perUID[uid] >= a.maxPerUID {
		a.refused.overUID.Add(1)
		return fmt.Errorf("uid %d has %d connections open, the most one user may (api.max-connections-per-uid)", uid, a.maxPerUID)
	}
	a.total++
	a.perUID[uid]++
	return nil
}

func (a *admission) release(uid uint32) {
	if uid == 0 {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.total--
	if a.perUID[uid]--; a.perUID[uid] <= 0 {
		delete(a.perUID, uid)
	}
}

func (a *admission) open() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.total
}

// limitListener binds the peer of every accepted connection (see peer)
// and admits it under the caps; a connection whose peer cannot be bound
// or that is over a cap is answered 503 and closed at once, counted.
type limitListener struct {
	net.Listener
	adm      *admission
	usePIDFD bool
	owners   *owners.Table // Windows: numbers the callers' tokens
	onRefuse func(reason string, uid uint32, err error)
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		p, err := bindPeer(c, l.usePIDFD, l.owners)
		if err != nil {
			l.adm.refused.identity.Add(1)
			l.onRefuse("identity", 0, err)
			refuse(c, "the connecting process could not be identified")
			continue
		}
		if err := l.adm.admit(p.uid); err != nil {
			p.close()
			l.onRefuse("limit", p.uid, err)
			refuse(c, err.Error())
			continue
		}
		return &peerConn{Conn: c, peer: p, adm: l.adm, accepted: time.Now()}, nil
	}
}

// refuse answers 503 with msg, without waiting on a client that does not
// read, and closes c.
func refuse(c net.Conn, msg string) {
	body := fmt.Sprintf("{\"error\":%q}\n", msg)
	c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
	fmt.Fprintf(c, "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	c.Close()
}

// peerConn is an admitted connection with its bound peer; Close releases
// its slot and the peer's pidfd once.
type peerConn struct {
	net.Conn
	peer     *peer
	adm      *admission
	accepted time.Time
	once     sync.Once
}

func (c *peerConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.peer.close()
		c.adm.release(c.peer.uid)
	})
	return err
}

// errNoFDLimit: the system bounds no file descriptors (handles) that the
// API would have to leave free.
var errNoFDLimit = errors.New("no file descriptor limit on this OS")

// errNoPeer: a request whose connection has no bound peer.
var errNoPeer = errors.New("peer credentials of the connection are unknown")
