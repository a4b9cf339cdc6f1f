package lineage

import (
	"fmt"
	"slices"
	"testing"
)

// Test times are ns since boot. Exact starts are deliberately not whole
// ticks, as kernel start times almost never are.
const (
	ms   = uint64(1_000_000)
	sec  = 1000 * ms
	tick = uint64(TickNS)
)

func id(pid uint32, start uint64) ID { return ID{PID: pid, Start: start} }

// coarse is the identity /proc shows for id.
func coarse(x ID) ID { return ID{PID: x.PID, Start: x.Start / tick * tick} }

func forkEv(child, creator ID) Event {
	return Event{Kind: KindFork, Time: child.Start, Proc: child, Creator: creator, Parent: creator}
}

func execEv(t uint64, p ID, argv ...string) Event {
	ev := Event{Kind: KindExec, Time: t, Proc: p, Argv: argv}
	if len(argv) > 0 {
		ev.Filename = "/usr/bin/" + argv[0]
		ev.Comm = argv[0]
	}
	return ev
}

func exitEv(t uint64, p ID, code int) Event {
	return Event{Kind: KindExit, Time: t, Proc: p, ExitCode: code}
}

func snap(x ID, ppid uint32, argv ...string) Snapshot {
	s := Snapshot{ID: coarse(x), PPID: ppid, Argv: argv}
	if len(argv) > 0 {
		s.Filename = "/usr/bin/" + argv[0]
		s.Comm = argv[0]
	}
	return s
}

func newGraph() *Graph { return New(Config{}) }

func apply(g *Graph, evs ...Event) {
	for _, ev := range evs {
		g.Apply(ev)
	}
}

func mustGet(t *testing.T, g *Graph, x ID) Process {
	t.Helper()
	p, ok := g.Get(x)
	if !ok {
		t.Fatalf("Get(%v): not found", x)
	}
	return p
}

func ids(ps []Process) []ID {
	out := make([]ID, len(ps))
	for i, p := range ps {
		out[i] = p.ID
	}
	return out
}

func argvs(p Process) [][]string {
	var out [][]string
	for _, im := range p.Images {
		out = append(out, im.Argv)
	}
	return out
}

func sources(p Process) []Source {
	var out []Source
	for _, im := range p.Images {
		out = append(out, im.Source)
	}
	return out
}

func equalIDs(t *testing.T, what string, got, want []ID) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Errorf("%s = %v, want %v", what, got, want)
	}
}

// checkInvariants verifies the internal structure of g.
func checkInvariants(t testing.TB, g *Graph) {
	t.Helper()
	if err := invariants(g); err != nil {
		t.Fatal(err)
	}
}

func invariants(g *Graph) error {
	g.mu.RLock()
	defer g.mu.RUnlock()
	inPID := 0
	for pid, nodes := range g.byPID {
		if len(nodes) == 0 {
			return fmt.Errorf("byPID[%d] is empty", pid)
		}
		if !slices.IsSortedFunc(nodes, cmpNodes) {
			return fmt.Errorf("byPID[%d] not sorted", pid)
		}
		for _, n := range nodes {
			if n.p.ID.PID != pid {
				return fmt.Errorf("node %v listed under pid %d", n.p.ID, pid)
			}
			if g.byID[n.p.ID] != n {
				return fmt.Errorf("node %v in byPID but not byID", n.p.ID)
			}
		}
		inPID += len(nodes)
	}
	if inPID != len(g.byID) {
		return fmt.Errorf("byPID holds %d nodes, byID %d", inPID, len(g.byID))
	}
	sum := 0
	for x, n := range g.byID {
		if b := n.p.ImageBytes(); n.bytes != b {
			return fmt.Errorf("%v accounted at %d image bytes, holds %d", x, n.bytes, b)
		}
		sum += n.bytes
	}
	if sum != g.imageBytes {
		return fmt.Errorf("graph accounts %d image bytes, its nodes hold %d", g.imageBytes, sum)
	}
	for x, n := range g.byID {
		if n.p.ID != x {
			return fmt.Errorf("byID[%v] holds %v", x, n.p.ID)
		}
		if n.retired {
			return fmt.Errorf("retired node %v still indexed", x)
		}
		if n.parent == n {
			return fmt.Errorf("%v is its own parent", x)
		}
		if c := n.creator; c != nil {
			if g.byID[c.p.ID] != c {
				return fmt.Errorf("creator %v of %v not in graph", c.p.ID, x)
			}
			k := 0
			for _, m := range c.children {
				if m == n {
					k++
				}
			}
			if k != 1 {
				return fmt.Errorf("%v listed %d times among its creator's children", x, k)
			}
		}
		for i, c := range n.children {
			if c.creator != n {
				return fmt.Errorf("child %v of %v has creator %p", c.p.ID, x, c.creator)
			}
			if int(c.childIdx) != i {
				return fmt.Errorf("child %v of %v at index %d says it is at %d", c.p.ID, x, i, c.childIdx)
			}
		}
		steps := 0
		for a := n.creator; a != nil; a = a.creator {
			if steps++; steps > len(g.byID) {
				return fmt.Errorf("creator cycle through %v", x)
			}
		}
		if !n.p.Exited && n.p.Gaps&GapNoExit != 0 {
			return fmt.Errorf("%v alive with GapNoExit", x)
		}
	}
	return nil
}
