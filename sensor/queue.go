package sensor

import (
	"sync"
	"time"

	"github.com/mcptrace/mcptrace/lineage"
)

// eventQueue is the Windows sensor's buffer between the ETW callback and
// ReadBatch, platform-neutral so that it is tested everywhere. It plays
// the ring buffer's part: bounded in events, it never blocks the producer
// (what does not fit is dropped and counted per kind, as the kernel
// counts lost_events), and it carries barrier markers and undecodable
// payloads in order with the events.
//
// One producer at a time has an event in hand (handle): from the moment
// the event is delivered until it is queued, so a barrier placed
// meanwhile (barrierAfter) goes behind it.
type eventQueue struct {
	// inHand is held while a producer turns an event into lineage events
	// and queues them, and while a barrier is placed.
	inHand sync.Mutex

	mu    sync.Mutex
	cond  *sync.Cond
	items []queued
	head  int // items[head:] are queued
	held  int // events and undecodable payloads among them, bounded by max
	max   int
	// dropped counts, per kind, events that found the queue full.
	dropped map[lineage.EventKind]uint64
	// bad counts, per kind, events whose payload did not decode.
	bad    map[lineage.EventKind]uint64
	read   uint64 // events popped
	closed bool
	err    error // the producer's end, returned once the queue is empty
}

// queued is one item: an event, a barrier marker (barrier != 0) or an
// undecodable payload (undecodable != nil).
type queued struct {
	ev          lineage.Event
	barrier     uint64
	undecodable error
}

func newEventQueue(max int) *eventQueue {
	q := &eventQueue{max: max, dropped: map[lineage.EventKind]uint64{}, bad: map[lineage.EventKind]uint64{}}
	q.cond = sync.NewCond(&q.mu)
	return q
}

// handle runs produce with an event in hand and queues the events it
// returns, all of them or, when they do not fit, none (counted dropped):
// a start's fork is never kept without its exec.
func (q *eventQueue) handle(produce func() []lineage.Event) {
	q.inHand.Lock()
	defer q.inHand.Unlock()
	q.push(produce())
}

func (q *eventQueue) push(evs []lineage.Event) {
	if len(evs) == 0 {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return
	}
	if q.held+len(evs) > q.max {
		for _, ev := range evs {
			q.dropped[ev.Kind]++
		}
		return
	}
	for _, ev := range evs {
		q.items = append(q.items, queued{ev: ev})
	}
	q.held += len(evs)
	q.cond.Broadcast()
}

// barrierAfter places barrier seq at the end of the queue once delay has
// passed and no event is in hand: behind every event queued by then.
func (q *eventQueue) barrierAfter(seq uint64, delay time.Duration) {
	time.AfterFunc(delay, func() { q.barrier(seq) })
}

// barrier places barrier seq at the end of the queue now (behind the
// event in hand, if any). Consecutive markers merge into the highest.
func (q *eventQueue) barrier(seq uint64) {
	if seq == 0 {
		return // 0 is no barrier (Batch.Barrier)
	}
	q.inHand.Lock()
	defer q.inHand.Unlock()
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return
	}
	if n := len(q.items); n > q.head && q.items[n-1].barrier != 0 {
		q.items[n-1].barrier = max(q.items[n-1].barrier, seq)
		return
	}
	q.items = append(q.items, queued{barrier: seq})
	q.cond.Broadcast()
}

// undecodable reports a payload that did not decode: the events of kinds
// it stood for are lost (counted), and a batch says why (Undecodable,
// Err) in its place in the stream unless the queue is full.
func (q *eventQueue) undecodable(err error, kinds ...lineage.EventKind) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return
	}
	for _, k := range kinds {
		q.bad[k]++
	}
	if q.held >= q.max {
		return
	}
	q.items = append(q.items, queued{undecodable: err})
	q.held++
	q.cond.Broadcast()
}

// fail ends the producer: pop returns err once what is queued is read.
func (q *eventQueue) fail(err error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.err == nil {
		q.err = err
	}
	q.cond.Broadcast()
}

// close ends the queue: pop returns ErrClosed from now on, and what is
// queued is never read.
func (q *eventQueue) close() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.closed = true
	q.items, q.head, q.held = nil, 0, 0
	q.cond.Broadcast()
}

// pop blocks until something is queued, then returns up to limit events in
// order, with the highest barrier among the items it took (a barrier is
// taken only when every event before it is) and the undecodable payloads
// among them. After close it returns ErrClosed; once the producer failed
// and the queue is empty, the producer's error.
func (q *eventQueue) pop(limit int) (Batch, error) {
	limit = max(limit, 1)
	q.mu.Lock()
	defer q.mu.Unlock()
	for !q.closed && q.head == len(q.items) && q.err == nil {
		q.cond.Wait()
	}
	if q.closed {
		return Batch{}, ErrClosed
	}
	if q.head == len(q.items) {
		return Batch{}, q.err
	}
	var b Batch
	for q.head < len(q.items) {
		it := &q.items[q.head]
		switch {
		case it.barrier != 0:
			b.Barrier = max(b.Barrier, it.barrier)
		case it.undecodable != nil:
			q.held--
			b.Undecodable++
			if b.Err == nil {
				b.Err = it.undecodable
			}
		default:
			if len(b.Events) >= limit {
				q.compact()
				return b, nil
			}
			b.Events = append(b.Events, it.ev)
			q.held--
			q.read++
		}
		*it = queued{} // no reference kept to what was returned
		q.head++
	}
	q.compact()
	return b, nil
}

// compact drops the items read; called with mu held.
func (q *eventQueue) compact() {
	switch {
	case q.head == len(q.items):
		q.items, q.head = q.items[:0], 0
	case q.head > len(q.items)/2:
		n := copy(q.items, q.items[q.head:])
		clear(q.items[n:])
		q.items, q.head = q.items[:n], 0
	}
}

// counts returns copies of the dropped and undecodable counts, and how
// many events were read.
func (q *eventQueue) counts() (dropped, bad map[lineage.EventKind]uint64, read uint64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	dropped = make(map[lineage.EventKind]uint64, len(q.dropped))
	for k, n := range q.dropped {
		dropped[k] = n
	}
	bad = make(map[lineage.EventKind]uint64, len(q.bad))
	for k, n := range q.bad {
		bad[k] = n
	}
	return dropped, bad, q.read
}
