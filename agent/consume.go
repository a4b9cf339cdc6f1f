package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"time"

	"github.com/mcptrace/mcptrace/history"
	"github.com/mcptrace/mcptrace/lineage"
	"github.com/mcptrace/mcptrace/procfs"
	"github.com/mcptrace/mcptrace/sensor"
	"github.com/mcptrace/mcptrace/sessions"
	"github.com/mcptrace/mcptrace/state"
)

// maxBatch bounds the events applied and journaled together.
const maxBatch = 256

// consume applies kernel events to the graph and the tracker until the
// sensor closes. Each batch is journaled before the kernel may reuse its
// records (Commit), so a crash at any moment loses no event: what was not
// journaled is still in the ring buffer for the next agent.
func (a *Agent) consume() error {
	debug := a.log.Enabled(context.Background(), slog.LevelDebug-4)
	recs := make([]state.Record, 0, maxBatch)
	var enc []byte // the batch's journal records, encoded back to back; reused
	var hev []history.Event
	for {
		b, err := a.sensor.ReadBatch(maxBatch)
		if errors.Is(err, sensor.ErrClosed) {
			return nil
		}
		if err != nil {
			return err
		}
		if b.Undecodable > 0 {
			// A malformed record is a bug to report, not a reason to stop
			// tracking the node.
			a.decodeErr.Add(uint64(b.Undecodable))
			a.log.Error("skipping undecodable records", "records", b.Undecodable, "err", b.Err)
		}
		// Encoded (and argv redacted) before the lock: the journal needs
		// nothing but the event. Store.Append copies what it writes, so
		// enc is reused for the next batch.
		recs, enc = recs[:0], enc[:0]
		for i := range b.Events {
			a.senderGroups(&b.Events[i])
		}
		for _, ev := range b.Events {
			var rec state.Record
			rec, enc = eventRecord(enc, ev)
			recs = append(recs, rec)
		}
		// To the history before the state journal: a checkpoint's cut
		// then comes after every event the history was handed
		// (flushHistory).
		hev = a.historyEvents(b.Events, func(i int) []byte { return recs[i].Data }, hev)
		a.hold.wait()
		a.mu.Lock()
		var acts []sessions.Action
		follow := a.stream.hub.On() // execs are built only for a follower
		for _, ev := range b.Events {
			if debug {
				a.log.Debug("event", "kind", ev.Kind.String(), "pid", ev.Proc.PID, "start_ns", ev.Proc.Start, "comm", ev.Comm, "file", filepath.Base(ev.Filename), "argc", len(ev.Argv))
			}
			a.graph.Apply(ev)
			a.countEvent(ev.Kind)
			acts = append(acts, a.tracker.Observe(ev)...)
			if follow && ev.Kind == lineage.KindExec {
				a.emitExec(ev)
			}
		}
		starts := a.markPending(acts)
		a.journal(recs)
		failed := a.journalFailed
		a.mu.Unlock()
		if failed {
			// The batch is not in the journal: only a checkpoint makes it
			// durable before the kernel may reuse its space.
			a.checkpointOrLog()
		}
		a.sensor.Commit()
		a.startAll(starts)
		if b.Barrier != 0 {
			a.barrier.reach(b.Barrier)
		}
	}
}

// senderGroups reads the groups of a container start's sender while it
// waits for the engine's answer, before the event is journaled, so that
// who may use the engine is decided on the kernel's groups even after
// the client exited (docker run -d), and across a restart.
func (a *Agent) senderGroups(ev *lineage.Event) {
	if ev.Kind != lineage.KindRequest || ev.Request == "" || ev.Groups != nil {
		return
	}
	if g, err := procfs.ReadGroups(a.opts.ProcRoot, ev.Proc); err == nil && len(g) > 0 {
		ev.Groups = g
	}
}

// barrierState matches barriers written into the ring buffer with the
// callers waiting for them.
type barrierState struct {
	mu      sync.Mutex
	seq     uint64 // the last barrier asked for
	reached uint64 // the highest barrier the consumer has applied
	waiting map[uint64]chan struct{}
}

func (b *barrierState) ask() (uint64, chan struct{}) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.seq++
	ch := make(chan struct{})
	if b.waiting == nil {
		b.waiting = map[uint64]chan struct{}{}
	}
	b.waiting[b.seq] = ch
	return b.seq, ch
}

func (b *barrierState) reach(seq uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.reached = max(b.reached, seq)
	for s, ch := range b.waiting {
		if s <= b.reached {
			close(ch)
			delete(b.waiting, s)
		}
	}
}

func (b *barrierState) forget(seq uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.waiting, seq)
}

// Sync returns once the graph and the tracker have applied every process
// event the kernel reported before the call: a barrier record goes into
// the ring buffer behind them, and the consumer signals when it applied
// it. The enforcer calls it before it declares a session empty, and the
// API before it resolves its caller. It fails only when ctx ends (or the
// sensor fails).
func (a *Agent) Sync(ctx context.Context) error {
	seq, ch := a.barrier.ask()
	for {
		err := a.sensor.Barrier(seq)
		if err == nil {
			break
		}
		if !errors.Is(err, sensor.ErrRingFull) {
			a.barrier.forget(seq)
			return fmt.Errorf("barrier: %w", err)
		}
		// The ring buffer is full: the consumer makes room.
		select {
		case <-ctx.Done():
			a.barrier.forget(seq)
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		a.barrier.forget(seq)
		return ctx.Err()
	}
}

// holdGate lets tests hold the consumer back (HoldEvents).
type holdGate struct {
	mu   sync.Mutex
	cond *sync.Cond
	held int
}

func (h *holdGate) init() { h.cond = sync.NewCond(&h.mu) }

func (h *holdGate) wait() {
	h.mu.Lock()
	for h.held > 0 {
		h.cond.Wait()
	}
	h.mu.Unlock()
}

// HoldEvents stops the agent from applying kernel events until release is
// called: they queue in the kernel's ring buffer (and are counted lost if
// it fills). Tests use it to prove that what the agent decides does not
// depend on how far behind the kernel it is.
func (a *Agent) HoldEvents() (release func()) {
	h := &a.hold
	h.mu.Lock()
	h.held++
	h.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			h.mu.Lock()
			h.held--
			h.mu.Unlock()
			h.cond.Broadcast()
		})
	}
}

// drainedEvents is how many events the sensor read from the previous
// agents' ring buffers.
func (a *Agent) drainedEvents() uint64 {
	cs, err := a.sensor.Counters()
	if err != nil {
		return 0
	}
	var n uint64
	for _, c := range cs {
		n += c.Read
	}
	return n - a.ownRead(cs)
}

func (a *Agent) ownRead(cs []sensor.Counters) uint64 {
	if len(cs) == 0 {
		return 0
	}
	return cs[len(cs)-1].Read
}

// eventKinds are the kinds of kernel events, in counter order.
var eventKinds = []lineage.EventKind{lineage.KindFork, lineage.KindExec, lineage.KindExit, lineage.KindRequest}

// countEvent counts an applied event by kind (a.events).
func (a *Agent) countEvent(k lineage.EventKind) {
	if int(k) < len(a.events) {
		a.events[k].Add(1)
	}
}
