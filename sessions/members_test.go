package sessions

import (
	"fmt"
	"math/rand/v2"
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
