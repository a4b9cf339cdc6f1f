package events

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcptrace/mcptrace/internal/quota"
)

// Bounds of a Hub.
const (
	// QueueSize is how many events one follower's queue holds; past it,
	// events are dropped for that follower and counted.
	QueueSize = 1024
	// MaxFollowersPerUID is how many followers one uid may have at once
	// (the export file is not one of them).
	MaxFollowersPerUID = 4
	// MaxFollowers bounds the followers of all uids together.
	MaxFollowers = 64
	// BacklogPerUID and Backlog bound the events kept for readers that
	// do not follow: the newest of each audience uid, and of all.
	BacklogPerUID = 256
	Backlog       = 4096
)

// ErrTooManyFollowers: the uid (or the node) has as many followers as it
// may.
var ErrTooManyFollowers = errors.New("too many followers of the event stream")

// Hub fans events out to followers. It is safe for concurrent use.
type Hub struct {
	node  string
	epoch int64 // wall ns at boot-clock 0

	// on counts followers (the export file included): Publish costs one
	// load of it when nobody follows.
	on atomic.Int32

	mu        sync.Mutex
	followers map[*Follower]struct{}
	perUID    map[uint32]int
	backlog   *quota.FIFO[uint64, *Event]
	seq       uint64
	dropped   atomic.Uint64 // events dropped for some follower
	published atomic.Uint64
}

// NewHub returns a hub whose events name node. bootNow is the boot clock
// now (CLOCK_BOOTTIME ns), to turn boot-clock times into wall times.
func NewHub(node string, bootNow uint64) *Hub {
	return &Hub{
		node:      node,
		epoch:     time.Now().UnixNano() - int64(bootNow),
		followers: map[*Follower]struct{}{},
		perUID:    map[uint32]int{},
		backlog:   quota.New[uint64, *Event](BacklogPerUID, Backlog),
	}
}

// On reports whether anyone follows: the agent builds an event only when
// it is true. Member execs, the one kind published from the path every
// exec on the node takes, are built only then; the other kinds are rare
// and always published (the backlog keeps them).
func (h *Hub) On() bool { return h != nil && h.on.Load() > 0 }

// Wall is the wall time of a boot-clock time.
func (h *Hub) Wall(boot uint64) time.Time { return time.Unix(0, h.epoch+int64(boot)) }

// Stats counts what the hub published and dropped.
type Stats struct {
	Published uint64 `json:"published_total"`
	// Dropped counts events a follower missed because its queue was
	// full (each follower reads how many it missed).
	Dropped   uint64 `json:"dropped_total"`
	Followers int    `json:"followers"`
}

// Stats returns the hub's counters.
func (h *Hub) Stats() Stats {
	if h == nil {
		return Stats{}
	}
	return Stats{Published: h.published.Load(), Dropped: h.dropped.Load(), Followers: int(h.on.Load())}
}

// Publish hands e to every follower that accepts it, and keeps it in the
// backlog unless it is a member exec. It never blocks: a follower whose
// queue is full misses e (counted, and told). e must not be changed
// afterwards. Time, when zero, is now; Node is the hub's.
func (h *Hub) Publish(e *Event) {
	if h == nil {
		return
	}
	if e.Time.IsZero() {
		e.Time = time.Now()
	}
	e.Node = h.node
	h.published.Add(1)
	h.mu.Lock()
	defer h.mu.Unlock()
	if e.Kind != Exec {
		h.seq++
		h.backlog.Put(e.audience(), h.seq, e)
	}
	for f := range h.followers {
		if f.accept == nil || f.accept(e) {
			f.offer(e)
		}
	}
}

// Follower receives the events it accepts, in the order published. Use
// Next, then Close.
type Follower struct {
	h      *Hub
	uid    uint32
	capped bool // counted against the per-uid and total bounds
	accept func(*Event) bool
	q      chan *Event
	// missed counts events dropped since the last Dropped event was
	// queued; h.mu guards it.
	missed uint64
	closed chan struct{}
	once   sync.Once
}

// offer queues e; h.mu is held. Events missed before are announced
// first, so a Dropped event sits where the gap is.
func (f *Follower) offer(e *Event) {
	if f.missed > 0 {
		d := &Event{Time: e.Time, Node: e.Node, Kind: Dropped, Count: f.missed}
		select {
		case f.q <- d:
			f.missed = 0
		default:
		}
	}
	if f.missed > 0 {
		f.miss()
		return
	}
	select {
	case f.q <- e:
	default:
		f.miss()
	}
}

func (f *Follower) miss() {
	f.missed++
	f.h.dropped.Add(1)
}

// Follow returns a follower for uid that receives every event accept
// takes (nil: all), starting with the backlog's when backlog is set. One
// uid has at most MaxFollowersPerUID, the node MaxFollowers.
func (h *Hub) Follow(uid uint32, accept func(*Event) bool, backlog bool) (*Follower, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.perUID[uid] >= MaxFollowersPerUID {
		return nil, fmt.Errorf("%w: uid %d has %d", ErrTooManyFollowers, uid, MaxFollowersPerUID)
	}
	n := 0
	for f := range h.followers {
		if f.capped {
			n++
		}
	}
	if n >= MaxFollowers {
		return nil, fmt.Errorf("%w: the node has %d", ErrTooManyFollowers, MaxFollowers)
	}
	h.perUID[uid]++
	f := h.follow(uid, accept, QueueSize, true)
	if backlog {
		for _, e := range h.backlogLocked(accept, QueueSize) {
			f.q <- e
		}
	}
	return f, nil
}

// follow adds a follower; h.mu is held.
func (h *Hub) follow(uid uint32, accept func(*Event) bool, size int, capped bool) *Follower {
	f := &Follower{h: h, uid: uid, capped: capped, accept: accept, q: make(chan *Event, size), closed: make(chan struct{})}
	h.followers[f] = struct{}{}
	h.on.Add(1)
	return f
}

// Backlog returns the kept events accept takes (nil: all), oldest first,
// argv redacted.
func (h *Hub) Backlog(accept func(*Event) bool) []Event {
	h.mu.Lock()
	evs := h.backlogLocked(accept, Backlog)
	h.mu.Unlock()
	out := make([]Event, len(evs))
	for i, e := range evs {
		out[i] = e.redacted()
	}
	return out
}

// backlogLocked returns the newest limit kept events accept takes, oldest
// first; h.mu is held.
func (h *Hub) backlogLocked(accept func(*Event) bool, limit int) []*Event {
	var out []*Event
	for _, k := range h.backlog.Keys() {
		e, _ := h.backlog.Get(k)
		if accept == nil || accept(e) {
			out = append(out, e)
		}
	}
	if len(out) > limit {
		out = out[len(out)-limit:]
	}
	return out
}

// Next returns the next event, argv redacted; false once ctx ends or the
// follower is closed. Events the follower missed are announced by a
// Dropped event where they are missing, at the latest once it has read
// everything queued before them.
func (f *Follower) Next(ctx context.Context) (Event, bool) {
	if e, ok := f.Pending(); ok {
		return e, true
	}
	select {
	case e := <-f.q:
		return e.redacted(), true
	case <-ctx.Done():
	case <-f.closed:
	}
	return Event{}, false
}

// Pending returns the next event if there is one, without waiting.
func (f *Follower) Pending() (Event, bool) {
	select {
	case e := <-f.q:
		return e.redacted(), true
	default:
	}
	// Nothing queued: what was missed since is said now, not only when
	// the next event comes.
	h := f.h
	h.mu.Lock()
	defer h.mu.Unlock()
	select {
	case e := <-f.q: // queued meanwhile: it came before what was missed after it
		return e.redacted(), true
	default:
	}
	if f.missed == 0 {
		return Event{}, false
	}
	d := Event{Time: time.Now(), Node: h.node, Kind: Dropped, Count: f.missed}
	f.missed = 0
	return d, true
}

// Close stops the follower: it receives nothing more, and Next returns
// false once the queue is read.
func (f *Follower) Close() {
	f.once.Do(func() {
		h := f.h
		h.mu.Lock()
		delete(h.followers, f)
		if f.capped {
			if h.perUID[f.uid]--; h.perUID[f.uid] <= 0 {
				delete(h.perUID, f.uid)
			}
		}
		h.on.Add(-1)
		h.mu.Unlock()
		close(f.closed)
	})
}
