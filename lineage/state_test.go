package lineage

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// An op is one call on a graph; its result is compared between graphs.
type op func(g *Graph) any

func evOp(ev Event) op { return func(g *Graph) any { g.Apply(ev); return nil } }

func evOps(evs ...Event) []op {
	out := make([]op, len(evs))
	for i, ev := range evs {
		out[i] = evOp(ev)
	}
	return out
}

func seedOp(snaps []Snapshot, at uint64) op {
	return func(g *Graph) any { g.Seed(snaps, at); return nil }
}

func repairOp(snaps []Snapshot, at uint64) op {
	return func(g *Graph) any { return g.Repair(snaps, at) }
}

func retireOp(now uint64) op { return func(g *Graph) any { return g.Retire(now) } }

func setParentOp(x ID, ppid uint32, at uint64) op {
	return func(g *Graph) any { return g.SetParent(x, ppid, at) }
}

// run applies ops to g and returns their results.
func run(g *Graph, ops []op) []any {
	out := make([]any, len(ops))
	for i, o := range ops {
		out[i] = o(g)
	}
	return out
}

// viaJSON dumps g, encodes the State, decodes it and restores it with cfg.
// It fails unless every step is exact: the decoded State equals the dump,
// and the restored graph dumps to the same State and the same bytes.
func viaJSON(t testing.TB, g *Graph, cfg Config) *Graph {
	t.Helper()
	d1 := g.Dump()
	b1, err := json.Marshal(d1)
	if err != nil {
		t.Fatalf("json.Marshal(Dump()): %v", err)
	}
	var s State
	if err := json.Unmarshal(b1, &s); err != nil {
		t.Fatalf("json.Unmarshal: %v", err)
	}
	if !reflect.DeepEqual(s, d1) {
		t.Fatalf("JSON round trip changed the State:\n%s", stateDiff(d1, s))
	}
	r, err := Restore(cfg, s)
	if err != nil {
		t.Fatalf("Restore(Dump()): %v", err)
	}
	checkInvariants(t, r)
	d2 := r.Dump()
	if !reflect.DeepEqual(d2, d1) {
		t.Fatalf("Dump after Restore differs:\n%s", stateDiff(d1, d2))
	}
	b2, err := json.Marshal(d2)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b1, b2) {
		t.Fatalf("JSON of the restored graph differs:\n%s\n%s", b1, b2)
	}
	return r
}

// stateDiff describes the first differences between two States.
func stateDiff(a, b State) string {
	var out []string
	if a.Clock != b.Clock || a.RepairAt != b.RepairAt {
		out = append(out, fmt.Sprintf("clock %d/%d repair_at %d/%d", a.Clock, b.Clock, a.RepairAt, b.RepairAt))
	}
	if !reflect.DeepEqual(a.Repaired, b.Repaired) {
		out = append(out, fmt.Sprintf("repaired %v / %v", a.Repaired, b.Repaired))
	}
	if !reflect.DeepEqual(a.Stats, b.Stats) {
		out = append(out, fmt.Sprintf("stats %+v / %+v", a.Stats, b.Stats))
	}
	if len(a.Nodes) != len(b.Nodes) {
		out = append(out, fmt.Sprintf("%d nodes / %d", len(a.Nodes), len(b.Nodes)))
	}
	for i := range min(len(a.Nodes), len(b.Nodes)) {
		if !reflect.DeepEqual(a.Nodes[i], b.Nodes[i]) {
			out = append(out, fmt.Sprintf("node %d:\n  %+v\n  %+v", i, a.Nodes[i], b.Nodes[i]))
			if len(out) > 5 {
				break
			}
		}
	}
	if (a.Nodes == nil) != (b.Nodes == nil) {
		out = append(out, fmt.Sprintf("nodes nil: %v / %v", a.Nodes == nil, b.Nodes == nil))
	}
	if !reflect.DeepEqual(a.Recent, b.Recent) {
		out = append(out, fmt.Sprintf("recent %v / %v", a.Recent, b.Recent))
	}
	return strings.Join(out, "\n")
}

// view is what queries show of a graph, without its bookkeeping.
type view struct {
	Processes []Process
	Roots     []ID
	Stats     Stats
}

func viewOf(g *Graph) view { return view{g.Processes(), g.Roots(), g.Stats()} }

// sameAnswers checks that every query answers the same on a and b, for the
// identity of every process (or a sample of 200 in a large graph), its
// coarse form, a neighbour in the same tick and an unknown one.
func sameAnswers(t testing.TB, a, b *Graph) {
	t.Helper()
	if va, vb := viewOf(a), viewOf(b); !reflect.DeepEqual(va, vb) {
		t.Fatalf("Processes, Roots or Stats differ:\n%+v\n%+v", va, vb)
	}
	ps := a.Processes()
	step := max(1, len(ps)/200)
	probes := []ID{{PID: 424242, Start: 1}}
	for i := 0; i < len(ps); i += step {
		x := ps[i].ID
		probes = append(probes, x, coarse(x), ID{PID: x.PID, Start: x.Start + 1}, ID{PID: x.PID, Start: x.Start/tick*tick + tick/2})
	}
	for _, x := range probes {
		for _, q := range []struct {
			name string
			ask  func(g *Graph) any
		}{
			{"Get", func(g *Graph) any { p, ok := g.Get(x); return []any{p, ok} }},
			{"Lookup", func(g *Graph) any { p, ok := g.Lookup(x.PID); return []any{p, ok} }},
			{"Descendants", func(g *Graph) any { return g.Descendants(x) }},
			{"Ancestors", func(g *Graph) any { return g.Ancestors(x) }},
			{"Children", func(g *Graph) any { return g.Children(x) }},
		} {
			if qa, qb := q.ask(a), q.ask(b); !reflect.DeepEqual(qa, qb) {
				t.Fatalf("%s(%v) differs:\n%+v\n%+v", q.name, x, qa, qb)
			}
		}
	}
}

// A scenario builds a graph through the public API.
type scenario struct {
	name string
	cfg  Config
	ops  []op
}

func (sc scenario) build(t testing.TB) *Graph {
	t.Helper()
	g := New(sc.cfg)
	run(g, sc.ops)
	checkInvariants(t, g)
	return g
}

// scenarios are the graphs the round-trip tests dump and restore.
func scenarios() []scenario {
	shell := id(200, 2*sec+12_345_678)
	kid := id(201, 3*sec+45_678_901)
	server := id(202, 2*sec+5_003)
	wrapper := id(203, 2*sec+3)
	kthreadd := id(2, 5_000_009)
	worker := id(300, 9*sec+1)
	seeded := []op{
		seedOp([]Snapshot{
			{ID: coarse(initID), Comm: "systemd", Filename: "/usr/lib/systemd/systemd", Argv: []string{"/sbin/init"}},
			{ID: coarse(kthreadd), PPID: 0, Comm: "kthreadd", Kernel: true},
			snap(shell, 1, "bash"),
			snap(kid, 200, "sleep", "60"),
			snap(server, 1, "node", "server.js"),
			snap(id(204, 2*sec+9), 1999, "orphan"), // its parent vanished during the scan
		}, 10*sec),
		evOp(forkEv(wrapper, initID)), evOp(forkEv(server, wrapper)), evOp(exitEv(3*sec, wrapper, 0)),
		evOp(execEv(11*sec, shell, "zsh")),
		evOp(forkEv(worker, kthreadd)),
		evOp(Event{Kind: KindFork, Time: 12 * sec, Proc: id(205, 12*sec), Creator: shell, Parent: shell, Comm: "zsh", UID: 1000, CgroupID: 42}),
		evOp(execEv(12*sec+5, id(205, 12*sec), "git", "status")),
	}

	npx, npm := id(2000, 2*sec+1), id(2001, 2*sec+50_000_003)
	sh, node := id(2002, 2*sec+90_000_007), id(2003, 3*sec+1)
	session := append(commonStart(),
		evOp(execEv(2*sec+2, npx, "npx", "-y", "@modelcontextprotocol/server-filesystem", "/srv")),
		evOp(forkEv(npx, host)),
		evOp(forkEv(npm, npx)), evOp(execEv(2*sec+60_000_000, npm, "npm", "exec", "server-filesystem")),
		evOp(forkEv(sh, npm)), evOp(execEv(2*sec+95_000_000, sh, "sh", "-c", "node dist/index.js /srv")),
		evOp(forkEv(node, sh)), evOp(execEv(3*sec+2, node, "node", "dist/index.js", "/srv")),
		evOp(exitEv(3*sec+5, sh, 0)), evOp(exitEv(3*sec+6, npm, 0)),
		evOp(Event{Kind: KindExec, Time: 3*sec + 7, Proc: node, Parent: initID, Filename: "/usr/bin/node", Argv: []string{"node", "dist/index.js", "/srv"}}),
		setParentOp(node, 1, 4*sec),
	)

	old, reused := id(4242, 2*sec+7), id(4242, 9*sec+13)
	old2, reused2 := id(4243, 2*sec+9), id(4243, 9*sec+15)
	recycled := append(commonStart(),
		evOp(forkEv(old, host)), evOp(execEv(old.Start+1, old, "sleep", "100")),
		evOp(forkEv(reused, host)),
		evOp(forkEv(reused2, host)), evOp(forkEv(old2, host)), // late fork of the older identity
		evOp(exitEv(old2.Start+9, old2, 5)), // the real exit replaces the inferred one
	)

	ghost, child := id(5000, 1*sec+77), id(5001, 7*sec+1)
	x := id(5100, 8*sec+3)
	outOfOrder := append(commonStart(),
		evOp(forkEv(child, ghost)), // placeholder creator
		evOp(execEv(7*sec+5, ghost, "npx", "server")),
		evOp(exitEv(8*sec+9, x, 2)), evOp(execEv(8*sec+5, x, "python3", "-m", "srv")), evOp(forkEv(x, child)),
		// A duplicate exit, two events naming no process, an exit without
		// time (marked at the clock).
		evOp(exitEv(8*sec+9, x, 2)),
		evOp(Event{Kind: KindExit, Time: 9 * sec}), evOp(Event{Kind: 99, Proc: x}),
		evOp(Event{Kind: KindExit, Proc: child}),
		evOp(Event{Kind: KindFork, Time: 9 * sec, Proc: id(5200, 9*sec)}),
	)

	alive, vanished := id(1200, 2*sec+3), id(1201, 2*sec+5)
	found, moved := id(1204, 15*sec+3), id(1205, 3*sec+3)
	repaired := append(commonStart(),
		evOp(forkEv(alive, host)), evOp(forkEv(vanished, host)), evOp(forkEv(moved, alive)),
		repairOp([]Snapshot{
			{ID: coarse(initID)}, snap(host, 1, "bash"), snap(alive, host.PID, "a"),
			snap(found, alive.PID, "python3", "mcp.py"), snap(moved, 1, "m"),
		}, 20*sec),
		evOp(forkEv(id(1500, 12*sec+3), host)), // late: gone at the scan
		evOp(execEv(21*sec, found, "python3", "mcp.py")),
	)

	a, a1 := id(10, 2*sec+1), id(11, 2*sec+2)
	b, c := id(20, 3*sec+1), id(21, 3*sec+2)
	retired := append(commonStart(),
		evOp(forkEv(a, host)), evOp(forkEv(a1, a)), evOp(forkEv(b, host)),
		// c is created by a1 but reports b as parent; b's branch retires
		// while c runs, so c's parent is a retired node.
		evOp(Event{Kind: KindFork, Time: c.Start, Proc: c, Creator: a1, Parent: b}),
		evOp(exitEv(4*sec, a, 0)), evOp(exitEv(4*sec, a1, 0)), evOp(exitEv(4*sec+1, b, 0)),
		retireOp(6*sec),
	)

	daemon := id(700, 2*sec)
	reparented := []op{
		evOp(Event{Kind: KindFork, Time: daemon.Start, Proc: daemon}),
		setParentOp(daemon, 1, 3*sec), // no node of PID 1 yet: kept as 1@0
		seedInitOp(),
		evOp(forkEv(host, initID)),
		evOp(forkEv(id(701, 5*sec), host)),
		setParentOp(id(701, 5*sec), 0, 6*sec),
		setParentOp(id(701, 5*sec), host.PID, 5*sec), // older: ignored
		evOp(forkEv(id(702, 7*sec), host)),
		setParentOp(id(702, 7*sec), 999, 8*sec), // no such process
	}

	bin := id(800, 2*sec+1)
	notUTF8 := append(commonStart(),
		evOp(Event{Kind: KindFork, Time: bin.Start, Proc: bin, Creator: host, Parent: host, Comm: "caf\xc3"}),
		evOp(Event{Kind: KindExec, Time: bin.Start + 1, Proc: bin, Comm: "na\xc3\xafve-tool-\xe2\x82",
			Filename: "/opt/\xff/tool", Argv: []string{"tool", "--name=na\xc3"}, ArgvTruncated: true}),
	)

	// A process that execs itself past its image cap, dead branches
	// evicted by the node cap and live processes admitted over it.
	looper := id(900, 2*sec+1)
	capped := append(commonStart(), evOp(forkEv(looper, host)))
	for i := range 6 {
		capped = append(capped, evOp(execEv(looper.Start+1+uint64(i), looper, "loop", fmt.Sprint(i))))
	}
	for i := range 8 {
		x := id(910+uint32(i), 3*sec+uint64(i)*ms)
		capped = append(capped, evOp(forkEv(x, host)))
		if i%2 == 0 {
			capped = append(capped, evOp(exitEv(x.Start+1, x, 0)))
		}
	}

	out := []scenario{
		{"empty", Config{}, nil},
		{"image and node caps", Config{MaxNodes: 6, MaxImages: 3}, capped},
		{"seed with coarse starts then buffered and new events", Config{}, seeded},
		{"agent session through dead wrappers", Config{}, session},
		{"recycled pids", Config{}, recycled},
		{"out of order events and placeholders", Config{}, outOfOrder},
		{"repair after lost events", Config{}, repaired},
		{"retired branches and a retired parent", Config{Retention: time.Second}, retired},
		{"reparenting", Config{}, reparented},
		{"strings that are not UTF-8", Config{}, notUTF8},
	}
	for _, seed := range []uint64{1, 2, 3} {
		out = append(out, scenario{fmt.Sprintf("simulated node %d", seed), simConfig, simulate(seed, 1500)})
	}
	return out
}

func seedInitOp() op { return func(g *Graph) any { seedInit(g); return nil } }

// commonStart seeds init and forks the host shell.
func commonStart() []op {
	return []op{seedInitOp(), evOp(forkEv(host, initID)), evOp(execEv(host.Start+1, host, "bash"))}
}

func TestDumpRestoreRoundTrip(t *testing.T) {
	for _, sc := range scenarios() {
		t.Run(sc.name, func(t *testing.T) {
			g := sc.build(t)
			r := viaJSON(t, g, sc.cfg)
			sameAnswers(t, g, r)
			if len(g.Processes()) == 0 && sc.name != "empty" {
				t.Fatal("scenario built an empty graph")
			}
		})
	}
}

// continuation is what a graph might see after a restart: events for its
// processes (execs, exits, new children, late forks of coarse nodes),
// reparenting, a repair that misses some processes, late events and
// retirements. It is derived from s, the original's Dump, so both graphs
// receive the same calls.
func continuation(s State, cfg Config) []op {
	retention := uint64(DefaultRetention)
	if cfg.Retention > 0 {
		retention = uint64(cfg.Retention)
	}
	t := s.Clock + 1*ms
	var ops []op
	var snaps []Snapshot
	nextPID := uint32(60000)
	for i, ns := range s.Nodes {
		x := ns.ID
		exact := x
		if ns.CoarseStart {
			exact.Start += 3_000_007 // an exact start in the same tick
		}
		t += 100_003
		switch i % 5 {
		case 0:
			c := ID{PID: nextPID, Start: t}
			nextPID++
			ops = append(ops, evOp(forkEv(c, exact)), evOp(execEv(t+1, c, "node", fmt.Sprint(i))))
			snaps = append(snaps, snap(c, x.PID, "node", fmt.Sprint(i)))
		case 1:
			ops = append(ops, evOp(execEv(t, exact, "sh", "-c", "true")), setParentOp(exact, 1, t+2))
		case 2:
			ops = append(ops, evOp(exitEv(t, exact, 0)), evOp(exitEv(t+5, exact, 1)))
		case 3:
			// An older event: its comm, uid, cgroup and parent must not win.
			ops = append(ops, evOp(Event{Kind: KindFork, Time: x.Start, Proc: exact, Creator: ID{PID: 1, Start: 5_000_001},
				Parent: ID{PID: 77, Start: 1}, Comm: "old", UID: 4242, CgroupID: 9}))
			snaps = append(snaps, Snapshot{ID: coarse(x), PPID: 1, Comm: "late", Argv: []string{"late"}})
		case 4:
			snaps = append(snaps, Snapshot{ID: coarse(x), PPID: 2, Comm: "kept"})
		}
	}
	readAt := t + 1*ms
	ops = append(ops,
		repairOp(snaps, readAt),
		evOp(forkEv(ID{PID: 61000, Start: readAt - 5*ms}, ID{PID: 1, Start: 5_000_001})), // late: gone at the scan
		evOp(execEv(readAt+1, ID{PID: 60000, Start: s.Clock + 1*ms + 100_003}, "late")),
		retireOp(readAt+retention-1),
		evOp(Event{Kind: KindExit, Proc: ID{PID: 60001, Start: 1}}),
		retireOp(readAt+retention+1),
		retireOp(readAt+3*retention),
	)
	return ops
}

func TestRestoreContinuesLikeTheOriginal(t *testing.T) {
	for _, sc := range scenarios() {
		t.Run(sc.name, func(t *testing.T) {
			g := sc.build(t)
			r := viaJSON(t, g, sc.cfg)
			cont := continuation(g.Dump(), sc.cfg)
			if got, want := run(r, cont), run(g, cont); !reflect.DeepEqual(got, want) {
				t.Errorf("results differ:\nrestored %v\noriginal %v", got, want)
			}
			checkInvariants(t, r)
			if d, want := r.Dump(), g.Dump(); !reflect.DeepEqual(d, want) {
				t.Fatalf("after the continuation:\n%s", stateDiff(want, d))
			}
			sameAnswers(t, g, r)
		})
	}
}

// TestRestoreAnywhereInASimulatedStream restarts the agent at many points
// of simulated streams: the restored graph must end where the original
// does.
func TestRestoreAnywhereInASimulatedStream(t *testing.T) {
	for seed := uint64(10); seed < 16; seed++ {
		ops := simulate(seed, 800)
		want := New(simConfig)
		wantResults := run(want, ops)
		for k := 0; k <= len(ops); k += len(ops)/7 + 1 {
			t.Run(fmt.Sprintf("seed %d at op %d", seed, k), func(t *testing.T) {
				g := New(simConfig)
				results := run(g, ops[:k])
				r := viaJSON(t, g, simConfig)
				results = append(results, run(r, ops[k:])...)
				if !reflect.DeepEqual(results, wantResults) {
					t.Errorf("results differ:\n%v\n%v", results, wantResults)
				}
				checkInvariants(t, r)
				if d, w := r.Dump(), want.Dump(); !reflect.DeepEqual(d, w) {
					t.Fatalf("final state:\n%s", stateDiff(w, d))
				}
			})
		}
	}
}

// A pinCase proves that a continuation's outcome depends on a piece of
// bookkeeping that no query shows: mutate changes only that piece in the
// original's State (as a Dump or Restore that lost it would), and the
// graph restored from the mutated State must end differently.
type pinCase struct {
	name   string
	pins   string // the State or NodeState field
	cfg    Config
	build  []op
	cont   []op
	mutate func(s *State)
	check  func(t *testing.T, g *Graph) // the outcome, on the restored graph
}

func runPinCases(t *testing.T, cases []pinCase) {
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := New(tc.cfg)
			run(g, tc.build)
			checkInvariants(t, g)
			r := viaJSON(t, g, tc.cfg)

			s := g.Dump()
			tc.mutate(&s)
			if reflect.DeepEqual(s, g.Dump()) {
				t.Fatalf("mutating %s changed nothing", tc.pins)
			}
			m, err := Restore(tc.cfg, s)
			if err != nil {
				t.Fatalf("Restore(mutated): %v", err)
			}
			if !reflect.DeepEqual(viewOf(m), viewOf(g)) {
				t.Fatalf("mutating %s changed what queries show: it is not bookkeeping", tc.pins)
			}

			want := run(g, tc.cont)
			if got := run(r, tc.cont); !reflect.DeepEqual(got, want) {
				t.Errorf("results differ: restored %v, original %v", got, want)
			}
			if d, w := r.Dump(), g.Dump(); !reflect.DeepEqual(d, w) {
				t.Fatalf("after the continuation:\n%s", stateDiff(w, d))
			}
			sameAnswers(t, g, r)
			tc.check(t, r)

			mres := run(m, tc.cont)
			if reflect.DeepEqual(viewOf(m), viewOf(g)) && reflect.DeepEqual(mres, want) {
				t.Errorf("the continuation does not depend on %s: a Dump without it would pass", tc.pins)
			}
		})
	}
}

// forEachNode applies f to every node of s.
func forEachNode(f func(ns *NodeState)) func(s *State) {
	return func(s *State) {
		for i := range s.Nodes {
			f(&s.Nodes[i])
		}
	}
}

// The cast of the pin cases.
var (
	pinServer  = id(801, 2*sec+5_003)
	pinWrapper = id(800, 2*sec+3)
	pinOther   = id(802, 2*sec+7)
	pinX       = id(3100, 4*sec+7)
	pinLate    = id(1500, 12*sec+3)
	pinListed  = id(1502, 12*sec+7)
	pinShell   = id(200, 2*sec+12_345_678)
	pinKid     = id(201, 3*sec+45_678_901)
	pinDaemon  = id(700, 2*sec)
	pinOld     = id(4242, 2*sec+7)
	pinReused  = id(4242, 9*sec+13)
	kthreaddID = id(2, 5_000_009)
)

var pinnedSnapshotCreator = []pinCase{
	{
		name: "seeded creator yields to the buffered fork",
		pins: "CreatorFromSnapshot",
		build: []op{seedOp([]Snapshot{
			{ID: coarse(initID), Comm: "systemd"}, snap(pinServer, 1, "node", "server.js"),
		}, 4*sec)},
		cont:   evOps(forkEv(pinWrapper, initID), forkEv(pinServer, pinWrapper), exitEv(3*sec, pinWrapper, 0)),
		mutate: forEachNode(func(ns *NodeState) { ns.CreatorFromSnapshot = false }),
		check: func(t *testing.T, g *Graph) {
			equalIDs(t, "Ancestors(server)", ids(g.Ancestors(pinServer)), []ID{pinServer, pinWrapper, initID})
		},
	},
	{
		name: "repaired creator yields to a late fork",
		pins: "CreatorFromSnapshot",
		build: append(commonStart(), repairOp([]Snapshot{
			{ID: coarse(initID)}, snap(host, 1, "bash"), snap(pinServer, host.PID, "node", "server.js"),
		}, 20*sec)),
		cont:   evOps(forkEv(pinWrapper, host), forkEv(pinServer, pinWrapper)),
		mutate: forEachNode(func(ns *NodeState) { ns.CreatorFromSnapshot = false }),
		check: func(t *testing.T, g *Graph) {
			equalIDs(t, "Ancestors(server)", ids(g.Ancestors(pinServer)), []ID{pinServer, pinWrapper, host, initID})
		},
	},
	{
		name: "a creator named by a fork is written once",
		pins: "CreatorFromSnapshot",
		build: []op{
			seedOp([]Snapshot{{ID: coarse(initID)}, snap(pinServer, 1, "node"), snap(pinOther, 1, "other")}, 4*sec),
			evOp(forkEv(pinWrapper, initID)), evOp(forkEv(pinServer, pinWrapper)),
		},
		cont: evOps(Event{Kind: KindFork, Time: pinServer.Start, Proc: pinServer, Creator: pinOther}),
		mutate: forEachNode(func(ns *NodeState) {
			ns.CreatorFromSnapshot = !ns.Creator.IsZero()
		}),
		check: func(t *testing.T, g *Graph) {
			if p := mustGet(t, g, pinServer); p.Creator != pinWrapper {
				t.Errorf("creator = %v, want %v", p.Creator, pinWrapper)
			}
		},
	},
}

func TestRestoreKeepsSnapshotCreatorCorrectableByLateFork(t *testing.T) {
	runPinCases(t, pinnedSnapshotCreator)
}

var pinnedRepairScan = []pinCase{
	{
		name:   "fork of a process the scan missed is marked exited",
		pins:   "RepairAt",
		build:  append(commonStart(), repairOp([]Snapshot{{ID: coarse(initID)}, snap(host, 1, "bash")}, 20*sec)),
		cont:   evOps(forkEv(pinLate, host)),
		mutate: func(s *State) { s.RepairAt = 0 },
		check: func(t *testing.T, g *Graph) {
			if p := mustGet(t, g, pinLate); !p.Exited || p.Gaps&GapNoExit == 0 {
				t.Errorf("%v = %+v, want exited with no_exit", pinLate, p)
			}
		},
	},
	{
		// A process the scan listed whose node retired since: a late event
		// naming it recreates it, and the scan does not prove it gone.
		name: "event of a listed process is not proved gone",
		pins: "Repaired",
		cfg:  Config{Retention: time.Second},
		build: append(commonStart(),
			evOp(forkEv(pinListed, host)),
			repairOp([]Snapshot{{ID: coarse(initID)}, snap(host, 1, "bash"), snap(pinListed, host.PID, "x")}, 20*sec),
			evOp(exitEv(21*sec, pinListed, 0)),
			retireOp(23*sec),
		),
		cont:   evOps(execEv(13*sec, pinListed, "x")),
		mutate: func(s *State) { s.Repaired = nil },
		check: func(t *testing.T, g *Graph) {
			if p := mustGet(t, g, pinListed); p.Gaps&GapNoExit != 0 {
				t.Errorf("%v = %+v, want not marked exited by the scan", pinListed, p)
			}
		},
	},
}

func TestRestoreKeepsRepairScanForLateEvents(t *testing.T) {
	runPinCases(t, pinnedRepairScan)
}

// The exec of pinX (fork not seen yet, reparented to init, setuid root,
// moved to cgroup 77) is newer than its fork, which arrives later.
var (
	pinXExec = Event{Kind: KindExec, Time: 5 * sec, Proc: pinX, Parent: initID, UID: 0, CgroupID: 77, Comm: "node",
		Filename: "/usr/bin/node", Argv: []string{"node", "srv.js"}}
	pinXFork = Event{Kind: KindFork, Time: pinX.Start, Proc: pinX, Creator: host, Parent: host, UID: 1000, CgroupID: 55, Comm: "bash"}
)

var pinnedFieldTimes = []pinCase{
	{
		name: "late fork does not override a newer comm", pins: "CommAt",
		build:  append(commonStart(), evOp(pinXExec)),
		cont:   evOps(pinXFork),
		mutate: forEachNode(func(ns *NodeState) { ns.CommAt = 0 }),
		check: func(t *testing.T, g *Graph) {
			if p := mustGet(t, g, pinX); p.Comm != "node" {
				t.Errorf("comm = %q, want node", p.Comm)
			}
		},
	},
	{
		name: "late fork does not override a newer uid", pins: "UIDAt",
		build:  append(commonStart(), evOp(pinXExec)),
		cont:   evOps(pinXFork),
		mutate: forEachNode(func(ns *NodeState) { ns.UIDAt = 0 }),
		check: func(t *testing.T, g *Graph) {
			if p := mustGet(t, g, pinX); p.UID != 0 {
				t.Errorf("uid = %d, want 0 (root, from the newer exec)", p.UID)
			}
		},
	},
	{
		name: "late fork does not override a newer cgroup", pins: "CgroupAt",
		build:  append(commonStart(), evOp(pinXExec)),
		cont:   evOps(pinXFork),
		mutate: forEachNode(func(ns *NodeState) { ns.CgroupAt = 0 }),
		check: func(t *testing.T, g *Graph) {
			if p := mustGet(t, g, pinX); p.CgroupID != 77 {
				t.Errorf("cgroup = %d, want 77", p.CgroupID)
			}
		},
	},
	{
		name: "late fork does not override a newer parent", pins: "ParentAt",
		build:  append(commonStart(), evOp(pinXExec)),
		cont:   evOps(pinXFork),
		mutate: forEachNode(func(ns *NodeState) { ns.ParentAt = 0 }),
		check: func(t *testing.T, g *Graph) {
			if p := mustGet(t, g, pinX); p.Parent != initID || p.Creator != host {
				t.Errorf("parent %v creator %v, want %v and %v", p.Parent, p.Creator, initID, host)
			}
		},
	},
	{
		name: "older /proc parent does not override a newer one", pins: "ParentAt",
		build:  append(commonStart(), evOp(pinXExec)),
		cont:   []op{setParentOp(pinX, host.PID, 4*sec+9)},
		mutate: forEachNode(func(ns *NodeState) { ns.ParentAt = 0 }),
		check: func(t *testing.T, g *Graph) {
			if p := mustGet(t, g, pinX); p.Parent != initID {
				t.Errorf("parent %v, want %v", p.Parent, initID)
			}
		},
	},
	{
		name: "repair scan older than the event's parent keeps it", pins: "ParentAt",
		build: append(commonStart(), evOp(pinXExec)),
		cont: []op{repairOp([]Snapshot{
			{ID: coarse(initID)}, snap(host, 1, "bash"), snap(pinX, host.PID, "node", "srv.js"),
		}, 4*sec+500*ms)},
		mutate: forEachNode(func(ns *NodeState) { ns.ParentAt = 0 }),
		check: func(t *testing.T, g *Graph) {
			if p := mustGet(t, g, pinX); p.Parent != initID {
				t.Errorf("parent %v, want %v", p.Parent, initID)
			}
		},
	},
}

func TestRestoreKeepsFieldTimesAgainstOlderEvents(t *testing.T) {
	runPinCases(t, pinnedFieldTimes)
}

var pinnedProcImage = []pinCase{
	{
		name: "exec before the read replaces the /proc image", pins: "ProcRead",
		build:  []op{seedOp([]Snapshot{snap(pinX, 0, "node", "srv.js")}, 10*sec)},
		cont:   evOps(execEv(10*sec-5, pinX, "node", "srv.js")),
		mutate: forEachNode(func(ns *NodeState) { ns.ProcRead = false }),
		check: func(t *testing.T, g *Graph) {
			if got := sources(mustGet(t, g, pinX)); !slices.Equal(got, []Source{SourceKernel}) {
				t.Errorf("sources = %v, want the kernel image only", got)
			}
		},
	},
	{
		name: "exec before the read replaces the /proc image", pins: "ProcReadAt",
		build:  []op{seedOp([]Snapshot{snap(pinX, 0, "node", "srv.js")}, 10*sec)},
		cont:   evOps(execEv(10*sec-5, pinX, "node", "srv.js")),
		mutate: forEachNode(func(ns *NodeState) { ns.ProcReadAt = 0 }),
		check: func(t *testing.T, g *Graph) {
			if got := sources(mustGet(t, g, pinX)); !slices.Equal(got, []Source{SourceKernel}) {
				t.Errorf("sources = %v, want the kernel image only", got)
			}
		},
	},
	{
		name: "late fork by kthreadd leaves a process read from /proc a user process", pins: "ProcRead",
		build: []op{seedOp([]Snapshot{
			{ID: coarse(kthreaddID), Comm: "kthreadd", Kernel: true}, snap(pinX, 2, "modprobe", "x"),
		}, 10*sec)},
		cont:   evOps(forkEv(pinX, kthreaddID)),
		mutate: forEachNode(func(ns *NodeState) { ns.ProcRead = false }),
		check: func(t *testing.T, g *Graph) {
			if p := mustGet(t, g, pinX); p.Kernel {
				t.Errorf("%v became a kernel thread", pinX)
			}
		},
	},
}

func TestRestoreKeepsProcImageForExecsAlreadyReflected(t *testing.T) {
	runPinCases(t, pinnedProcImage)
}

var pinnedMarkedAt = []pinCase{
	{
		name: "exit a repair inferred counts from the scan", pins: "MarkedAt",
		build: append(commonStart(), evOp(forkEv(pinX, host)),
			repairOp([]Snapshot{{ID: coarse(initID)}, snap(host, 1, "bash")}, 20*sec)),
		cont:   []op{retireOp(20*sec + uint64(DefaultRetention) - 1)},
		mutate: forEachNode(func(ns *NodeState) { ns.MarkedAt = 0 }),
		check: func(t *testing.T, g *Graph) {
			if _, ok := g.Get(pinX); !ok {
				t.Errorf("%v retired before its retention", pinX)
			}
		},
	},
	{
		name: "exit inferred from PID reuse counts from the reuse", pins: "MarkedAt",
		build:  append(commonStart(), evOp(forkEv(pinOld, host)), evOp(forkEv(pinReused, host)), evOp(exitEv(pinReused.Start+1, pinReused, 0))),
		cont:   []op{retireOp(pinReused.Start + uint64(DefaultRetention) - 1)},
		mutate: forEachNode(func(ns *NodeState) { ns.MarkedAt = 0 }),
		check: func(t *testing.T, g *Graph) {
			if _, ok := g.Get(pinOld); !ok {
				t.Errorf("%v retired before its retention", pinOld)
			}
		},
	},
	{
		name: "exit event without time counts from the clock then", pins: "MarkedAt",
		build: append(commonStart(), evOp(forkEv(pinX, host)), evOp(execEv(9*sec, host, "zsh")),
			evOp(Event{Kind: KindExit, Proc: pinX})),
		cont:   []op{retireOp(9*sec + uint64(DefaultRetention) - 1)},
		mutate: forEachNode(func(ns *NodeState) { ns.MarkedAt = 0 }),
		check: func(t *testing.T, g *Graph) {
			if _, ok := g.Get(pinX); !ok {
				t.Errorf("%v retired before its retention", pinX)
			}
		},
	},
}

func TestRestoreKeepsInferredExitTimeForRetention(t *testing.T) {
	runPinCases(t, pinnedMarkedAt)
}

var pinnedClock = []pinCase{
	{
		name:   "exit event without time is marked at the clock",
		pins:   "Clock",
		build:  append(commonStart(), evOp(forkEv(pinX, host)), evOp(execEv(9*sec, host, "zsh"))),
		cont:   []op{evOp(Event{Kind: KindExit, Proc: pinX}), retireOp(9*sec + uint64(DefaultRetention) - 1)},
		mutate: func(s *State) { s.Clock = 0 },
		check: func(t *testing.T, g *Graph) {
			if _, ok := g.Get(pinX); !ok {
				t.Errorf("%v retired before its retention", pinX)
			}
		},
	},
}

func TestRestoreKeepsClockForEventsWithoutTime(t *testing.T) {
	runPinCases(t, pinnedClock)
}

var pinnedExitFromEvent = []pinCase{
	{
		name:   "second exit event is a duplicate",
		pins:   "ExitFromEvent",
		build:  append(commonStart(), evOp(forkEv(pinX, host)), evOp(exitEv(6*sec, pinX, 1))),
		cont:   evOps(exitEv(6*sec+8, pinX, 9)),
		mutate: forEachNode(func(ns *NodeState) { ns.ExitFromEvent = false }),
		check: func(t *testing.T, g *Graph) {
			if p := mustGet(t, g, pinX); p.ExitCode != 1 || p.ExitTime != 6*sec {
				t.Errorf("exit %d at %d, want the first exit", p.ExitCode, p.ExitTime)
			}
			if s := g.Stats(); s.DuplicateExits != 1 {
				t.Errorf("DuplicateExits = %d, want 1", s.DuplicateExits)
			}
		},
	},
	{
		name:   "inferred exit yields to the real one",
		pins:   "ExitFromEvent",
		build:  append(commonStart(), evOp(forkEv(pinOld, host)), evOp(forkEv(pinReused, host))),
		cont:   evOps(exitEv(pinOld.Start+9, pinOld, 5)),
		mutate: forEachNode(func(ns *NodeState) { ns.ExitFromEvent = ns.Exited }),
		check: func(t *testing.T, g *Graph) {
			if p := mustGet(t, g, pinOld); p.ExitCode != 5 || p.Gaps&GapNoExit != 0 {
				t.Errorf("%v = %+v, want the real exit(5)", pinOld, p)
			}
		},
	},
}

func TestRestoreKeepsKernelExitsFinal(t *testing.T) {
	runPinCases(t, pinnedExitFromEvent)
}

var pinnedParentLink = []pinCase{
	{
		name: "parent in the graph follows its upgrade",
		pins: "ParentDetached",
		build: []op{seedOp([]Snapshot{
			{ID: coarse(initID)}, snap(pinShell, 1, "bash"), snap(pinKid, pinShell.PID, "sleep", "60"),
		}, 10*sec)},
		cont: evOps(execEv(11*sec, pinShell, "zsh")),
		mutate: forEachNode(func(ns *NodeState) {
			ns.ParentDetached = !ns.Parent.IsZero()
		}),
		check: func(t *testing.T, g *Graph) {
			if p := mustGet(t, g, pinKid); p.Parent != pinShell {
				t.Errorf("parent = %v, want the upgraded %v", p.Parent, pinShell)
			}
		},
	},
	{
		// SetParent named PID 1 before any node had it; the seed then
		// added init with the same coarse identity. The reported identity
		// stays what it was when the node of init becomes exact.
		name: "parent kept as an identity is not resolved later",
		pins: "ParentDetached",
		build: []op{
			evOp(Event{Kind: KindFork, Time: pinDaemon.Start, Proc: pinDaemon}),
			setParentOp(pinDaemon, 1, 3*sec),
			seedOp([]Snapshot{{ID: coarse(initID), Comm: "systemd"}, snap(pinDaemon, 1, "daemon")}, 4*sec),
		},
		cont:   evOps(execEv(5*sec, initID, "systemd")),
		mutate: forEachNode(func(ns *NodeState) { ns.ParentDetached = false }),
		check: func(t *testing.T, g *Graph) {
			if p := mustGet(t, g, pinDaemon); p.Parent != coarse(initID) {
				t.Errorf("parent = %v, want %v as reported", p.Parent, coarse(initID))
			}
		},
	},
}

func TestRestoreKeepsParentLinks(t *testing.T) {
	runPinCases(t, pinnedParentLink)
}

// TestStateFieldsArePinned checks that every bookkeeping field of State and
// NodeState, which no query shows, has a pin case above.
func TestStateFieldsArePinned(t *testing.T) {
	pinned := map[string]bool{}
	for _, cases := range [][]pinCase{
		pinnedSnapshotCreator, pinnedRepairScan, pinnedFieldTimes, pinnedProcImage,
		pinnedMarkedAt, pinnedClock, pinnedExitFromEvent, pinnedParentLink,
		pinnedRecent,
	} {
		for _, c := range cases {
			pinned[c.pins] = true
		}
	}
	// Shown by queries, so the round-trip tests cover them.
	public := map[string]bool{"Nodes": true, "Stats": true, "Process": true}
	for _, typ := range []reflect.Type{reflect.TypeFor[State](), reflect.TypeFor[NodeState]()} {
		for f := range typ.Fields() {
			if !pinned[f.Name] && !public[f.Name] {
				t.Errorf("%s.%s: no test shows that a later call depends on it", typ.Name(), f.Name)
			}
		}
	}
}

// TestStateCoversEveryField lists where each field of the graph's internal
// types goes in a State. A field added to one of them must be dumped and
// restored (and listed here).
func TestStateCoversEveryField(t *testing.T) {
	tests := []struct {
		typ   reflect.Type
		where map[string]string
	}{
		{reflect.TypeFor[Graph](), map[string]string{
			"mu":             "not state",
			"retention":      "Config",
			"maxNodes":       "Config",
			"maxImages":      "Config",
			"maxBytes":       "Config",
			"maxRecent":      "Config",
			"recent":         "Recent",
			"recentHead":     "derived: 0 after Restore, Recent holds the queue from it",
			"recentLive":     "derived: the length of Recent after Restore",
			"nextEvictBytes": "derived: as nextEvictAt",
			"imageBytes":     "derived: Restore accounts every node's images",
			"nextEvictAt":    "derived: 0 after Restore, whose evict sets it again when the cap cannot be met",
			"byID":           "Nodes",
			"byPID":          "derived: Nodes grouped by PID, sorted",
			"clock":          "Clock",
			"repairAt":       "RepairAt",
			"repaired":       "Repaired",
			"stats":          "Stats",
		}},
		{reflect.TypeFor[node](), map[string]string{
			"p":               "NodeState.Process",
			"creator":         "NodeState.Creator",
			"creatorFromSnap": "NodeState.CreatorFromSnapshot",
			"children":        "derived from Creator (order unused)",
			"childIdx":        "derived: the index in the creator's children",
			"parent":          "NodeState.Parent, ParentDetached false (true once retired)",
			"parentID":        "NodeState.Parent, ParentDetached true",
			"parentAt":        "NodeState.ParentAt",
			"commAt":          "NodeState.CommAt",
			"uidAt":           "NodeState.UIDAt",
			"cgroupAt":        "NodeState.CgroupAt",
			"procRead":        "NodeState.ProcRead",
			"procReadAt":      "NodeState.ProcReadAt",
			"markedAt":        "NodeState.MarkedAt",
			"exitFromEvent":   "NodeState.ExitFromEvent",
			"bytes":           "derived: Process.ImageBytes of NodeState.Process",
			"retired":         "false for every node in the graph",
			"pins":            "not state: whoever pinned pins again after Restore (Pin)",
			"claims":          "not state: whoever claimed claims again after Restore (Claim)",
			"recent":          "State.Recent lists it",
		}},
		{reflect.TypeFor[counters](), map[string]string{
			"retired":        "Stats.Retired",
			"repairs":        "Stats.Repairs",
			"duplicateExits": "Stats.DuplicateExits",
			"ignored":        "Stats.Ignored",
			"imagesDropped":  "Stats.ImagesDropped",
			"evicted":        "Stats.Evicted",
			"overCap":        "Stats.OverCap",
			"folded":         "Stats.Folded",
			"dropped":        "Stats.Dropped",
			"gaps":           "Stats.Gaps",
		}},
	}
	for _, tt := range tests {
		seen := map[string]bool{}
		for f := range tt.typ.Fields() {
			seen[f.Name] = true
			if _, ok := tt.where[f.Name]; !ok {
				t.Errorf("%s.%s has no place in State: add it to Dump, Restore and this list", tt.typ.Name(), f.Name)
			}
		}
		for name := range tt.where {
			if !seen[name] {
				t.Errorf("%s.%s is gone: update this list", tt.typ.Name(), name)
			}
		}
	}
}

// validState is a small State the invalid-input table breaks one way each.
func validState(t *testing.T) State {
	t.Helper()
	g := newGraph()
	seedInit(g)
	apply(g, forkEv(host, initID), forkEv(id(1001, 2*sec), host), execEv(2*sec+1, id(1001, 2*sec), "node"))
	s := g.Dump()
	if len(s.Nodes) != 3 {
		t.Fatalf("%d nodes, want 3", len(s.Nodes))
	}
	return s
}

func TestRestoreRefusesInvalidState(t *testing.T) {
	// Nodes of validState: 0 init (seeded, made exact by the fork of host), 1 host, 2 its child.
	tests := []struct {
		name    string
		mutate  func(s *State)
		wantErr string
	}{
		{"pid 0", func(s *State) { s.Nodes[2].ID = ID{Start: 2 * sec} },
			"nodes[2]: pid 0 names no process"},
		{"duplicate identity", func(s *State) { s.Nodes = append(s.Nodes, s.Nodes[2]) },
			"node 1001@2000000000 listed twice"},
		{"duplicate identity with other contents", func(s *State) { s.Nodes[2].ID = s.Nodes[1].ID; s.Nodes[2].Creator = ID{} },
			"node 1000@1000000101 listed twice"},
		{"creator is not a node", func(s *State) { s.Nodes[2].Creator = id(999, 1) },
			"node 1001@2000000000: creator 999@1 is not a node"},
		{"creator with pid 0", func(s *State) { s.Nodes[2].Creator = ID{Start: 7} },
			"node 1001@2000000000: creator 0@7 is not a node"},
		{"creator is the node itself", func(s *State) { s.Nodes[2].Creator = s.Nodes[2].ID },
			"node 1001@2000000000: its creators form a cycle"},
		{"creators form a cycle", func(s *State) { s.Nodes[0].Creator = s.Nodes[2].ID },
			"node 1@5000001: its creators form a cycle"},
		{"parent is not a node", func(s *State) { s.Nodes[2].Parent = id(999, 1) },
			"node 1001@2000000000: parent 999@1 is not a node and not detached"},
		{"node is its own parent", func(s *State) { s.Nodes[2].Parent = s.Nodes[2].ID },
			"node 1001@2000000000 is its own parent"},
		{"detached zero parent", func(s *State) { s.Nodes[0].ParentDetached = true },
			"node 1@5000001: parent detached but zero"},
		{"unknown gap flag", func(s *State) { s.Nodes[1].Gaps = GapSeeded | 1<<9 },
			"node 1000@1000000101: unknown gap flags 0x200"},
		{"alive with no_exit", func(s *State) { s.Nodes[1].Gaps = GapNoExit },
			"node 1000@1000000101: alive but flagged no_exit"},
		{"unknown image source", func(s *State) { s.Nodes[2].Images[1].Source = 3 },
			"node 1001@2000000000: image 1: unknown source 3"},
		{"unknown stats gap", func(s *State) { s.Stats.Gaps = map[string]uint64{"seeded": 1, "seeded|no_exit": 2} },
			"stats: unknown gap \"seeded|no_exit\""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := validState(t)
			if _, err := Restore(Config{}, s); err != nil {
				t.Fatalf("valid state refused: %v", err)
			}
			tt.mutate(&s)
			g, err := Restore(Config{}, s)
			if err == nil {
				t.Fatalf("Restore accepted it: %+v", g.Dump())
			}
			if g != nil {
				t.Errorf("Restore returned a graph with its error")
			}
			if !errors.Is(err, ErrInvalidState) {
				t.Errorf("error %v does not wrap ErrInvalidState", err)
			}
			if want := "lineage: invalid state: " + tt.wantErr; err.Error() != want {
				t.Errorf("error = %q\nwant    %q", err, want)
			}
		})
	}
}

func TestRestoreAcceptsWhatItDocuments(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(s *State)
		check  func(t *testing.T, g *Graph)
	}{
		{"zero State", func(s *State) { *s = State{} }, func(t *testing.T, g *Graph) {
			if s := g.Stats(); s.Tracked != 0 {
				t.Errorf("%+v", s)
			}
		}},
		{"nodes in any order", func(s *State) { slices.Reverse(s.Nodes) }, func(t *testing.T, g *Graph) {
			equalIDs(t, "Descendants(init)", ids(g.Descendants(initID)), []ID{initID, host, id(1001, 2*sec)})
		}},
		{"parent outside the graph", func(s *State) {
			s.Nodes[2].Parent, s.Nodes[2].ParentDetached = id(999, 1), true
		}, func(t *testing.T, g *Graph) {
			if p := mustGet(t, g, id(1001, 2*sec)); p.Parent != id(999, 1) {
				t.Errorf("parent = %v", p.Parent)
			}
		}},
		{"detached parent that a node has", func(s *State) {
			s.Nodes[2].ParentDetached = true
		}, func(t *testing.T, g *Graph) {
			if p := mustGet(t, g, id(1001, 2*sec)); p.Parent != host {
				t.Errorf("parent = %v", p.Parent)
			}
		}},
		{"repaired pid 0 and a repair at 0", func(s *State) {
			s.Repaired = map[uint32]uint64{0: 5, 1000: host.Start}
		}, func(t *testing.T, g *Graph) {}},
		{"bookkeeping Dump would not produce", func(s *State) {
			s.Nodes[1].CreatorFromSnapshot = true // on a node whose creator a fork named
			s.Nodes[0].ExitFromEvent = true       // on a live node
			s.Nodes[0].MarkedAt = 5
			s.Nodes[2].ProcReadAt = 7 // without ProcRead
			s.Nodes[2].ExitTime = 9   // alive
		}, func(t *testing.T, g *Graph) {}},
		{"zero gap counts", func(s *State) { s.Stats.Gaps = map[string]uint64{"no_fork": 0, "seeded": 1} },
			func(t *testing.T, g *Graph) {
				if got := g.Stats().Gaps[GapSeeded]; got != 1 {
					t.Errorf("seeded count %d", got)
				}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := validState(t)
			tt.mutate(&s)
			g, err := Restore(Config{}, s)
			if err != nil {
				t.Fatalf("Restore: %v", err)
			}
			checkInvariants(t, g)
			if d, want := g.Dump(), canonical(s); !reflect.DeepEqual(d, want) {
				t.Errorf("Dump differs from what was restored:\n%s", stateDiff(want, d))
			}
			tt.check(t, g)
		})
	}
}

// canonical is s as Dump returns it: nodes sorted, empty slices and maps
// nil (JSON leaves them out), zero gap counts left out.
func canonical(s State) State {
	out := s
	out.Nodes = make([]NodeState, len(s.Nodes))
	for i, ns := range s.Nodes {
		ns.Images = nil
		for _, im := range s.Nodes[i].Images {
			if len(im.Argv) == 0 {
				im.Argv = nil
			} else {
				im.Argv = slices.Clone(im.Argv)
			}
			ns.Images = append(ns.Images, im)
		}
		// Restore keeps the first and the latest images within the cap.
		if over := len(ns.Images) - DefaultMaxImages; over > 0 {
			ns.Images = append(ns.Images[:1], ns.Images[1+over:]...)
			ns.ImagesDropped += uint64(over)
			out.Stats.ImagesDropped += uint64(over)
		}
		out.Nodes[i] = ns
	}
	slices.SortFunc(out.Nodes, func(a, b NodeState) int {
		return cmp.Or(cmp.Compare(a.ID.Start, b.ID.Start), cmp.Compare(a.ID.PID, b.ID.PID))
	})
	if len(s.Repaired) == 0 {
		out.Repaired = nil
	}
	if len(s.Recent) == 0 {
		out.Recent = nil // "recent":[] and no key both mean none
	}
	out.Stats.Gaps = nil
	for k, v := range s.Stats.Gaps {
		if v != 0 {
			if out.Stats.Gaps == nil {
				out.Stats.Gaps = map[string]uint64{}
			}
			out.Stats.Gaps[k] = v
		}
	}
	return out
}

// TestStateJSONKeepsBytesThatAreNotUTF8: argv and comm are bytes, cut by
// capture limits mid-character; JSON strings cannot hold them, so they
// travel as raw_strings. A late duplicate of the exec must still be
// recognised as one.
func TestStateJSONKeepsBytesThatAreNotUTF8(t *testing.T) {
	bin := id(800, 2*sec+1)
	exec := Event{Kind: KindExec, Time: bin.Start + 1, Proc: bin, Comm: "na\xc3\xafve-tool-\xe2\x82",
		Filename: "/opt/\xff/tool", Argv: []string{"tool", "--name=na\xc3"}, ArgvTruncated: true}
	g := newGraph()
	run(g, commonStart())
	apply(g, forkEv(bin, host), exec)
	r := viaJSON(t, g, Config{})

	b, err := json.Marshal(g.Dump())
	if err != nil {
		t.Fatal(err)
	}
	if !utf8.Valid(b) || !bytes.Contains(b, []byte(`"raw_strings":[`)) {
		t.Errorf("JSON = %s, want valid UTF-8 with raw_strings", b)
	}
	apply(r, exec) // the same exec again, e.g. re-read after a restart
	if p := mustGet(t, r, bin); len(p.Images) != 2 || p.Comm != exec.Comm || p.Images[1].Argv[1] != "--name=na\xc3" {
		t.Errorf("after a duplicate exec: comm %q images %q", p.Comm, argvs(p))
	}

	// What a plain encoding would have done.
	lossy, err := json.Marshal(stateFields(g.Dump()))
	if err != nil {
		t.Fatal(err)
	}
	var s State
	if err := json.Unmarshal(lossy, &s); err != nil {
		t.Fatal(err)
	}
	l, err := Restore(Config{}, s)
	if err != nil {
		t.Fatal(err)
	}
	apply(l, exec)
	if p := mustGet(t, l, bin); len(p.Images) != 3 {
		t.Errorf("lossy encoding kept the duplicate out too: the test proves nothing")
	}
}

// TestStateEncodedNodeByNodeIsTheWholeEncoding: EncodeJSON, which writes
// a node at a time, writes the bytes the whole State encoded at once
// gives (once compacted), for every scenario; so does MarshalJSON.
func TestStateEncodedNodeByNodeIsTheWholeEncoding(t *testing.T) {
	for _, sc := range append(scenarios(), scenario{name: "the zero State"}) {
		t.Run(sc.name, func(t *testing.T) {
			var s State
			if sc.name != "the zero State" {
				s = sc.build(t).Dump()
			}
			j := stateJSON{stateFields: stateFields(s)}
			for i := range s.Nodes {
				j.RawStrings = appendRawStrings(j.RawStrings, i, &s.Nodes[i])
			}
			whole, err := json.Marshal(j)
			if err != nil {
				t.Fatal(err)
			}
			var streamed bytes.Buffer
			if err := s.EncodeJSON(&streamed); err != nil {
				t.Fatal(err)
			}
			var compact bytes.Buffer
			if err := json.Compact(&compact, streamed.Bytes()); err != nil {
				t.Fatalf("EncodeJSON wrote no JSON: %v\n%s", err, streamed.Bytes())
			}
			if !bytes.Equal(compact.Bytes(), whole) {
				t.Errorf("EncodeJSON:\n%s\nthe whole at once:\n%s", compact.Bytes(), whole)
			}
			if m, err := json.Marshal(s); err != nil || !bytes.Equal(m, whole) {
				t.Errorf("json.Marshal: %v\n%s\nthe whole at once:\n%s", err, m, whole)
			}
		})
	}
}

// TestStateEncodingStopsAtAWriteError: the writer's first error is
// EncodeJSON's.
func TestStateEncodingStopsAtAWriteError(t *testing.T) {
	s := benchGraph(100).Dump()
	for _, after := range []int{0, 1, 50, 5000} {
		w := &failAfter{n: after}
		if err := s.EncodeJSON(w); err != errDiskFull {
			t.Errorf("a writer failing after %d bytes: EncodeJSON returned %v", after, err)
		}
	}
}

var errDiskFull = errors.New("disk full")

type failAfter struct{ n int }

func (f *failAfter) Write(b []byte) (int, error) {
	if len(b) > f.n {
		return 0, errDiskFull
	}
	f.n -= len(b)
	return len(b), nil
}

// TestStateJSONCarriesEveryStringField puts bytes that are not UTF-8 in
// every string a NodeState holds and checks that JSON brings them back.
func TestStateJSONCarriesEveryStringField(t *testing.T) {
	var ns NodeState
	ns.ID = id(5, 5)
	ns.Images = []Image{{Argv: []string{"", ""}}, {Argv: []string{""}}}
	n := 0
	var fill func(v reflect.Value)
	fill = func(v reflect.Value) {
		switch v.Kind() {
		case reflect.String:
			n++
			v.SetString(fmt.Sprintf("s%d\xff\xc3", n))
		case reflect.Struct:
			for i := range v.NumField() {
				if v.Type().Field(i).IsExported() {
					fill(v.Field(i))
				}
			}
		case reflect.Slice:
			for i := range v.Len() {
				fill(v.Index(i))
			}
		}
	}
	fill(reflect.ValueOf(&ns).Elem())
	if n != 6 {
		t.Errorf("%d strings filled, want 6 (comm, 2 filenames, 3 argv): update the test and raw_strings", n)
	}
	s := State{Nodes: []NodeState{{Process: Process{ID: id(1, 1)}}, ns}}
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var got State
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, s) {
		t.Errorf("round trip:\n%+v\n%+v", got.Nodes[1], s.Nodes[1])
	}
}

func TestStateJSONRefusesRawStringsNamingNothing(t *testing.T) {
	for _, field := range []string{"", "uid", "images", "images.0", "images.1.filename", "images.0.argv.1",
		"images.-1.filename", "images.0.argv.x", "images.0.filename.0", "images.0.argv.0.0"} {
		t.Run(field, func(t *testing.T) {
			in := fmt.Sprintf(`{"clock_ns":0,"nodes":[{"id":{"pid":1,"start_ns":0},"images":[{"argv":["a"],"source":0}]}],`+
				`"stats":{},"raw_strings":[{"node":0,"field":%q,"bytes":"/w=="}]}`, field)
			var s State
			if err := json.Unmarshal([]byte(in), &s); err == nil {
				t.Errorf("accepted: %+v", s)
			}
		})
	}
	for _, node := range []int{-1, 1} {
		in := fmt.Sprintf(`{"nodes":[{"id":{"pid":1}}],"raw_strings":[{"node":%d,"field":"comm","bytes":"/w=="}]}`, node)
		var s State
		if err := json.Unmarshal([]byte(in), &s); err == nil {
			t.Errorf("node %d accepted", node)
		}
	}
}

func TestDumpIsADeepCopy(t *testing.T) {
	g := newGraph()
	run(g, commonStart())
	x, y := id(3000, 4*sec), id(3001, 4*sec+1)
	apply(g, forkEv(x, host), execEv(4*sec+5, x, "node", "a.js"), forkEv(y, host), execEv(4*sec+6, y, "sh"))
	g.Repair([]Snapshot{{ID: coarse(initID)}, snap(host, 1, "bash"), snap(x, host.PID, "node", "a.js"), snap(y, host.PID, "sh")}, 5*sec)
	want := g.Dump()

	s := g.Dump()
	for i := range s.Nodes {
		ns := &s.Nodes[i]
		for j := range ns.Images {
			for k := range ns.Images[j].Argv {
				ns.Images[j].Argv[k] = "corrupted"
			}
			ns.Images[j].Filename = "corrupted"
		}
		ns.Images = append(ns.Images, Image{Filename: "appended"})
		ns.Comm = "corrupted"
	}
	s.Repaired[1] = 1
	s.Stats.Gaps["seeded"] = 99
	if got := g.Dump(); !reflect.DeepEqual(got, want) {
		t.Errorf("changing a Dump changed the graph:\n%s", stateDiff(want, got))
	}

	// Restore keeps nothing of its input either.
	s = g.Dump()
	r, err := Restore(Config{}, s)
	if err != nil {
		t.Fatal(err)
	}
	s.Nodes[3].Images[0].Argv[0] = "corrupted"
	s.Repaired[1] = 1
	s.Stats.Gaps["seeded"] = 99
	if got := r.Dump(); !reflect.DeepEqual(got, want) {
		t.Errorf("changing the restored State changed the graph:\n%s", stateDiff(want, got))
	}
}

var fuzzConfig = Config{Retention: 50 * time.Millisecond, RecentExits: 2}

// FuzzDumpRestore runs an arbitrary stream, restarts at an arbitrary point
// (Dump, JSON, Restore) and continues the stream on both graphs: every
// call must return the same and the final Dumps must be equal.
//
//	go test -run '^$' -fuzz FuzzDumpRestore -fuzztime 60s ./lineage/
func FuzzDumpRestore(f *testing.F) {
	f.Add(byte(0), []byte{})
	f.Add(byte(2), []byte{0, 1, 1, 2, 0, 0, 1, 0, 3, 1, 1, 0, 0, 0, 2, 1, 4, 1, 1, 0, 0, 0, 3, 0})
	f.Add(byte(1), []byte{5, 1, 0, 2, 0, 0, 0, 0, 0, 1, 1, 2, 1, 0, 1, 0, 6, 3, 2, 1, 0, 0, 9, 0, 7, 0, 0, 0, 0, 0, 200, 0})
	f.Add(byte(3), []byte{4, 2, 3, 0, 0, 0, 5, 1, 3, 2, 3, 0, 0, 2, 4, 2, 0, 2, 3, 1, 3, 1, 1, 3, 0, 1, 3, 2, 2, 0, 2, 0})
	f.Add(byte(2), []byte{5, 1, 0, 1, 0, 0, 9, 4, 8, 2, 1, 1, 0, 0, 10, 0, 6, 3, 1, 2, 0, 0, 20, 1, 0, 3, 2, 1, 0, 1, 30, 0})
	f.Fuzz(func(t *testing.T, split byte, data []byte) {
		ops, _ := fuzzOps(data)
		k := int(split) % (len(ops) + 1)
		g := New(fuzzConfig)
		want := run(g, ops)

		h := New(fuzzConfig)
		got := run(h, ops[:k])
		r := viaJSON(t, h, fuzzConfig)
		got = append(got, run(r, ops[k:])...)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("results differ after a restore at op %d:\n%v\n%v", k, got, want)
		}
		checkInvariants(t, r)
		if d, w := r.Dump(), g.Dump(); !reflect.DeepEqual(d, w) {
			t.Fatalf("restore at op %d:\n%s", k, stateDiff(w, d))
		}
		sameAnswers(t, g, r)
	})
}

// FuzzRestore feeds arbitrary JSON to Restore: it must refuse it with
// ErrInvalidState or build a consistent graph that dumps back what it was
// given, restores again to the same Dump, and takes further calls.
//
//	go test -run '^$' -fuzz FuzzRestore -fuzztime 60s ./lineage/
func FuzzRestore(f *testing.F) {
	for _, sc := range scenarios() {
		g := New(sc.cfg)
		run(g, sc.ops)
		b, err := json.Marshal(g.Dump())
		if err != nil {
			f.Fatal(err)
		}
		if len(b) < 20_000 {
			f.Add(b)
		}
	}
	f.Add([]byte(`{"nodes":[{"id":{"pid":1,"start_ns":0},"creator":{"pid":2}},{"id":{"pid":2},"creator":{"pid":1}}]}`))
	f.Add([]byte(`{"nodes":[{"id":{"pid":1,"start_ns":5},"parent":{"pid":1,"start_ns":5}}],"stats":{"gaps":{"x":1}}}`))
	f.Add([]byte(`{"nodes":[{"id":{"pid":1,"start_ns":5},"images_dropped":3,"images":[` +
		strings.Repeat(`{"argv":["a"],"source":0},`, 11) + `{"argv":["z"],"source":0}]}],"stats":{"images_dropped":3}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var s State
		if json.Unmarshal(data, &s) != nil {
			return
		}
		g, err := Restore(fuzzConfig, s)
		if err != nil {
			if !errors.Is(err, ErrInvalidState) || g != nil {
				t.Fatalf("Restore = %v, %v", g, err)
			}
			return
		}
		if err := invariants(g); err != nil {
			t.Fatal(err)
		}
		d := g.Dump()
		if want := canonical(s); !reflect.DeepEqual(d, want) {
			t.Fatalf("Dump differs from what was restored:\n%s", stateDiff(want, d))
		}
		r := viaJSON(t, g, fuzzConfig)
		sameAnswers(t, g, r)
		// Further calls keep both consistent and equal.
		var cont []op
		for i, ns := range d.Nodes {
			if i >= 8 {
				break
			}
			cont = append(cont,
				evOp(forkEv(ID{PID: ns.ID.PID + 1, Start: ns.ID.Start + 1}, ns.ID)),
				evOp(exitEv(ns.ID.Start+2, ns.ID, 0)),
				setParentOp(ns.ID, 1, ns.ID.Start+3))
		}
		cont = append(cont, repairOp(nil, d.Clock+1), retireOp(d.Clock+uint64(time.Second)))
		if a, b := run(g, cont), run(r, cont); !reflect.DeepEqual(a, b) {
			t.Fatalf("results differ: %v, %v", a, b)
		}
		for _, x := range []*Graph{g, r} {
			if err := invariants(x); err != nil {
				t.Fatal(err)
			}
		}
		if a, b := g.Dump(), r.Dump(); !reflect.DeepEqual(a, b) {
			t.Fatalf("after further calls:\n%s", stateDiff(a, b))
		}
	})
}

// simConfig is the Config of simulated nodes: a short retention so that
// streams of a few seconds retire branches.
var simConfig = Config{Retention: 300 * time.Millisecond}

type simProc struct {
	id     ID
	ppid   uint32
	comm   string
	uid    uint32
	cgroup uint64
	kernel bool
	file   string
	argv   []string
}

// sim simulates the processes of a node and what the agent sees of them:
// a boot before the agent, the seed while events are buffered, events
// delivered slightly out of order, some lost and followed by a repair,
// reparenting to init refreshed through SetParent, periodic retirement,
// recycled PIDs and argv cut mid-character.
type sim struct {
	rng     *rand.Rand
	now     uint64
	lastPID uint32
	live    map[uint32]*simProc
	pids    []uint32 // live PIDs in creation order, for deterministic picks
	emit    bool
	pending []Event
	ops     []op
}

var simCommands = [][]string{
	{"bash"}, {"sh", "-c", "npm exec mcp-server"}, {"npm", "exec", "mcp-server"},
	{"node", "/srv/mcp/server.js", "--stdio"}, {"python3", "-m", "mcp_server"},
	{"git", "status"}, {"sleep", "60"}, {"grep", "-r", "naïve", "."},
}

const simMaxPID = 400

// simulate returns the calls an agent makes on its graph over steps
// simulated actions.
func simulate(seed uint64, steps int) []op {
	s := &sim{rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), now: 5_000_000, lastPID: 2, live: map[uint32]*simProc{}}
	s.add(&simProc{id: initID, comm: "systemd", file: "/usr/lib/systemd/systemd", argv: []string{"/sbin/init"}})
	s.add(&simProc{id: id(2, 5_000_009), comm: "kthreadd", kernel: true})
	s.now = 1 * sec
	for range 80 { // before the agent
		s.step()
	}
	s.emit = true // the sensor is attached; nothing is consumed yet
	for range 10 {
		s.step()
	}
	readAt := s.now
	snaps := s.snapshots()
	for range 5 {
		s.step()
	}
	for range len(s.pending) / 2 {
		s.deliver(0)
	}
	s.ops = append(s.ops, seedOp(snaps, readAt))
	for range steps {
		s.step()
		s.deliver(s.rng.IntN(4))
	}
	s.deliver(0)
	return s.ops
}

func (s *sim) add(p *simProc) {
	s.live[p.id.PID] = p
	s.pids = append(s.pids, p.id.PID)
}

func (s *sim) pick(ok func(p *simProc) bool) *simProc {
	for range 8 {
		if p := s.live[s.pids[s.rng.IntN(len(s.pids))]]; ok(p) {
			return p
		}
	}
	return nil
}

func (s *sim) parentID(p *simProc) ID {
	if q := s.live[p.ppid]; q != nil {
		return q.id
	}
	return ID{}
}

func (s *sim) send(ev Event) {
	if s.emit {
		s.pending = append(s.pending, ev)
	}
}

// deliver applies pending events until at most keep remain, each picked
// among the oldest three: per-CPU buffers reorder a little.
func (s *sim) deliver(keep int) {
	for len(s.pending) > keep {
		i := s.rng.IntN(min(3, len(s.pending)))
		s.ops = append(s.ops, evOp(s.pending[i]))
		s.pending = slices.Delete(s.pending, i, i+1)
	}
}

func (s *sim) snapshots() []Snapshot {
	out := make([]Snapshot, 0, len(s.pids))
	for _, pid := range s.pids {
		p := s.live[pid]
		sn := Snapshot{ID: coarse(p.id), PPID: p.ppid, UID: p.uid, Comm: p.comm, Kernel: p.kernel}
		if !p.kernel {
			sn.Filename, sn.Argv = p.file, p.argv
		}
		out = append(out, sn)
	}
	return out
}

func (s *sim) step() {
	s.now += 1 + s.rng.Uint64N(3*ms)
	switch r := s.rng.IntN(100); {
	case r < 35 || len(s.pids) < 4:
		creator := s.pick(func(p *simProc) bool { return !p.kernel || s.rng.IntN(8) == 0 })
		if creator == nil {
			return
		}
		pid := s.lastPID
		for {
			if pid++; pid > simMaxPID {
				pid = 3
			}
			if s.live[pid] == nil {
				break
			}
		}
		s.lastPID = pid
		c := &simProc{id: ID{PID: pid, Start: s.now}, ppid: creator.id.PID, comm: creator.comm, uid: creator.uid,
			cgroup: creator.cgroup, kernel: creator.kernel, file: creator.file, argv: creator.argv}
		if s.rng.IntN(20) == 0 && s.live[creator.ppid] != nil { // CLONE_PARENT
			c.ppid = creator.ppid
		}
		s.add(c)
		s.send(Event{Kind: KindFork, Time: s.now, Proc: c.id, Creator: creator.id, Parent: s.parentID(c),
			UID: c.uid, CgroupID: c.cgroup, Comm: c.comm})
	case r < 60:
		p := s.pick(func(p *simProc) bool { return !p.kernel && p.id.PID != 1 })
		if p == nil {
			return
		}
		argv := simCommands[s.rng.IntN(len(simCommands))]
		ev := Event{Kind: KindExec, Time: s.now, Proc: p.id, Parent: s.parentID(p), Filename: "/usr/bin/" + argv[0], Argv: argv}
		if s.rng.IntN(6) == 0 { // the capture limit cuts the argv, maybe mid-character
			flat := strings.Join(argv, "\x00")
			flat = flat[:1+s.rng.IntN(len(flat))]
			ev.Argv, ev.ArgvTruncated = strings.Split(flat, "\x00"), true
		}
		if s.rng.IntN(10) == 0 {
			p.uid = 0 // setuid
		} else if p.uid == 0 {
			p.uid = 1000
		}
		p.comm, p.file, p.argv, p.kernel = argv[0], ev.Filename, argv, false
		if s.rng.IntN(10) == 0 {
			p.cgroup = s.rng.Uint64N(5) + 1
		}
		ev.Comm, ev.UID, ev.CgroupID = p.comm, p.uid, p.cgroup
		s.send(ev)
	case r < 85:
		p := s.pick(func(p *simProc) bool { return p.id.PID > 2 })
		if p == nil {
			return
		}
		s.send(Event{Kind: KindExit, Time: s.now, Proc: p.id, Parent: s.parentID(p), UID: p.uid, CgroupID: p.cgroup,
			Comm: p.comm, ExitCode: s.rng.IntN(3), Signal: []int{0, 0, 9, 15}[s.rng.IntN(4)]})
		delete(s.live, p.id.PID)
		s.pids = slices.DeleteFunc(s.pids, func(pid uint32) bool { return pid == p.id.PID })
		for _, pid := range s.pids {
			if c := s.live[pid]; c.ppid == p.id.PID {
				c.ppid = 1 // the kernel reparents silently
			}
		}
	case r < 92:
		if p := s.pick(func(p *simProc) bool { return true }); p != nil && s.emit {
			s.ops = append(s.ops, setParentOp(p.id, p.ppid, s.now))
		}
	case r < 97:
		if s.emit && len(s.ops) > 0 {
			s.ops = append(s.ops, retireOp(s.now))
		}
	default:
		// The kernel loses some events; the agent repairs from /proc while
		// the ring buffer still holds older ones.
		if !s.emit || len(s.ops) == 0 {
			return
		}
		for range min(len(s.pending), 1+s.rng.IntN(3)) {
			i := s.rng.IntN(len(s.pending))
			s.pending = slices.Delete(s.pending, i, i+1)
		}
		s.ops = append(s.ops, repairOp(s.snapshots(), s.now))
	}
}

// benchGraph builds a graph of n nodes: a tenth seeded from /proc, the
// rest forked and exec'd, a third of those exited.
func benchGraph(n int) *Graph {
	g := newGraph()
	rng := rand.New(rand.NewPCG(1, 2))
	seeded := n / 10
	snaps := []Snapshot{{ID: coarse(initID), Comm: "systemd", Filename: "/usr/lib/systemd/systemd", Argv: []string{"/sbin/init"}}}
	for i := 1; i < seeded; i++ {
		x := ID{PID: uint32(1 + i), Start: uint64(i) * 7 * ms}
		snaps = append(snaps, snap(x, uint32(1+rng.IntN(i)), "sshd", "-D", fmt.Sprint(i)))
	}
	g.Seed(snaps, 10*sec)
	now := 10 * sec
	ids := []ID{}
	for _, p := range g.Processes() {
		ids = append(ids, p.ID)
	}
	for i := seeded; i < n; i++ {
		now += 1_000_003
		c := ID{PID: uint32(1 + i), Start: now}
		creator := ids[rng.IntN(len(ids))]
		g.Apply(Event{Kind: KindFork, Time: now, Proc: c, Creator: creator, Parent: creator, Comm: "node", UID: 1000, CgroupID: 7})
		g.Apply(execEv(now+1, c, "node", "/srv/app/server.js", "--port", fmt.Sprint(i)))
		if i%3 == 0 {
			g.Apply(exitEv(now+2, c, 0))
		} else {
			ids = append(ids, c)
		}
	}
	return g
}

// BenchmarkDump measures Dump of a graph of 10k nodes: the time the agent
// holds the graph's read lock, plus sorting.
//
//	go test -run '^$' -bench 'Dump|Restore|StateJSON' -benchmem ./lineage/
func BenchmarkDump(b *testing.B) {
	g := benchGraph(10_000)
	if n := len(g.Processes()); n != 10_000 {
		b.Fatalf("%d nodes", n)
	}
	b.ReportAllocs()
	for b.Loop() {
		g.Dump()
	}
}

// BenchmarkRestore measures Restore of a State of 10k nodes.
func BenchmarkRestore(b *testing.B) {
	s := benchGraph(10_000).Dump()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Restore(Config{}, s); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkStateJSON measures encoding a State of 10k nodes, which the
// agent does outside the lock: whole (json.Marshal) and a node at a time
// to a writer (EncodeJSON, what a checkpoint does).
func BenchmarkStateJSON(b *testing.B) {
	b.Run("whole", benchStateJSONWhole)
	b.Run("streamed", func(b *testing.B) {
		s := benchGraph(10_000).Dump()
		b.ReportAllocs()
		var w countingWriter
		for b.Loop() {
			w = 0
			if err := s.EncodeJSON(&w); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(w), "bytes/state")
	})
}

type countingWriter int

func (w *countingWriter) Write(b []byte) (int, error) {
	*w += countingWriter(len(b))
	return len(b), nil
}

func benchStateJSONWhole(b *testing.B) {
	s := benchGraph(10_000).Dump()
	b.ReportAllocs()
	var n int
	for b.Loop() {
		out, err := json.Marshal(s)
		if err != nil {
			b.Fatal(err)
		}
		n = len(out)
	}
	b.ReportMetric(float64(n), "bytes/state")
}
