package etw

import (
	"fmt"
	"sync"

	"github.com/mcptrace/mcptrace/lineage"
	"github.com/mcptrace/mcptrace/windows/owners"
	"github.com/mcptrace/mcptrace/windows/winproc"
)

// Feed applies a Kernel-Process event stream to a lineage graph, as the
// Linux sensor's consumer does with the ring buffer: it seeds the graph
// from a process snapshot when the stream starts, fills each start with
// the command line read from the new process, and repairs the graph from
// a new snapshot whenever the session reports a loss, so that a lost
// stop does not leave a process alive in the graph and a lost start does
// not leave one out.
//
// It is platform-neutral: the Windows consumer (Consume) calls it, and
// tests drive it with constructed streams and snapshots.
type Feed struct {
	Graph      *lineage.Graph
	Translator *Translator
	// Snapshot lists the running processes (winproc.Snapshot).
	Snapshot func() ([]winproc.Entry, error)
	// Read reads a process as soon as it starts, through a handle checked
	// against its create time (winproc.Describe): its command line
	// (ArgvTruncated when it was cut or unreadable) and its token
	// (TokenOK false when unreadable: its owner is then owners.Unknown).
	Read func(pid uint32, create uint64) winproc.Entry
	// Now is the present on the Translator's clock.
	Now func() uint64

	mu    sync.Mutex
	stats FeedStats
}

// Losses are what the kernel's logger could not deliver, as
// ControlTrace reports them for the session since it started.
type Losses struct {
	// Events the logger dropped (no free buffer).
	Events uint32
	// Buffers lost on the way to the real-time consumer.
	RealTimeBuffers uint32
	// Buffers lost to the log (a full file; none in real-time mode).
	LogBuffers uint32
}

// Total is every loss counted.
func (l Losses) Total() uint64 {
	return uint64(l.Events) + uint64(l.RealTimeBuffers) + uint64(l.LogBuffers)
}

// FeedStats counts what a Feed saw.
type FeedStats struct {
	Starts, Stops uint64
	// Bad counts payloads that did not decode: they are lost events too.
	Bad uint64
	// Lost is the session's loss total last reported (Losses.Total);
	// Repairs counts the repairs losses caused.
	Lost    uint64
	Repairs uint64
	// ArgvUnread counts starts whose command line could not be read;
	// OwnerUnread those whose token could not be (owned by
	// owners.Unknown).
	ArgvUnread, OwnerUnread uint64
}

// Stats returns a copy of the counters.
func (f *Feed) Stats() FeedStats {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.stats
}

// Seed seeds the graph from a snapshot; call it once the session is
// enabled, so that nothing starts unseen between the two.
func (f *Feed) Seed() error {
	readAt := f.Now()
	entries, err := f.Snapshot()
	if err != nil {
		return fmt.Errorf("seed from a process snapshot: %w", err)
	}
	f.mu.Lock()
	snaps := f.Translator.Seed(entries)
	f.mu.Unlock()
	f.Graph.Seed(snaps, readAt)
	return nil
}

// Start applies a ProcessStart, with the process's command line.
func (f *Feed) Start(s ProcessStart) {
	e := winproc.Entry{ArgvTruncated: true}
	if f.Read != nil {
		e = f.Read(s.ProcessID, s.CreateTime)
	}
	f.mu.Lock()
	evs := f.Translator.Start(s)
	f.stats.Starts++
	if e.Argv == nil {
		f.stats.ArgvUnread++
	}
	if !e.TokenOK {
		f.stats.OwnerUnread++
	}
	FillStart(evs, e, f.Translator.Owner)
	f.mu.Unlock()
	for _, ev := range evs {
		f.Graph.Apply(ev)
	}
}

// FillStart completes the events of a start (Translator.Start) with what
// was read of the started process (Feed.Read, ReadStarted): every event
// gets the owner of its token (winproc.OwnerOf: owners.Unknown when the
// token was unreadable), the exec its command line (truncated when it was
// cut, or unreadable and nil).
func FillStart(evs []lineage.Event, e winproc.Entry, owner func(owners.Token) uint32) {
	uid := winproc.OwnerOf(e, owner)
	for i := range evs {
		evs[i].UID = uid
		if evs[i].Kind == lineage.KindExec {
			evs[i].Argv, evs[i].ArgvTruncated = e.Argv, e.ArgvTruncated || e.Argv == nil
		}
	}
}

// Stop applies a ProcessStop.
func (f *Feed) Stop(s ProcessStop) {
	f.mu.Lock()
	evs := f.Translator.Stop(s)
	f.stats.Stops++
	f.mu.Unlock()
	for _, ev := range evs {
		f.Graph.Apply(ev)
	}
}

// Bad counts a payload that did not decode, and repairs: what it said is
// lost.
func (f *Feed) Bad() error {
	f.mu.Lock()
	f.stats.Bad++
	f.mu.Unlock()
	return f.repair()
}

// Losses takes the session's loss counters; when they grew since the
// last call the graph is repaired from a new snapshot.
func (f *Feed) Losses(l Losses) error {
	f.mu.Lock()
	grew := l.Total() > f.stats.Lost
	f.stats.Lost = max(f.stats.Lost, l.Total())
	f.mu.Unlock()
	if !grew {
		return nil
	}
	return f.repair()
}

func (f *Feed) repair() error {
	readAt := f.Now()
	entries, err := f.Snapshot()
	if err != nil {
		return fmt.Errorf("repair after lost events: %w", err)
	}
	f.mu.Lock()
	snaps := f.Translator.Seed(entries)
	f.stats.Repairs++
	f.mu.Unlock()
	f.Graph.Repair(snaps, readAt)
	return nil
}
