package lineage

import (
	"testing"
)

// deadChain forks n processes below top, each created by the previous one
// and exited right after its fork, and a live leaf below the last: the
// chain a process that forks and exits in a loop leaves. It returns the
// chain, top first, and the leaf.
func deadChain(g *Graph, top ID, n int, pid uint32, at uint64) (chain []ID, leaf ID) {
	creator := top
	for i := range n {
		x := id(pid+uint32(i), at+uint64(i)*ms)
		apply(g, forkEv(x, creator))
		if i > 0 {
			apply(g, exitEv(x.Start+1, creator, 0))
		}
		chain = append(chain, x)
		creator = x
	}
	leaf = id(pid+uint32(n), at+uint64(n)*ms)
	apply(g, forkEv(leaf, creator), exitEv(leaf.Start+1, creator, 0))
	return chain, leaf
}

func TestRetireFoldsExitedCreatorsPastARunOf64(t *testing.T) {
	g := newGraph()
	seedInit(g)
	apply(g, forkEv(host, initID))
	chain, leaf := deadChain(g, host, 200, 2000, 2*sec)
	if n := g.Stats().Tracked; n != 203 {
		t.Fatalf("%d nodes before Retire, want 203", n)
	}
	g.Retire(3 * sec) // nothing is past retention: only folding
	checkInvariants(t, g)

	// host → the first 64 of the chain (exited, one child each; the first
	// below the live host) → leaf.
	anc := ids(g.Ancestors(leaf))
	want := append([]ID{leaf}, reversed(chain[:64])...)
	want = append(want, host, initID)
	equalIDs(t, "Ancestors(leaf)", anc, want)
	p := mustGet(t, g, leaf)
	if p.Creator != chain[63] || p.CreatorsElided != 136 {
		t.Errorf("leaf creator %v with %d elided, want %v and 136", p.Creator, p.CreatorsElided, chain[63])
	}
	if s := g.Stats(); s.Folded != 136 || s.Tracked != 67 {
		t.Errorf("stats: folded %d, tracked %d; want 136 and 67", s.Folded, s.Tracked)
	}
	// Created by the host, at any depth, as before.
	if !g.InCreatorChain(host, leaf) || !containsID(ids(g.Descendants(host)), leaf) {
		t.Errorf("leaf no longer below the host: %v", ids(g.Descendants(host)))
	}
	// Folding again changes nothing.
	g.Retire(3 * sec)
	if s := g.Stats(); s.Folded != 136 {
		t.Errorf("a second Retire folded %d in all, want 136", s.Folded)
	}
}

func TestCapsFoldExitedCreatorsOfALiveProcess(t *testing.T) {
	g := New(Config{MaxNodes: 100})
	seedInit(g)
	apply(g, forkEv(host, initID))
	chain, leaf := deadChain(g, host, 5000, 2000, 2*sec)
	checkInvariants(t, g)
	s := g.Stats()
	if s.Tracked > 100 || s.Folded == 0 {
		t.Errorf("5,000 exited creators above a live process: %d nodes at a cap of 100, %d folded", s.Tracked, s.Folded)
	}
	// The host's child stays (it decides the generation below the
	// host); every one of the 5,000 is still counted between the two.
	anc := g.Ancestors(leaf)
	if n := len(anc); n < 4 || anc[n-3].ID != chain[0] || anc[n-2].ID != host {
		t.Fatalf("Ancestors(leaf) = %v, want leaf … %v, host, init", ids(anc), chain[0])
	}
	kept, elided := len(anc)-3, 0
	for _, p := range anc {
		elided += int(p.CreatorsElided)
	}
	if kept+elided != 5000 {
		t.Errorf("%d creators kept and %d elided between the host and the leaf, want 5,000 in all", kept, elided)
	}
}

func TestPinnedProcessIsNeverFolded(t *testing.T) {
	g := New(Config{MaxNodes: 100})
	seedInit(g)
	apply(g, forkEv(host, initID))
	chain, _ := deadChain(g, host, 10, 2000, 2*sec)
	if !g.Pin(chain[5]) || !g.Pin(chain[5]) {
		t.Fatal("Pin: not found")
	}
	g.Unpin(chain[5]) // one pin left
	deadChain(g, host, 5000, 10000, 3*sec)
	checkInvariants(t, g)
	if _, ok := g.Get(chain[5]); !ok {
		t.Errorf("pinned %v folded", chain[5])
	}
	if _, ok := g.Get(chain[4]); ok {
		t.Errorf("%v (unpinned, exited, one child, exited creator) kept at the cap", chain[4])
	}
	g.Unpin(chain[5])
	deadChain(g, host, 200, 20000, 4*sec)
	if _, ok := g.Get(chain[5]); ok {
		t.Errorf("%v kept at the cap after its last Unpin", chain[5])
	}
}

func TestFoldKeepsWhatItCannotProve(t *testing.T) {
	tests := []struct {
		name string
		// build returns the process whose creator chain must keep x.
		build func(g *Graph) (x, below ID)
	}{
		{"a creator guessed from /proc", func(g *Graph) (ID, ID) {
			a, b, c, d := id(10, 2*sec), id(11, 2*sec+1), id(12, 2*sec+2), id(13, 3*sec+5)
			apply(g, forkEv(a, host), forkEv(b, a))
			g.Repair([]Snapshot{snap(initID, 0, "init"), snap(host, 1, "host"), snap(c, 11, "c")}, 3*sec)
			apply(g, forkEv(d, c), exitEv(4*sec, a, 0), exitEv(4*sec+1, b, 0), exitEv(4*sec+2, c, 0))
			return b, d // c's creator b is a guess: neither is folded
		}},
		{"a process with two children", func(g *Graph) (ID, ID) {
			a, b, c, d, e := id(10, 2*sec), id(11, 2*sec+1), id(12, 2*sec+2), id(13, 2*sec+3), id(14, 2*sec+4)
			apply(g, forkEv(a, host), forkEv(b, a), forkEv(c, b), forkEv(d, b), forkEv(e, c),
				exitEv(4*sec, a, 0), exitEv(4*sec+1, b, 0), exitEv(4*sec+2, c, 0))
			return b, e
		}},
		{"an exit the graph only inferred", func(g *Graph) (ID, ID) {
			// n vanished from /proc without an exit event: a fork of it
			// the ring still holds must find it.
			a, n, d := id(10, 2*sec), id(11, 2*sec+1), id(12, 2*sec+2)
			apply(g, forkEv(a, host), forkEv(n, a), forkEv(d, n), exitEv(2*sec+3, a, 0))
			g.Repair([]Snapshot{snap(initID, 0, "init"), snap(host, 1, "host"), snap(d, 1, "d")}, 3*sec)
			if p := mustGet(t, g, n); !p.Exited || p.Gaps&GapNoExit == 0 {
				t.Fatalf("n after the repair: %+v, want exited with GapNoExit", p)
			}
			return n, d
		}},
		{"the first exited process below a live one", func(g *Graph) (ID, ID) {
			a, b := id(10, 2*sec), id(11, 2*sec+1)
			apply(g, forkEv(a, host), forkEv(b, a), exitEv(4*sec, a, 0))
			return a, b
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := newGraph()
			seedInit(g)
			apply(g, forkEv(host, initID))
			x, below := tt.build(g)
			g.mu.Lock()
			g.fold(1) // as the caps do: every run, however short
			g.mu.Unlock()
			checkInvariants(t, g)
			if !containsID(ids(g.Ancestors(below)), x) {
				t.Errorf("%v folded out of %v's chain: %v", x, below, ids(g.Ancestors(below)))
			}
		})
	}
}

func reversed(xs []ID) []ID {
	out := make([]ID, len(xs))
	for i, x := range xs {
		out[len(xs)-1-i] = x
	}
	return out
}

func containsID(xs []ID, x ID) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}
