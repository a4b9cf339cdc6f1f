package lineage

import (
	"fmt"
	"testing"
	"time"
)

// churn forks n short-lived children of creator from start on, each
// exiting at once, and returns their identities.
func churn(g *Graph, creator ID, start uint64, n int) []ID {
	out := make([]ID, n)
	for i := range out {
		c := id(uint32(20_000+i), start+uint64(i)*ms+7)
		apply(g, forkEv(c, creator), exitEv(c.Start+ms/2, c, 0))
		out[i] = c
	}
	return out
}

func TestChurnOutsideSessionsKeepsOnlyTheRecentExits(t *testing.T) {
	g := New(Config{RecentExits: 100})
	seedInit(g)
	apply(g, forkEv(host, initID))
	kids := churn(g, host, 2*sec, 10_000)
	checkInvariants(t, g)
	s := g.Stats()
	if s.Tracked != 2+100 || s.Dropped != 10_000-100 {
		t.Errorf("after 10,000 exits: %d tracked, %d dropped; want 102 (init, host, 100 recent) and 9,900", s.Tracked, s.Dropped)
	}
	for i, c := range kids {
		_, ok := g.Get(c)
		if want := i >= len(kids)-100; ok != want {
			t.Fatalf("exit %d (%v) in graph = %v, want %v: the newest 100 stay", i, c, ok, want)
		}
	}
	if n := len(g.Children(host)); n != 100 {
		t.Errorf("host lists %d children, want the 100 recent ones", n)
	}
}

func TestClaimedSubtreeKeepsItsExitsForRetention(t *testing.T) {
	g := New(Config{RecentExits: 10})
	seedInit(g)
	root := id(1500, 1*sec+303)
	apply(g, forkEv(host, initID), forkEv(root, host))
	if !g.Claim(root) {
		t.Fatal("Claim: root not in graph")
	}
	wrapper := id(1501, 1*sec+505)
	apply(g, forkEv(wrapper, root))
	inSession := churn(g, wrapper, 2*sec, 50)
	churn(g, host, 10*sec, 50) // outside the session: pushes the recent exits
	for _, c := range inSession {
		if _, ok := g.Get(c); !ok {
			t.Fatalf("session member %v dropped", c)
		}
	}
	if n := len(g.Descendants(root)); n != 2+50 {
		t.Errorf("session lists %d processes, want root, wrapper and 50 exited members", n)
	}
	// Retention still applies to them.
	g.Retire(10*sec + 50*ms + uint64(DefaultRetention) + sec)
	if _, ok := g.Get(inSession[0]); ok {
		t.Errorf("session member %v outlived retention with its session's root alive", inSession[0])
	}
}

func TestRecentExitsAreJudgedWhenTheirTurnComes(t *testing.T) {
	// Whether a session holds an exit is decided when its turn comes: one
	// whose turn comes while claimed stays for retention, even after its
	// session lets go; one whose session let go first goes.
	g := New(Config{RecentExits: 1})
	seedInit(g)
	root := id(1500, 1*sec+303)
	apply(g, forkEv(host, initID), forkEv(root, host))
	g.Claim(root)
	held := churn(g, root, 2*sec, 2)[0] // its turn came while claimed
	late := id(1600, 3*sec+1)
	apply(g, forkEv(late, root), exitEv(3*sec+5, late, 0))
	g.Unclaim(root)
	churn(g, host, 4*sec, 5)
	if _, ok := g.Get(held); !ok {
		t.Errorf("member %v, judged while its session held it, dropped after Unclaim", held)
	}
	if _, ok := g.Get(late); ok {
		t.Errorf("member %v, whose turn came after Unclaim, stays", late)
	}
}

func TestDeadCreatorsGoWithTheirLastChild(t *testing.T) {
	g := New(Config{RecentExits: 1})
	seedInit(g)
	apply(g, forkEv(host, initID))
	// host → sh (exits first, a daemon's double fork) → daemon (exits later).
	sh, daemon := id(1600, 2*sec+1), id(1601, 2*sec+3)
	apply(g, forkEv(sh, host), forkEv(daemon, sh), exitEv(2*sec+5, sh, 0))
	if _, ok := g.Get(sh); !ok {
		t.Fatal("exited sh with a live child dropped")
	}
	apply(g, exitEv(3*sec, daemon, 0))
	churn(g, host, 4*sec, 1) // daemon is no longer the most recent exit
	for _, x := range []ID{sh, daemon} {
		if _, ok := g.Get(x); ok {
			t.Errorf("%v stays: the dead branch connects nothing", x)
		}
	}
	if s := g.Stats(); s.Dropped != 2 || s.Tracked != 3 {
		t.Errorf("dropped %d, tracked %d; want 2 (daemon and sh) and 3 (init, host, last exit)", s.Dropped, s.Tracked)
	}
	checkInvariants(t, g)
}

func TestRecentExitsKeepWhatTheyCannotProve(t *testing.T) {
	tests := []struct {
		name  string
		build func(g *Graph) ID // returns the exited process that must stay
	}{
		{"a live descendant needs it", func(g *Graph) ID {
			sh, kid := id(1600, 2*sec+1), id(1601, 2*sec+3)
			apply(g, forkEv(sh, host), forkEv(kid, sh), exitEv(2*sec+5, sh, 0))
			return sh
		}},
		{"its exit was inferred", func(g *Graph) ID {
			// sh vanished from /proc (a fork of it may still be in the
			// ring); its child then exits and goes.
			sh, kid := id(1600, 2*sec+1), id(1601, 2*sec+3)
			apply(g, forkEv(sh, host), forkEv(kid, sh))
			g.Repair([]Snapshot{{ID: coarse(initID)}, snap(host, 1, "bash"), snap(kid, 1, "sleep")}, 2*sec+9)
			apply(g, exitEv(3*sec, kid, 0))
			return sh
		}},
		{"its fork named no creator", func(g *Graph) ID {
			x := id(1600, 2*sec+1)
			apply(g, Event{Kind: KindFork, Time: x.Start, Proc: x}, exitEv(2*sec+5, x, 0))
			return x
		}},
		{"a creator up the chain stands in for one never seen", func(g *Graph) ID {
			unseen, a, x := id(1700, 2*sec+1), id(1701, 2*sec+3), id(1702, 2*sec+5)
			apply(g, forkEv(a, unseen), forkEv(x, a), exitEv(2*sec+7, x, 0))
			return x
		}},
		{"its fork was never seen", func(g *Graph) ID {
			x := id(1600, 2*sec+1)
			apply(g, exitEv(2*sec+5, x, 0))
			return x
		}},
		{"its creator is a stand-in", func(g *Graph) ID {
			unseen, x := id(1700, 2*sec+1), id(1701, 2*sec+3)
			apply(g, forkEv(x, unseen), exitEv(2*sec+5, x, 0))
			return x
		}},
		{"it is pinned", func(g *Graph) ID {
			x := id(1600, 2*sec+1)
			apply(g, forkEv(x, host))
			g.Pin(x)
			apply(g, exitEv(2*sec+5, x, 0))
			return x
		}},
		{"a creator up the chain is claimed after its exit", func(g *Graph) ID {
			x := id(1600, 2*sec+1)
			apply(g, forkEv(x, host), exitEv(2*sec+5, x, 0))
			g.Claim(host)
			return x
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := New(Config{RecentExits: 1})
			seedInit(g)
			apply(g, forkEv(host, initID))
			x := tt.build(g)
			churn(g, initID, 5*sec, 3)
			if _, ok := g.Get(x); !ok {
				t.Errorf("%v dropped", x)
			}
			checkInvariants(t, g)
		})
	}
}

func TestStandInsReadFromProcDoNotKeepChurn(t *testing.T) {
	// A shell forks while the agent starts: its child's fork event names
	// it before the seed read it (a stand-in, GapNoFork). Once the seed
	// gave it its PPID as creator, what it runs and exits goes as any
	// other exit.
	g := New(Config{RecentExits: 1})
	g.Apply(execEv(host.Start+ms, host, "bash")) // host is a stand-in
	first := id(1600, 2*sec+1)
	apply(g, forkEv(first, host))
	g.Seed([]Snapshot{{ID: coarse(initID), Comm: "systemd"}, snap(host, 1, "bash"), snap(first, host.PID, "bash")}, 2*sec+5)
	if p := mustGet(t, g, host); p.Gaps&GapNoFork == 0 || p.Creator != coarse(initID) {
		t.Fatalf("host = %+v, want a stand-in the seed linked to init", p)
	}
	apply(g, exitEv(2*sec+9, first, 0))
	churn(g, host, 3*sec, 5)
	if s := g.Stats(); s.Dropped != 5 || s.Tracked != 3 {
		t.Errorf("dropped %d, tracked %d; want 5 (the oldest exits) and 3 (init, host, the last exit)", s.Dropped, s.Tracked)
	}
}

var pinnedRecent = []pinCase{
	{
		name: "queued exits go in their order after a restore",
		pins: "Recent",
		cfg:  Config{RecentExits: 1},
		build: append(commonStart(),
			evOps(forkEv(id(1600, 2*sec+1), host), exitEv(2*sec+5, id(1600, 2*sec+1), 0))...),
		cont: evOps(forkEv(id(1601, 3*sec+1), host), exitEv(3*sec+5, id(1601, 3*sec+1), 0)),
		mutate: func(s *State) {
			s.Recent = nil
		},
		check: func(t *testing.T, g *Graph) {
			if _, ok := g.Get(id(1600, 2*sec+1)); ok {
				t.Errorf("the older exit stays after a newer one")
			}
		},
	},
}

func TestRestoreKeepsTheRecentExitsQueue(t *testing.T) {
	runPinCases(t, pinnedRecent)
}

func ExampleConfig_recentExits() {
	g := New(Config{RecentExits: 2})
	g.Seed([]Snapshot{{ID: ID{PID: 1, Start: 0}, Comm: "init"}}, 1)
	for i := range 5 {
		c := ID{PID: uint32(100 + i), Start: uint64(i+1) * 1_000_000_007}
		g.Apply(Event{Kind: KindFork, Time: c.Start, Proc: c, Creator: ID{PID: 1}})
		g.Apply(Event{Kind: KindExit, Time: c.Start + 1, Proc: c})
	}
	s := g.Stats()
	fmt.Println(s.Tracked, s.Dropped)
	// Output: 3 3
}

func TestRecentExitsRemovedWhileQueuedNeitherCountNorPileUp(t *testing.T) {
	const recent = 50
	g := New(Config{RecentExits: recent, Retention: time.Millisecond})
	seedInit(g)
	apply(g, forkEv(host, initID))
	start := uint64(2 * sec)
	for round := range 100 {
		churn(g, host, start, 10)
		start += 10*ms + sec
		g.Retire(start) // past the retention: the queued exits go this way
		// 1,000 exits in all, each retired before 50 newer ones came.
		if q := len(g.recent) - g.recentHead; q > 2*recent+64+10 {
			t.Fatalf("round %d: the queue holds %d entries (%d live), want at most %d", round, q, g.recentLive, 2*recent+64+10)
		}
	}
	checkInvariants(t, g)
	if g.recentLive != 0 {
		t.Errorf("%d live recent exits after every one retired, want 0", g.recentLive)
	}
}
