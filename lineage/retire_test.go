package lineage

import (
	"slices"
	"testing"
	"time"
)

func TestRetireDropsOnlyFullyDeadBranches(t *testing.T) {
	// host (alive) ─┬─ a (exit 10s) ── a1 (exit 12s)
	//               ├─ b (exit 10s) ── b1 (alive)
	//               └─ c (exit 30s)
	a, a1 := id(10, 2*sec+1), id(11, 2*sec+2)
	b, b1 := id(20, 3*sec+1), id(21, 3*sec+2)
	c := id(30, 4*sec+1)
	build := func(retention time.Duration) *Graph {
		g := New(Config{Retention: retention})
		seedInit(g)
		apply(g,
			forkEv(host, initID),
			forkEv(a, host), forkEv(a1, a), forkEv(b, host), forkEv(b1, b), forkEv(c, host),
			exitEv(10*sec, a, 0), exitEv(12*sec, a1, 0), exitEv(10*sec, b, 0), exitEv(30*sec, c, 0),
		)
		return g
	}
	tests := []struct {
		name      string
		retention time.Duration
		now       uint64
		gone      []ID
	}{
		{"nothing before retention", time.Minute, 60*sec + 9*sec, nil},
		{"branch goes only when its newest exit is old", time.Minute, 60*sec + 11*sec, nil},
		{"whole dead branch goes together", time.Minute, 60*sec + 13*sec, []ID{a, a1}},
		{"later leaf waits for its own retention", time.Minute, 60*sec + 31*sec, []ID{a, a1, c}},
		{"dead wrapper of a live process stays forever", time.Minute, 1000 * sec, []ID{a, a1, c}},
		{"retention is configurable", time.Second, 13*sec + 1, []ID{a, a1}},
		{"default retention is five minutes", 0, 300*sec + 13*sec, []ID{a, a1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := build(tt.retention)
			before := len(g.Processes())
			n := g.Retire(tt.now)
			checkInvariants(t, g)
			if n != len(tt.gone) || len(g.Processes()) != before-n {
				t.Errorf("Retire = %d (%d → %d processes), want %d", n, before, len(g.Processes()), len(tt.gone))
			}
			for _, x := range []ID{host, a, a1, b, b1, c} {
				_, ok := g.Get(x)
				if want := !slices.Contains(tt.gone, x); ok != want {
					t.Errorf("%v present=%v, want %v", x, ok, want)
				}
			}
			if s := g.Stats(); s.Retired != uint64(n) {
				t.Errorf("Stats.Retired = %d, want %d", s.Retired, n)
			}
			for _, p := range g.Children(host) {
				if slices.Contains(tt.gone, p.ID) {
					t.Errorf("retired %v still a child of host", p.ID)
				}
			}
		})
	}
}

func TestRetireKeepsPlaceholdersUntilMarkedExited(t *testing.T) {
	ghost := id(40, 1*sec+1)
	child := id(41, 2*sec+1)
	g := newGraph()
	apply(g, forkEv(child, ghost), exitEv(3*sec, child, 0))
	if n := g.Retire(1e6 * sec); n != 1 {
		t.Errorf("Retire = %d, want 1: the dead child only", n)
	}
	if _, ok := g.Get(ghost); !ok {
		t.Fatalf("placeholder of unknown liveness retired")
	}
	g.Repair(nil, 5*sec)
	if n := g.Retire(5*sec + uint64(DefaultRetention) + 1); n != 1 {
		t.Errorf("Retire = %d, want 1: the placeholder repair marked exited", n)
	}
	checkInvariants(t, g)
}

func TestRetireBoundsMemoryUnderChurn(t *testing.T) {
	pairs := 1_000_000
	if testing.Short() {
		pairs = 50_000
	}
	const every = 10_000
	g := New(Config{Retention: time.Millisecond})
	root := id(1, 1)
	g.Apply(Event{Kind: KindExec, Time: 2, Proc: root, Argv: []string{"init"}})
	now := uint64(10)
	maxNodes := 0
	for i := range pairs {
		now += 1000 // 1 µs per short-lived child
		child := id(uint32(2+i%32000), now)
		g.Apply(forkEv(child, root))
		g.Apply(exitEv(now+500, child, 0))
		if i%every == every-1 {
			g.Retire(now + 600)
			maxNodes = max(maxNodes, len(g.byID))
		}
	}
	checkInvariants(t, g)
	// Retention 1ms = 1000 children; a retire every 10000 keeps about that.
	if maxNodes > 1100 {
		t.Errorf("graph grew to %d nodes under churn", maxNodes)
	}
	root0 := g.byID[root]
	if len(root0.children) > 1100 || cap(root0.children) > 2*every {
		t.Errorf("root children len %d cap %d", len(root0.children), cap(root0.children))
	}
	if len(g.byPID) > 1100 {
		t.Errorf("byPID holds %d PIDs", len(g.byPID))
	}
	if s := g.Stats(); s.Retired+uint64(s.Tracked) != uint64(pairs)+1 {
		t.Errorf("retired %d + tracked %d != %d created", s.Retired, s.Tracked, pairs+1)
	}
}
