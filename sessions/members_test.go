package sessions

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/mcptrace/mcptrace/lineage"
)

// TestSessionsCountedAgreesWithMembers builds random trees with sessions
// nested at random depths, exits and two uids, and checks that the
// listing's counts are those of Members under the same visibility.
func TestSessionsCountedAgreesWithMembers(t *testing.T) {
	for seed := range uint64(20) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 7))
			w := newWorld(t, Config{})
			procs := []lineage.ID{initID}
			pid := uint32(100)
			for range 300 {
				pid++
				creator := procs[rng.IntN(len(procs))]
				uid := uint32(1000 + rng.IntN(2))
				p := w.fork(creator, pid, uid)
				procs = append(procs, p)
				switch rng.IntN(6) {
				case 0:
					w.exec(p, uid, "mcptrace", "run", "--session", fmt.Sprintf("s%d", pid), "--", "sh")
				case 1:
					w.exit(p)
				}
			}
			visible := func(p lineage.Process) bool { return p.UID == 1000 }
			listed := w.tr.SessionsCounted(func(Session) bool { return true }, visible)
			if len(listed) < 10 {
				t.Fatalf("only %d sessions: the tree nests too little to test", len(listed))
			}
			for _, c := range listed {
				var members, alive int
				for _, p := range w.tr.Members(c.Ref()) {
					if visible(p) {
						members++
						if !p.Exited {
							alive++
						}
					}
				}
				if c.Members != members || c.Alive != alive {
					t.Errorf("session %s: listed %d members (%d alive), Members has %d (%d alive)", c.ID, c.Members, c.Alive, members, alive)
				}
			}
		})
	}
}

// TestListingNestedSessionsVisitsEachProcessOnce: 500 sessions nested one
// in another down a chain of 5,000 processes cost one visit per process,
// not one per process and session that holds it (the listing holds the
// lock the event consumer needs).
func TestListingNestedSessionsVisitsEachProcessOnce(t *testing.T) {
	w := newWorld(t, Config{})
	p := initID
	for i := range 5000 {
		uid := uint32(1000)
		p = w.fork(p, uint32(100+i), uid)
		if i%10 == 0 {
			w.exec(p, uid, "mcptrace", "run", "--session", fmt.Sprintf("s%d", i), "--", "sh")
		}
	}
	visits := 0
	listed := w.tr.SessionsCounted(func(Session) bool { return true }, func(lineage.Process) bool { visits++; return true })
	if len(listed) != 500 {
		t.Fatalf("%d sessions listed, want 500", len(listed))
	}
	for _, c := range listed {
		if c.ID == "s0" && c.Members != 5000 {
			t.Errorf("outermost session has %d members, want 5000", c.Members)
		}
	}
	if visits > 5000 {
		t.Errorf("%d processes visited for 500 nested sessions over 5,000 processes, want at most 5,000", visits)
	}
}

// TestSessionRootIsNeverFoldedOutOfTheGraph: the root of an ended session
// (exited, one child, its creator exited too) is what the enforcer walks
// the session from; a graph that folds exited creators to stay within its
// cap keeps it, and the member below it stays a member.
func TestSessionRootIsNeverFoldedOutOfTheGraph(t *testing.T) {
	w := newWorldOf(t, lineage.Config{MaxNodes: 100}, Config{})
	a := w.fork(initID, 100, 1000)
	root := w.fork(a, 101, 1000)
	w.exec(root, 1000, "mcptrace", "run", "--session", "s", "--", "sh")
	member := w.fork(root, 102, 1000)
	w.exit(a)
	wantEnded(t, w.exit(root), "s")
	ended := w.session("s")

	w.foldLoop(300) // another user's, past the graph's cap
	if _, ok := w.g.Get(root); !ok {
		t.Errorf("the ended session's root %v was folded out of the graph", root)
	}
	got := procIDs(w.tr.MembersOf(ended))
	if len(got) != 2 || got[0] != root || got[1] != member {
		t.Errorf("MembersOf(s) = %v, want [%v %v]", got, root, member)
	}
}

// TestWithinPIDScopeIsNeverFoldedOutOfTheGraph: the process
// sessions.within-pid names is what the scope's chains are walked
// through; once it exited (one child, its creator exited too) a graph
// folding to stay within its cap keeps it, and what it created may still
// begin sessions.
func TestWithinPIDScopeIsNeverFoldedOutOfTheGraph(t *testing.T) {
	w := newWorldOf(t, lineage.Config{MaxNodes: 100}, Config{WithinPID: 101})
	a := w.fork(initID, 100, 1000)
	scope := w.fork(a, 101, 1000)
	child := w.spawn(scope, 103, 1000, "sh") // an exec: the tracker finds the scope's process, alive
	w.exit(a)
	w.exit(scope)

	w.foldLoop(300)
	w.exec(child, 1000, "mcptrace", "run", "--session", "later", "--", "sh")
	if _, ok := w.tr.Find("later"); !ok {
		t.Errorf("a tag below the exited scope process began no session; scope process in the graph: %v", func() bool { _, ok := w.g.Get(scope); return ok }())
	}
}

// TestSessionKeepsItsExitedMembersUnderChurn: a graph that lets exited
// processes outside sessions go after a few newer exits (lineage's recent
// exits) keeps every exited member of a session, active or ended, while
// the tracker keeps the session: the session's root is claimed.
func TestSessionKeepsItsExitedMembersUnderChurn(t *testing.T) {
	w := newWorldOf(t, lineage.Config{RecentExits: 10}, Config{})
	root := w.fork(initID, 100, 1000)
	w.exec(root, 1000, "mcptrace", "run", "--session", "s", "--", "sh")
	wrapper := w.spawn(root, 101, 1000, "npx", "server")
	gone := w.spawn(wrapper, 102, 1000, "node", "server.js")
	w.exit(gone)

	churn := func(from uint32) {
		for i := range uint32(100) {
			w.exit(w.fork(initID, from+i, 2000)) // another user's short processes
		}
	}
	churn(1000)
	if got := procIDs(w.tr.Members(w.ref("s"))); !slices.Equal(got, []lineage.ID{root, wrapper, gone}) {
		t.Errorf("active session's members after churn = %v, want [%v %v %v]", got, root, wrapper, gone)
	}
	w.exit(wrapper)
	wantEnded(t, w.exit(root), "s")
	churn(2000)
	if got := procIDs(w.tr.MembersOf(w.session("s"))); !slices.Equal(got, []lineage.ID{root, wrapper, gone}) {
		t.Errorf("ended session's members after churn = %v, want [%v %v %v]", got, root, wrapper, gone)
	}
	if s := w.g.Stats(); s.Dropped < 190 {
		t.Errorf("only %d of the 200 exited processes outside the session dropped", s.Dropped)
	}
}

func TestMembersBriefAreMembersWithoutImages(t *testing.T) {
	w := newWorld(t, Config{})
	root := w.spawn(initID, 600, alice, "mcptrace", "run", "--session", "s", "--", "x")
	a := w.spawn(root, 601, alice, "npx", "-y", "pkg")
	w.spawn(a, 602, alice, "node", "server.js")
	w.spawn(initID, 700, alice, "outsider")
	s := w.session("s")
	full, brief := w.tr.MembersOf(s), w.tr.MembersBrief(s)
	if !slices.Equal(procIDs(full), procIDs(brief)) {
		t.Fatalf("MembersBrief %v, MembersOf %v", procIDs(brief), procIDs(full))
	}
	for _, p := range brief {
		if p.Images != nil {
			t.Errorf("%v has images in MembersBrief", p.ID)
		}
	}
}

func TestMembersBelowAreASubtreeOfAnActiveSessionOnly(t *testing.T) {
	w := newWorld(t, Config{})
	root := w.spawn(initID, 600, alice, "mcptrace", "run", "--session", "s", "--", "x")
	a := w.spawn(root, 601, alice, "npx", "-y", "pkg")
	b := w.spawn(a, 602, alice, "node", "server.js")
	w.spawn(root, 603, alice, "npx", "-y", "other")
	outsider := w.spawn(initID, 700, alice, "outsider")
	s := w.session("s")
	if got := procIDs(w.tr.MembersBelow(s, a)); !slices.Equal(got, []lineage.ID{a, b}) {
		t.Errorf("MembersBelow(wrapper) = %v, want the wrapper and its server", got)
	}
	if got := w.tr.MembersBelow(s, outsider); got != nil {
		t.Errorf("MembersBelow(a process outside the session) = %v, want none", procIDs(got))
	}
	w.exit(root)
	if got := w.tr.MembersBelow(s, a); got != nil {
		t.Errorf("MembersBelow after the session ended = %v, want none", procIDs(got))
	}
}
