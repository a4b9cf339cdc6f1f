package lineage

import (
	"reflect"
	"slices"
	"testing"
)

func TestSeedCoarseStartUpgradedByEvent(t *testing.T) {
	shell := id(200, 2*sec+12_345_678) // coarse: 2*sec+10_000_000
	kid := id(201, 3*sec+45_678_901)
	grandkid := id(202, 9*sec+1)
	seed := []Snapshot{
		{ID: coarse(initID), Comm: "systemd"},
		snap(shell, 1, "bash"),
		snap(kid, 200, "sleep", "60"),
	}
	tests := []struct {
		name string
		ev   Event
	}{
		{"by an exec", execEv(10*sec, shell, "zsh")},
		{"by an exit", exitEv(10*sec, shell, 0)},
		{"by a fork it makes", forkEv(grandkid, shell)},
		{"by its own late fork", forkEv(shell, initID)},
		{"by a parent reference", Event{Kind: KindExec, Time: 10 * sec, Proc: kid, Parent: shell, Argv: []string{"sleep", "60"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := newGraph()
			g.Seed(seed, 10*sec)
			if p := mustGet(t, g, coarse(shell)); !p.CoarseStart || p.Gaps != GapSeeded {
				t.Fatalf("seeded node = %+v, want coarse and seeded", p)
			}
			// An exact ID in the same tick finds the coarse node before any event.
			if p := mustGet(t, g, shell); p.ID != coarse(shell) {
				t.Fatalf("Get(exact) = %v before upgrade, want the coarse node", p.ID)
			}
			g.Apply(tt.ev)
			checkInvariants(t, g)

			p := mustGet(t, g, shell)
			if p.ID != shell || p.CoarseStart {
				t.Errorf("node = %v coarse=%v, want exact %v", p.ID, p.CoarseStart, shell)
			}
			if old := mustGet(t, g, coarse(shell)); old.ID != shell {
				t.Errorf("Get(old coarse ID) = %v, want the upgraded node", old.ID)
			}
			if n := len(g.Processes()); n < 3 || n > 4 {
				t.Errorf("%d processes, want no duplicate of the upgraded node", n)
			}
			k := mustGet(t, g, coarse(kid))
			if k.Creator != shell || k.Parent != shell {
				t.Errorf("child creator=%v parent=%v, want both %v after the upgrade", k.Creator, k.Parent, shell)
			}
			if d := ids(g.Descendants(shell)); d[0] != shell || !slices.Contains(d, k.ID) {
				t.Errorf("Descendants(shell) = %v", d)
			}
		})
	}
}

func TestSeedEventInAnotherTickIsAnotherProcess(t *testing.T) {
	shell := id(200, 2*sec+12_345_678)
	later := id(200, 2*sec+22_345_678) // next tick: the PID was reused
	g := newGraph()
	g.Seed([]Snapshot{snap(shell, 0, "bash")}, 3*sec)
	g.Apply(execEv(later.Start+1, later, "ls"))
	checkInvariants(t, g)
	old := mustGet(t, g, coarse(shell))
	if !old.CoarseStart || !old.Exited || old.Gaps != GapSeeded|GapNoExit {
		t.Errorf("seeded node = %+v, want still coarse, exited, seeded|no_exit", old)
	}
	if p := mustGet(t, g, later); p.ID != later || p.Exited {
		t.Errorf("new node = %+v", p)
	}
}

func TestSeedAfterEventsDoesNotResurrectExited(t *testing.T) {
	x := id(700, 5*sec+3)
	reused := id(700, 12*sec+7)
	tests := []struct {
		name   string
		events []Event
		seed   []Snapshot
		check  func(t *testing.T, g *Graph)
	}{
		{
			name:   "exit applied before the seed",
			events: []Event{forkEv(x, host), exitEv(11*sec, x, 4)},
			seed:   []Snapshot{snap(x, host.PID, "srv")},
			check: func(t *testing.T, g *Graph) {
				p := mustGet(t, g, x)
				if !p.Exited || p.ExitCode != 4 || p.Gaps != 0 || len(p.Images) != 1 {
					t.Errorf("node = %+v, want the exited node unchanged", p)
				}
			},
		},
		{
			name:   "exit of an unforked process applied before the seed",
			events: []Event{exitEv(11*sec, x, 4)},
			seed:   []Snapshot{snap(x, host.PID, "srv")},
			check: func(t *testing.T, g *Graph) {
				if p := mustGet(t, g, x); !p.Exited || p.Gaps&GapSeeded != 0 {
					t.Errorf("node = %+v, want exited, not seeded", p)
				}
			},
		},
		{
			name:   "PID reused after the read",
			events: []Event{forkEv(reused, host)},
			seed:   []Snapshot{snap(x, host.PID, "srv")},
			check: func(t *testing.T, g *Graph) {
				if p := mustGet(t, g, coarse(x)); !p.Exited || p.Gaps != GapSeeded|GapNoExit {
					t.Errorf("older seeded node = %+v, want exited by PID reuse", p)
				}
				if p, _ := g.Lookup(700); p.ID != reused || p.Exited {
					t.Errorf("Lookup(700) = %+v, want the live reuse", p)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := newGraph()
			seedInit(g)
			g.Apply(forkEv(host, initID))
			apply(g, tt.events...)
			g.Seed(tt.seed, 10*sec)
			checkInvariants(t, g)
			tt.check(t, g)
		})
	}
}

func TestSeedBufferedForkCorrectsGuessedCreator(t *testing.T) {
	wrapper := id(800, 2*sec+3)    // exited before the scan
	server := id(801, 2*sec+5_003) // reparented to init when wrapper exited
	other := id(802, 2*sec+7)
	g := newGraph()
	g.Seed([]Snapshot{
		{ID: coarse(initID), Comm: "systemd"},
		snap(server, 1, "node", "server.js"),
		snap(other, 1, "other"),
	}, 4*sec)
	if p := mustGet(t, g, server); p.Creator != coarse(initID) || p.Gaps != GapSeeded {
		t.Fatalf("seeded creator = %v gaps %v, want init from the PPID", p.Creator, p.Gaps)
	}
	// Buffered events from before the scan arrive after it.
	apply(g,
		forkEv(wrapper, initID),
		forkEv(server, wrapper),
		exitEv(3*sec, wrapper, 0),
	)
	checkInvariants(t, g)
	p := mustGet(t, g, server)
	if p.Creator != wrapper {
		t.Errorf("creator = %v, want the fork's %v", p.Creator, wrapper)
	}
	if p.Parent != initID {
		t.Errorf("parent = %v, want init: the scan is newer than the fork", p.Parent)
	}
	equalIDs(t, "Ancestors(server)", ids(g.Ancestors(server)), []ID{server, wrapper, initID})
	if got := argvs(p); !reflect.DeepEqual(got, [][]string{{"node", "server.js"}}) {
		t.Errorf("images = %q, want the /proc image only", got)
	}

	// Once a fork named the creator, nothing overrides it.
	g.Apply(Event{Kind: KindFork, Time: server.Start, Proc: server, Creator: other})
	g.Repair([]Snapshot{{ID: coarse(initID)}, snap(server, 802, "node", "server.js"), snap(other, 1, "other")}, 5*sec)
	checkInvariants(t, g)
	if p := mustGet(t, g, server); p.Creator != wrapper || p.Parent != other {
		t.Errorf("after another fork and a repair: creator=%v parent=%v, want %v and %v", p.Creator, p.Parent, wrapper, other)
	}
}

func TestSeedResolvesParentListedAfterChild(t *testing.T) {
	reaper := id(900, 8*sec+3) // subreaper younger than its adopted child
	orphan := id(901, 2*sec+3)
	g := newGraph()
	g.Seed([]Snapshot{snap(orphan, 900, "worker"), snap(reaper, 1, "tini"), {ID: coarse(initID)}}, 9*sec)
	checkInvariants(t, g)
	equalIDs(t, "Ancestors(orphan)", ids(g.Ancestors(coarse(orphan))), []ID{coarse(orphan), coarse(reaper), coarse(initID)})
	equalIDs(t, "Roots", g.Roots(), []ID{coarse(initID)})
}

func TestSeedFillsOnlyMissingFieldsOfKnownNodes(t *testing.T) {
	ghost := id(950, 1*sec+3)
	child := id(951, 2*sec+3)
	g := newGraph()
	apply(g, forkEv(child, ghost)) // child has no image: its creator is a placeholder
	g.Seed([]Snapshot{
		{ID: coarse(ghost), PPID: 1, Comm: "npm", Filename: "/usr/bin/node", Argv: []string{"npm", "exec"}, UID: 1000},
		{ID: coarse(child), PPID: 950, Comm: "sh", Filename: "/bin/dash", Argv: []string{"sh", "-c", "x"}},
		{ID: coarse(initID)},
	}, 5*sec)
	checkInvariants(t, g)
	gp := mustGet(t, g, ghost)
	if gp.Comm != "npm" || gp.UID != 1000 || gp.Current().Source != SourceProc || gp.ID != ghost {
		t.Errorf("placeholder after seed = %+v, want filled from /proc", gp)
	}
	if gp.Creator != coarse(initID) || gp.Gaps != GapNoFork|GapSeeded {
		t.Errorf("placeholder creator=%v gaps=%v, want init from the PPID, no_fork|seeded", gp.Creator, gp.Gaps)
	}
	c := mustGet(t, g, child)
	if c.Comm != "sh" || len(c.Images) != 1 || c.Creator != ghost || c.Gaps&GapSeeded != 0 {
		t.Errorf("child after seed = %+v, want image filled, creator kept, not seeded", c)
	}
}

func TestSeedExecAlreadyReflectedIsNotDuplicated(t *testing.T) {
	x := id(1100, 2*sec+3)
	readAt := 10 * sec
	tests := []struct {
		name     string
		ev       Event
		wantArgv [][]string
		wantSrc  []Source
	}{
		{"same exec before the read replaces the /proc image",
			execEv(readAt-5, x, "node", "srv.js"),
			[][]string{{"node", "srv.js"}}, []Source{SourceKernel}},
		{"same exec after the read is a new image",
			execEv(readAt+5, x, "node", "srv.js"),
			[][]string{{"node", "srv.js"}, {"node", "srv.js"}}, []Source{SourceProc, SourceKernel}},
		{"same argv with the unresolved path before the read replaces the /proc image",
			func() Event {
				e := execEv(readAt-5, x, "node", "srv.js")
				e.Filename = "/usr/local/bin/node-link"
				return e
			}(),
			[][]string{{"node", "srv.js"}}, []Source{SourceKernel}},
		{"truncated kernel argv that is a prefix before the read replaces the /proc image",
			func() Event { e := execEv(readAt-5, x, "node", "sr"); e.ArgvTruncated = true; return e }(),
			[][]string{{"node", "sr"}}, []Source{SourceKernel}},
		{"different exec before the read is kept apart",
			execEv(readAt-5, x, "node", "other.js"),
			[][]string{{"node", "srv.js"}, {"node", "other.js"}}, []Source{SourceProc, SourceKernel}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := newGraph()
			g.Seed([]Snapshot{snap(x, 0, "node", "srv.js")}, readAt)
			g.Apply(tt.ev)
			checkInvariants(t, g)
			p := mustGet(t, g, x)
			if got := argvs(p); !reflect.DeepEqual(got, tt.wantArgv) {
				t.Errorf("argv chain = %q, want %q", got, tt.wantArgv)
			}
			if got := sources(p); !slices.Equal(got, tt.wantSrc) {
				t.Errorf("sources = %v, want %v", got, tt.wantSrc)
			}
		})
	}
}

func TestRepairAddsMissingAndMarksVanished(t *testing.T) {
	alive := id(1200, 2*sec+3)
	vanished := id(1201, 2*sec+5)
	young := id(1202, 21*sec+3) // started after the scan began
	dead := id(1203, 2*sec+7)
	found := id(1204, 15*sec+3) // fork and exec lost
	moved := id(1205, 3*sec+3)  // reparented to init, event lost
	readAt := 20 * sec

	g := newGraph()
	seedInit(g)
	apply(g,
		forkEv(host, initID),
		forkEv(alive, host), forkEv(vanished, host), forkEv(dead, host), forkEv(moved, alive),
		exitEv(4*sec, dead, 0),
		forkEv(young, host),
	)
	res := g.Repair([]Snapshot{
		{ID: coarse(initID)}, snap(host, 1, "bash"), snap(alive, host.PID, "a"),
		snap(found, alive.PID, "python3", "mcp.py"), snap(moved, 1, "m"),
	}, readAt)
	checkInvariants(t, g)

	if res != (RepairResult{Added: 1, MarkedExited: 1}) {
		t.Errorf("Repair = %+v, want 1 added, 1 marked exited", res)
	}
	v := mustGet(t, g, vanished)
	if !v.Exited || v.ExitTime != 0 || v.Gaps != GapNoExit {
		t.Errorf("vanished = %+v, want exited, unknown time, no_exit", v)
	}
	f := mustGet(t, g, coarse(found))
	if f.Exited || f.Gaps != GapRepaired || f.Creator != alive || f.Current().Source != SourceProc || !f.CoarseStart {
		t.Errorf("found = %+v, want alive, repaired, creator %v, /proc image", f, alive)
	}
	if p := mustGet(t, g, young); p.Exited {
		t.Errorf("process started after the read marked exited")
	}
	if p := mustGet(t, g, dead); p.Gaps != 0 || p.ExitTime != 4*sec {
		t.Errorf("already exited process changed: %+v", p)
	}
	if p := mustGet(t, g, moved); p.Parent != initID || p.Creator != alive {
		t.Errorf("moved: parent=%v creator=%v, want parent init from the PPID, creator kept", p.Parent, p.Creator)
	}
	if s := g.Stats(); s.Repairs != 1 || s.Gaps[GapNoExit] != 1 || s.Gaps[GapRepaired] != 1 {
		t.Errorf("stats = %+v", s)
	}

	// Retention of an inferred exit counts from the read.
	g.Retire(readAt + uint64(DefaultRetention) - 1)
	if _, ok := g.Get(vanished); !ok {
		t.Fatalf("vanished retired early")
	}
	g.Retire(readAt + uint64(DefaultRetention) + 1)
	if _, ok := g.Get(vanished); ok {
		t.Errorf("vanished kept past retention")
	}
}

func TestRepairCountsPIDReuseAsMarkedExited(t *testing.T) {
	old := id(1300, 2*sec+3)
	reused := id(1300, 8*sec+3) // fork and old's exit both lost
	g := newGraph()
	seedInit(g)
	apply(g, forkEv(host, initID), forkEv(old, host))
	res := g.Repair([]Snapshot{{ID: coarse(initID)}, snap(host, 1, "bash"), snap(reused, host.PID, "x")}, 10*sec)
	checkInvariants(t, g)
	if res != (RepairResult{Added: 1, MarkedExited: 1}) {
		t.Errorf("Repair = %+v, want the reuse added and the old identity marked exited", res)
	}
	if p := mustGet(t, g, old); !p.Exited || p.Gaps != GapNoExit {
		t.Errorf("old = %+v", p)
	}
	equalIDs(t, "Children(host)", ids(g.Children(host)), []ID{old, coarse(reused)})
}

func TestSeedParentVanishedUntilForkArrives(t *testing.T) {
	gone := id(1400, 1*sec+3) // exited between the listing and its read
	child := id(1401, 2*sec+3)
	g := newGraph()
	g.Seed([]Snapshot{snap(child, 1400, "x")}, 5*sec)
	if p := mustGet(t, g, child); p.Gaps != GapSeeded|GapUnknownCreator || !p.Creator.IsZero() {
		t.Fatalf("child = %+v, want seeded with unknown creator", p)
	}
	apply(g, forkEv(gone, initID), forkEv(child, gone), exitEv(4*sec, gone, 0))
	checkInvariants(t, g)
	if p := mustGet(t, g, child); p.Gaps != GapSeeded || p.Creator != gone {
		t.Errorf("child = %+v, want creator from the fork, only seeded left", p)
	}
}

func TestRepairMarksExitedWhatLateEventsNameAndTheScanMissed(t *testing.T) {
	// The ring buffer still holds events from before the loss when the
	// agent repairs: they are applied after the scan.
	readAt := 20 * sec
	for _, tc := range []struct {
		name       string
		late       func(p ID) []Event
		p          ID
		listed     bool
		wantExited bool
	}{
		{"fork of a process that exited before the scan, exit lost",
			func(p ID) []Event { return []Event{forkEv(p, host)} }, id(1500, 12*sec+3), false, true},
		{"exec of a process whose fork and exit were lost",
			func(p ID) []Event { return []Event{execEv(13*sec, p, "node")} }, id(1501, 12*sec+5), false, true},
		{"fork of a process the scan listed",
			func(p ID) []Event { return []Event{forkEv(p, host)} }, id(1502, 12*sec+7), true, false},
		{"fork of a process started after the scan began",
			func(p ID) []Event { return []Event{forkEv(p, host)} }, id(1503, 21*sec+3), false, false},
		{"fork whose PID the scan listed with another start",
			func(p ID) []Event { return []Event{forkEv(p, host)} }, id(1504, 12*sec+3), false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newGraph()
			seedInit(g)
			apply(g, forkEv(host, initID))
			snaps := []Snapshot{{ID: coarse(initID)}, snap(host, 1, "bash")}
			if tc.listed {
				snaps = append(snaps, snap(tc.p, host.PID, "x"))
			}
			if tc.p.PID == 1504 {
				snaps = append(snaps, snap(id(1504, 15*sec+3), host.PID, "other"))
			}
			g.Repair(snaps, readAt)
			apply(g, tc.late(tc.p)...)
			checkInvariants(t, g)
			p := mustGet(t, g, tc.p)
			if p.Exited != tc.wantExited {
				t.Errorf("%v exited = %v, want %v: %+v", tc.p, p.Exited, tc.wantExited, p)
			}
			if tc.wantExited && p.Gaps&GapNoExit == 0 {
				t.Errorf("%v gaps %v, want no_exit", tc.p, p.Gaps)
			}
		})
	}
}
