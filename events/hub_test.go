package events

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

func sessionEvent(kind Kind, owner uint32, n int) *Event {
	return &Event{Kind: kind, Session: "s", Owner: U(owner), UID: U(owner), PID: uint32(n)}
}

func next(t *testing.T, f *Follower) Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	e, ok := f.Next(ctx)
	if !ok {
		t.Fatal("no event within 5s")
	}
	return e
}

// Publishing costs nothing while nobody follows (On is false), and a
// follower gets what its accept function takes, in order.
func TestFollowerGetsWhatItAcceptsInOrder(t *testing.T) {
	h := NewHub("node-a", 0)
	if h.On() {
		t.Fatal("On with no follower")
	}
	f, err := h.Follow(1000, func(e *Event) bool { return *e.Owner == 1000 }, false)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if !h.On() {
		t.Fatal("not On with a follower")
	}
	for i := range 10 {
		h.Publish(sessionEvent(SessionBegin, uint32(1000+i%2), i))
	}
	for i := 0; i < 10; i += 2 {
		if e := next(t, f); e.PID != uint32(i) || e.Node != "node-a" || e.Time.IsZero() {
			t.Fatalf("event %+v, want pid %d on node-a with a time", e, i)
		}
	}
	if e, ok := f.Pending(); ok {
		t.Fatalf("another uid's event reached the follower: %+v", e)
	}
	f.Close()
	if h.On() {
		t.Error("On after the last follower closed")
	}
}

// A follower that does not read never makes Publish wait: what does not
// fit in its queue is dropped for it alone, and it reads how many it
// missed where they are missing. Another follower misses nothing.
func TestASlowFollowerMissesEventsAloneAndIsToldHowMany(t *testing.T) {
	h := NewHub("n", 0)
	slow, err := h.Follow(1000, nil, false)
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	fast, err := h.Follow(1001, nil, false)
	if err != nil {
		t.Fatal(err)
	}
	defer fast.Close()
	const n = QueueSize + 500
	got := 0
	start := time.Now()
	for i := range n {
		h.Publish(&Event{Kind: Exec, UID: U(1000), PID: uint32(i)})
		if e, ok := fast.Pending(); ok {
			if e.Kind != Exec || e.PID != uint32(got) {
				t.Fatalf("fast follower: event %+v, want exec %d", e, got)
			}
			got++
		}
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("publishing %d events took %v with a follower that does not read", n, d)
	}
	for ; got < n; got++ {
		if e := next(t, fast); e.PID != uint32(got) {
			t.Fatalf("fast follower: event %+v, want exec %d", e, got)
		}
	}
	for i := range QueueSize {
		if e := next(t, slow); e.Kind != Exec || e.PID != uint32(i) {
			t.Fatalf("slow follower: event %d is %+v", i, e)
		}
	}
	if e := next(t, slow); e.Kind != Dropped || e.Count != n-QueueSize {
		t.Fatalf("slow follower after its queue: %+v, want dropped %d", e, n-QueueSize)
	}
	if s := h.Stats(); s.Dropped != n-QueueSize || s.Published != n {
		t.Errorf("stats %+v, want %d published and %d dropped", s, n, n-QueueSize)
	}
	// It reads on from where it is: the next event comes whole.
	h.Publish(&Event{Kind: Exec, PID: 7})
	if e := next(t, slow); e.PID != 7 {
		t.Errorf("after the gap: %+v", e)
	}
}

// Followers are bounded per uid and in all.
func TestFollowersAreBoundedPerUIDAndInAll(t *testing.T) {
	h := NewHub("n", 0)
	var fs []*Follower
	for range MaxFollowersPerUID {
		f, err := h.Follow(1000, nil, false)
		if err != nil {
			t.Fatal(err)
		}
		fs = append(fs, f)
	}
	if _, err := h.Follow(1000, nil, false); !errors.Is(err, ErrTooManyFollowers) {
		t.Fatalf("follower %d of uid 1000: %v, want ErrTooManyFollowers", MaxFollowersPerUID+1, err)
	}
	f, err := h.Follow(1001, nil, false)
	if err != nil {
		t.Fatalf("another uid's first follower: %v", err)
	}
	f.Close()
	fs[0].Close()
	if f, err = h.Follow(1000, nil, false); err != nil {
		t.Fatalf("a follower after one closed: %v", err)
	}
	fs[0] = f
	for _, f := range fs {
		f.Close()
	}
	for n := range MaxFollowers {
		if _, err := h.Follow(uint32(2000+n/MaxFollowersPerUID), nil, false); err != nil {
			t.Fatalf("follower %d: %v", n, err)
		}
	}
	if _, err := h.Follow(9999, nil, false); !errors.Is(err, ErrTooManyFollowers) {
		t.Fatalf("follower past the node's bound: %v", err)
	}
}

// The backlog keeps the newest events of each uid (not member execs): one
// uid's churn evicts its own, never another's.
func TestBacklogKeepsEachUIDsNewestAndNoExecs(t *testing.T) {
	h := NewHub("n", 0)
	for i := range 5 {
		h.Publish(sessionEvent(SessionBegin, 1001, i))
	}
	for i := range 3 * Backlog {
		h.Publish(sessionEvent(SessionEnd, 1000, i))
		h.Publish(&Event{Kind: Exec, Owner: U(1001), UID: U(1001)})
	}
	h.Publish(&Event{Kind: Loss, What: "fork", Count: 3})
	mine := h.Backlog(func(e *Event) bool { return e.Owner != nil && *e.Owner == 1001 })
	if len(mine) != 5 || mine[0].Kind != SessionBegin || mine[4].PID != 4 {
		t.Fatalf("uid 1001's backlog: %d events %+v, want its 5 begins", len(mine), mine)
	}
	churn := h.Backlog(func(e *Event) bool { return e.Owner != nil && *e.Owner == 1000 })
	if len(churn) != BacklogPerUID || churn[len(churn)-1].PID != 3*Backlog-1 {
		t.Fatalf("uid 1000's backlog: %d events, want its newest %d", len(churn), BacklogPerUID)
	}
	if all := h.Backlog(nil); all[len(all)-1].Kind != Loss || slices.ContainsFunc(all, func(e Event) bool { return e.Kind == Exec }) {
		t.Errorf("backlog ends with %+v, or holds an exec", all[len(all)-1])
	}
}

// A follower that asks for the backlog gets it, then every event after
// it, with no gap and no repeat.
func TestFollowingWithTheBacklogHasNoGap(t *testing.T) {
	h := NewHub("n", 0)
	for i := range 3 {
		h.Publish(sessionEvent(SessionBegin, 0, i))
	}
	f, err := h.Follow(0, nil, true)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h.Publish(sessionEvent(SessionEnd, 0, 3))
	for i := range 4 {
		if e := next(t, f); e.PID != uint32(i) {
			t.Fatalf("event %d: %+v", i, e)
		}
	}
}

// Whatever a follower or the backlog returns has its argv redacted; the
// published event is left as it was.
func TestEventsLeaveRedacted(t *testing.T) {
	h := NewHub("n", 0)
	f, err := h.Follow(0, nil, false)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	const secret = "sk-live-0123456789abcdefghijklmnopqrstuv"
	e := &Event{Kind: Kill, Owner: U(0), Argv: []string{"node", "server.js", "--api-key", secret}}
	h.Publish(e)
	got := next(t, f)
	back := h.Backlog(nil)
	for _, argv := range [][]string{got.Argv, back[0].Argv} {
		if strings.Contains(strings.Join(argv, " "), secret) || len(argv) != 4 {
			t.Errorf("argv %q: want 4 words, the key redacted", argv)
		}
	}
	if e.Argv[3] != secret {
		t.Errorf("the published event was changed: %q", e.Argv)
	}
}

// What the consumer pays per exec: nothing but On while nobody follows,
// an event and an offer to each follower otherwise (docs/ARCHITECTURE.md,
// "The event stream").
func BenchmarkPublishExec(b *testing.B) {
	argv := []string{"node", "/usr/lib/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js", "/home/u"}
	for _, followers := range []int{0, 1, 4} {
		b.Run(fmt.Sprintf("followers=%d", followers), func(b *testing.B) {
			h := NewHub("n", 0)
			for i := range followers {
				f, err := h.Follow(uint32(i), func(e *Event) bool { return *e.UID == 0 }, false)
				if err != nil {
					b.Fatal(err)
				}
				defer f.Close()
				go func() {
					for {
						if _, ok := f.Next(context.Background()); !ok {
							return
						}
					}
				}()
			}
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				if h.On() {
					h.Publish(&Event{Kind: Exec, Session: "s", Owner: U(0), UID: U(0), PID: uint32(i), Argv: argv})
				}
			}
		})
	}
}
