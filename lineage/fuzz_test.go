package lineage

import (
	"testing"
	"time"
)

// FuzzApply drives a graph with arbitrary streams of events, seeds, repairs
// and retirements over a handful of PIDs and start times (so identities
// collide, recycle and match by tick), and checks that nothing panics, the
// internal structure stays consistent and every query terminates. Inputs of
// odd length run with tiny caps (5 nodes, 2 images, 1200 bytes of images,
// a few images' worth): the graph's byte accounting stays exact, no process keeps more
// images than the cap, no live process is ever evicted, and the graph is
// over its node cap only while nothing can be evicted. Every graph keeps
// only 2 recent exits and claims the first node of PID 3 it holds: no
// process of a claimed subtree goes but by Retire or the caps.
//
//	go test -run x -fuzz FuzzApply -fuzztime 30s ./lineage/
func FuzzApply(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{0, 1, 1, 2, 0, 0, 1, 0, 3, 1, 1, 0, 0, 0, 2, 1, 4, 1, 1, 0, 0, 0, 3, 0})
	f.Add([]byte{5, 1, 0, 2, 0, 0, 0, 0, 0, 1, 1, 2, 1, 0, 1, 0, 6, 3, 2, 1, 0, 0, 9, 0, 7, 0, 0, 0, 0, 0, 200, 0})
	f.Add([]byte{4, 2, 3, 0, 0, 0, 5, 1, 3, 2, 3, 0, 0, 2, 4, 2, 0, 2, 3, 1, 3, 1, 1, 3, 0, 1, 3, 2, 2, 0, 2, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg := Config{Retention: time.Millisecond * 50, RecentExits: 2}
		if len(data)%2 == 1 {
			cfg.MaxNodes, cfg.MaxImages, cfg.MaxImageBytes = 5, 2, 1200
		}
		g := New(cfg)
		exited := map[*node]bool{} // nodes seen exited: must never come back
		ops, kinds := fuzzOps(data)
		claimed := false
		for i, o := range ops {
			var alive, held []*node
			for _, n := range g.byID {
				if !n.p.Exited {
					alive = append(alive, n)
				}
				for a := n; a != nil; a = a.creator {
					if a.claims > 0 {
						held = append(held, n)
						break
					}
				}
			}
			o(g)
			if !claimed {
				for _, n := range g.byPID[3] {
					claimed = g.Claim(n.p.ID)
					break
				}
			}
			if kinds[i] != "retire" && !g.overCaps() && g.stats.evicted == 0 {
				for _, n := range held {
					if n.retired {
						t.Fatalf("%v of a claimed subtree dropped by op %d (%s)", n.p.ID, i, kinds[i])
					}
				}
			}
			if err := invariants(g); err != nil {
				t.Fatal(err)
			}
			for _, n := range alive {
				if n.retired && !n.p.Exited {
					t.Fatalf("live process %v evicted by op %d (%s)", n.p.ID, i, kinds[i])
				}
			}
			for _, n := range g.byID {
				if len(n.p.Images) > g.maxImages {
					t.Fatalf("%v keeps %d images, cap %d", n.p.ID, len(n.p.Images), g.maxImages)
				}
			}
			switch {
			case g.overCaps() && g.nextEvictAt == 0:
				t.Fatalf("%d nodes, %d image bytes at caps %d, %d and no eviction tried", len(g.byID), g.imageBytes, g.maxNodes, g.maxBytes)
			case g.nextEvictAt > 0 && len(g.byID) > g.nextEvictAt+1:
				t.Fatalf("%d nodes, past the next eviction point %d", len(g.byID), g.nextEvictAt)
			}
			for _, n := range g.byID {
				if n.p.Exited {
					exited[n] = true
				} else if exited[n] {
					t.Fatalf("%v resurrected by op %d (%s)", n.p.ID, i, kinds[i])
				}
			}
		}
		s := g.Stats()
		ps := g.Processes()
		if len(ps) != s.Tracked || s.Alive+s.Exited != s.Tracked {
			t.Fatalf("stats %+v disagree with %d processes", s, len(ps))
		}
		for _, p := range ps {
			if q, ok := g.Get(p.ID); !ok || q.ID != p.ID {
				t.Fatalf("Get(%v) = %v, %v", p.ID, q.ID, ok)
			}
			if a := g.Ancestors(p.ID); len(a) == 0 || len(a) > len(ps) || a[0].ID != p.ID {
				t.Fatalf("Ancestors(%v) = %v", p.ID, ids(a))
			}
			if d := g.Descendants(p.ID); len(d) == 0 || len(d) > len(ps) || d[0].ID != p.ID {
				t.Fatalf("Descendants(%v) = %v", p.ID, ids(d))
			}
			for _, c := range g.Children(p.ID) {
				if c.Creator != p.ID {
					t.Fatalf("child %v of %v has creator %v", c.ID, p.ID, c.Creator)
				}
			}
		}
		if len(g.Roots()) > len(ps) {
			t.Fatalf("more roots than processes")
		}
	})
}

// fuzzOps decodes fuzz input into calls on a graph, 8 bytes each: forks,
// execs and exits over a handful of PIDs and start times (so identities
// collide, recycle and match by tick), seeds, repairs, retirements and
// SetParent, with strings that are not UTF-8. FuzzApply and
// FuzzDumpRestore both drive graphs with it; the second result names
// each op's kind for messages.
func fuzzOps(data []byte) (ops []op, kinds []string) {
	for len(data) >= 8 {
		b := data[:8]
		data = data[8:]
		proc := ID{PID: uint32(b[1] % 6), Start: uint64(b[2]%4) * 7_000_003}
		other := ID{PID: uint32(b[3] % 6), Start: uint64(b[4]%4) * 7_000_003}
		parent := ID{PID: uint32(b[5] % 6), Start: uint64(b[5]/6%4) * 7_000_003}
		if b[5]&0x80 != 0 {
			parent = ID{}
		}
		at := uint64(b[6]) * 3_000_001
		argv := [][]string{nil, {"sh"}, {"sh", "-c", "x"}, {"node", "srv.js"}, {"na\xc3"}}[b[7]%5]
		comm := []string{"c", "", "caf\xc3"}[b[7]%3]
		kind := [9]string{"fork", "fork", "fork", "exec", "exit", "seed", "repair", "retire", "set-parent"}[b[0]%9]
		kinds = append(kinds, kind)
		switch b[0] % 9 {
		case 0, 1, 2:
			ops = append(ops, evOp(Event{Kind: KindFork, Time: at, Proc: proc, Creator: other, Parent: parent, UID: uint32(b[7]), Comm: comm, CgroupID: uint64(b[4] % 3)}))
		case 3:
			ops = append(ops, evOp(Event{Kind: KindExec, Time: at, Proc: proc, Parent: parent, Filename: "/bin/x", Argv: argv, ArgvTruncated: b[7]&8 != 0, Comm: comm, UID: uint32(b[3] % 2)}))
		case 4:
			ops = append(ops, evOp(Event{Kind: KindExit, Time: at, Proc: proc, Parent: parent, ExitCode: int(b[7]), Signal: int(b[4])}))
		case 5, 6:
			s := []Snapshot{
				{ID: coarse(proc), PPID: other.PID, Filename: "/bin/x", Argv: argv, Kernel: b[7]&16 != 0, Comm: comm, UID: uint32(b[3] % 2)},
				{ID: coarse(other), PPID: parent.PID},
			}
			if b[0]%9 == 5 {
				ops = append(ops, seedOp(s, at))
			} else {
				ops = append(ops, repairOp(s[:1+int(b[7]%2)], at))
			}
		case 7:
			ops = append(ops, retireOp(at))
		case 8:
			ops = append(ops, setParentOp(proc, other.PID, at))
		}
	}
	return ops, kinds
}
