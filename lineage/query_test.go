package lineage

import (
	"fmt"
	"slices"
	"sync"
	"testing"
)

func TestQueriesReturnDeepCopies(t *testing.T) {
	x := id(100, 2*sec+1)
	g := newGraph()
	seedInit(g)
	apply(g, forkEv(host, initID), forkEv(x, host), execEv(2*sec+5, x, "node", "a.js"))
	getters := []struct {
		name string
		get  func() Process
	}{
		{"Get", func() Process { return mustGet(t, g, x) }},
		{"Lookup", func() Process { p, _ := g.Lookup(x.PID); return p }},
		{"Descendants", func() Process { return g.Descendants(x)[0] }},
		{"Children", func() Process { return g.Children(host)[0] }},
		{"Ancestors", func() Process { return g.Ancestors(x)[0] }},
		{"Processes", func() Process { return g.Processes()[2] }},
	}
	for _, tt := range getters {
		t.Run(tt.name, func(t *testing.T) {
			p := tt.get()
			if p.ID != x {
				t.Fatalf("got %v, want %v", p.ID, x)
			}
			p.Images[0].Argv[0] = "corrupted"
			p.Images[1].Filename = "corrupted"
			p.Images = append(p.Images[:1], Image{Filename: "extra"})
			again := tt.get()
			if got := argvs(again); got[0][0] == "corrupted" || again.Images[1].Filename == "corrupted" || len(again.Images) != 2 {
				t.Errorf("caller's changes leaked into the graph: %+v", again.Images)
			}
			// The creator's image, which the child's first one was copied from.
			if h := mustGet(t, g, host); h.Images[0].Argv[0] == "corrupted" {
				t.Errorf("caller's changes leaked into the creator's image")
			}
		})
	}
}

func TestQueriesAreSortedByStart(t *testing.T) {
	// Children forked in an order unrelated to PIDs and applied shuffled.
	kids := []ID{id(900, 5*sec+1), id(30, 3*sec+1), id(500, 4*sec+1), id(31, 3*sec+1)}
	grandkid := id(7, 6*sec+1)
	g := newGraph()
	seedInit(g)
	apply(g, forkEv(host, initID))
	for _, k := range kids {
		g.Apply(forkEv(k, host))
	}
	g.Apply(forkEv(grandkid, kids[2]))
	g.Apply(forkEv(id(8, 7*sec), id(9, 1))) // a second root, under a placeholder
	checkInvariants(t, g)

	tests := []struct {
		name string
		got  []ID
		want []ID
	}{
		{"Children", ids(g.Children(host)), []ID{kids[1], kids[3], kids[2], kids[0]}},
		{"Descendants is pre-order", ids(g.Descendants(host)), []ID{host, kids[1], kids[3], kids[2], grandkid, kids[0]}},
		{"Roots", g.Roots(), []ID{id(9, 1), initID}},
		{"Processes", ids(g.Processes()), []ID{id(9, 1), initID, host, kids[1], kids[3], kids[2], kids[0], grandkid, id(8, 7*sec)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			equalIDs(t, tt.name, tt.got, tt.want)
		})
	}
}

func TestQueriesOnUnknownIdentity(t *testing.T) {
	g := newGraph()
	seedInit(g)
	apply(g, forkEv(host, initID))
	unknown := id(host.PID, host.Start+1)
	if _, ok := g.Get(unknown); ok {
		t.Errorf("Get matched an exact node by tick")
	}
	if _, ok := g.Lookup(424242); ok {
		t.Errorf("Lookup of an unknown PID succeeded")
	}
	for name, got := range map[string][]Process{
		"Descendants": g.Descendants(unknown),
		"Children":    g.Children(unknown),
		"Ancestors":   g.Ancestors(unknown),
	} {
		if got != nil {
			t.Errorf("%s(unknown) = %v, want nil", name, ids(got))
		}
	}
}

func TestLookupPrefersAliveThenNewest(t *testing.T) {
	older := id(77, 2*sec+1)
	newer := id(77, 5*sec+1)
	tests := []struct {
		name   string
		events []Event
		want   ID
	}{
		{"newest alive", []Event{forkEv(older, host), forkEv(newer, host)}, newer},
		{"newest when all exited", []Event{forkEv(older, host), exitEv(3*sec, older, 0), forkEv(newer, host), exitEv(6*sec, newer, 0)}, newer},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := newGraph()
			apply(g, tt.events...)
			if p, ok := g.Lookup(77); !ok || p.ID != tt.want {
				t.Errorf("Lookup(77) = %v, %v; want %v", p.ID, ok, tt.want)
			}
		})
	}
}

func TestStatsCountsNodesAndGaps(t *testing.T) {
	g := newGraph()
	seedInit(g)
	apply(g,
		forkEv(host, initID),
		forkEv(id(5, 2*sec), id(6, 1*sec)), // placeholder creator
		exitEv(3*sec, id(7, 2*sec), 0),     // exit without fork
		exitEv(3*sec, id(7, 2*sec), 0),     // duplicate
		Event{Kind: KindExit},              // no process
	)
	g.Repair([]Snapshot{{ID: coarse(initID)}, snap(host, 1, "bash"), snap(id(5, 2*sec), 6, "x"), snap(id(8, 2*sec+1), 1, "y")}, 4*sec)
	s := g.Stats()
	want := Stats{
		Tracked: 6, Alive: 4, Exited: 2, Repairs: 1, DuplicateExits: 1, Ignored: 1,
		Gaps: map[Gap]uint64{GapSeeded: 1, GapNoFork: 2, GapUnknownCreator: 1, GapNoExit: 1, GapRepaired: 1},
	}
	for _, p := range g.Processes() {
		want.ImageBytes += p.ImageBytes()
	}
	if want.ImageBytes == 0 {
		t.Error("no image bytes accounted")
	}
	if fmt.Sprint(s) != fmt.Sprint(want) {
		t.Errorf("Stats = %+v\nwant    %+v", s, want)
	}
	if got := (GapSeeded | GapNoExit).String(); got != "seeded|no_exit" {
		t.Errorf("Gap.String = %q", got)
	}
}

// Run with -race: the graph must be safe for concurrent readers and writers.
func TestConcurrentApplyAndQueries(t *testing.T) {
	g := newGraph()
	seedInit(g)
	g.Apply(forkEv(host, initID))
	var wg sync.WaitGroup
	const n = 2000
	wg.Go(func() {
		for i := range n {
			c := id(uint32(10+i), 2*sec+uint64(i)*ms)
			g.Apply(forkEv(c, host))
			g.Apply(execEv(c.Start+1, c, "x", fmt.Sprint(i)))
			g.Apply(exitEv(c.Start+2, c, 0))
			if i%100 == 0 {
				g.Retire(c.Start)
				g.Repair([]Snapshot{{ID: coarse(initID)}, snap(host, 1, "bash")}, c.Start+3)
			}
		}
	})
	for range 4 {
		wg.Go(func() {
			for range n / 10 {
				for _, p := range g.Descendants(host) {
					if len(p.Images) > 0 {
						_ = slices.Clone(p.Images[0].Argv)
					}
				}
				g.Processes()
				g.Roots()
				g.Stats()
				g.Lookup(500)
			}
		})
	}
	wg.Wait()
	checkInvariants(t, g)
}

func TestSetParentRecordsReparentingButNotTheCreator(t *testing.T) {
	g := newGraph()
	root := id(1, sec)
	wrapper := id(100, 2*sec)
	daemon := id(101, 3*sec)
	apply(g, forkEv(root, ID{}), forkEv(wrapper, root), forkEv(daemon, wrapper), exitEv(4*sec, wrapper, 0))
	if !g.SetParent(daemon, 1, 5*sec) {
		t.Fatal("SetParent did not find the live daemon")
	}
	p := mustGet(t, g, daemon)
	if p.Parent != root || p.Creator != wrapper {
		t.Errorf("parent %v creator %v, want parent %v (reaper) and creator %v (unchanged)", p.Parent, p.Creator, root, wrapper)
	}
	if g.SetParent(wrapper, 1, 6*sec) {
		t.Error("SetParent changed an exited process")
	}
	if !g.SetParent(daemon, 100, 4*sec) || mustGet(t, g, daemon).Parent != root {
		t.Error("an older observation overwrote a newer parent")
	}
}
