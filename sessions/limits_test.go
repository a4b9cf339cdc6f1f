package sessions

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/mcptrace/mcptrace/lineage"
)

// A root-owned host that runs tools as per-tenant uids: a tenant's tool,
// a child of the root, does not end the host's session with a marker
// without --session; root and the owner's uid do.
func TestDestroyMarkerWithoutSessionNeedsRootOrTheOwnersUID(t *testing.T) {
	tests := []struct {
		name      string
		hostUID   uint32
		callerUID uint32
		allowed   bool
	}{
		{"a tenant's tool under a root-owned host is refused", 0, alice, false},
		{"another user's tool under a user's host is refused", alice, bob, false},
		{"a root child of a root-owned host is allowed", 0, 0, true},
		{"the owner's child is allowed", alice, alice, true},
		{"root under a user's host is allowed", alice, 0, true},
	}
	for _, tt := range tests {
		for _, via := range []string{"exec", "api"} {
			t.Run(tt.name+" via "+via, func(t *testing.T) {
				w := newWorld(t, Config{})
				host := w.spawn(initID, 600, tt.hostUID, "mcptrace", "run", "--session", "gw", "--", "gateway")
				server := w.spawn(host, 601, tt.hostUID, "other-tenants-server")
				tool := w.fork(host, 700, tt.callerUID)
				var acts []Action
				var err error
				if via == "exec" {
					acts = w.exec(tool, tt.callerUID, "mcptrace", "mark", "destroy")
				} else {
					w.exec(tool, tt.callerUID, "sh", "-c", "mcptrace mark destroy")
					acts, err = w.tr.Mark(tool, tt.callerUID, "")
				}
				st := w.tr.Stats()
				if tt.allowed {
					wantErr(t, err, nil)
					wantEnded(t, acts, "gw#1")
					return
				}
				wantEnded(t, acts)
				if via == "api" {
					// Answered as absence: the caller learns nothing
					// about the session it may not end.
					wantErr(t, err, ErrNoSession)
					if err != nil && (strings.Contains(err.Error(), "gw") || strings.Contains(err.Error(), "owner")) {
						t.Errorf("refusal %q tells the caller about the session", err)
					}
				}
				if st.MarkersRefused != 1 || st.MarkersAccepted != 0 {
					t.Errorf("stats %+v, want one refusal", st)
				}
				w.wantState("gw", Active)
				if s := w.session("gw"); s.Generation != 1 {
					t.Errorf("generation %d, want 1: the marker ended the host's servers", s.Generation)
				}
				w.wantSessionOf(server, "gw")
			})
		}
	}
}

func TestActiveSessionsPerUIDAreCapped(t *testing.T) {
	w := newWorld(t, Config{MaxActivePerUID: 3})
	var roots []lineage.ID
	for i := range 3 {
		roots = append(roots, w.spawn(initID, uint32(600+i), alice, "mcptrace", "run", "--", "agent"))
	}
	t.Run("a tag over the cap declares nothing and is counted", func(t *testing.T) {
		p := w.spawn(initID, 610, alice, "mcptrace", "run", "--session", "fourth", "--", "agent")
		if _, ok := w.tr.Find("fourth"); ok {
			t.Fatal("a fourth session of alice began")
		}
		w.wantSessionOf(p, "")
		if st := w.tr.Stats(); st.RefusedOverCap != 1 || st.TagsRefused != 1 || st.Active != 3 {
			t.Errorf("stats %+v", st)
		}
	})
	t.Run("the CLI asking for its refused tag is told why, counted once", func(t *testing.T) {
		p, _ := w.tr.g.Lookup(610)
		_, err := w.tr.Begin(p.ID, "fourth", OriginAPI)
		wantErr(t, err, ErrTooManySessions)
		if st := w.tr.Stats(); st.RefusedOverCap != 1 || st.TagsRefused != 1 {
			t.Errorf("stats %+v: the refusal was counted again", st)
		}
	})
	t.Run("Begin over the cap says why", func(t *testing.T) {
		p := w.spawn(initID, 611, alice, "agent")
		_, err := w.tr.Begin(p, "", "")
		wantErr(t, err, ErrTooManySessions)
		if err == nil || !strings.Contains(err.Error(), "sessions.max-active-per-uid") || !strings.Contains(err.Error(), "uid 1000 has 3") {
			t.Errorf("error %v does not explain the cap", err)
		}
	})
	t.Run("another uid is not affected", func(t *testing.T) {
		w.spawn(initID, 620, bob, "mcptrace", "run", "--session", "bobs", "--", "agent")
		w.wantState("bobs", Active)
	})
	t.Run("a session that ends makes room", func(t *testing.T) {
		w.exit(roots[0])
		w.spawn(initID, 630, alice, "mcptrace", "run", "--session", "again", "--", "agent")
		w.wantState("again", Active)
	})
}

// Tags are scoped by owner: another user's `work` or `exec` tag never
// refuses or captures the owner's own.
func TestTagsAreScopedByOwner(t *testing.T) {
	w := newWorld(t, Config{})
	// bob squats first.
	bobRun := w.spawn(initID, 500, bob, "mcptrace", "run", "--session", "work", "--", "sleep")
	bobSrv := w.spawn(bobRun, 501, bob, "mcptrace", "exec", "--session", "srv", "--", "sleep")
	aliceRun := w.spawn(initID, 600, alice, "mcptrace", "run", "--session", "work", "--", "agent")
	aliceSrv := w.spawn(aliceRun, 601, alice, "mcptrace", "exec", "--session", "srv", "--", "server")
	if st := w.tr.Stats(); st.TagsRefused != 0 {
		t.Fatalf("a tag was refused: %+v", st)
	}
	byRoot := map[lineage.ID]Session{}
	for _, s := range w.tr.Sessions() {
		byRoot[s.Root] = s
	}
	for _, c := range []struct {
		root lineage.ID
		tag  string
		uid  uint32
	}{{bobRun, "work", bob}, {bobSrv, "srv", bob}, {aliceRun, "work", alice}, {aliceSrv, "srv", alice}} {
		s, ok := byRoot[c.root]
		if !ok || s.Tag != c.tag || s.Owner != c.uid || s.State != Active {
			t.Errorf("session of %v = %+v, %v; want an active %q of uid %d", c.root, s, ok, c.tag, c.uid)
		}
	}
	t.Run("the same owner's tag still refuses a second run", func(t *testing.T) {
		w.spawn(initID, 610, alice, "mcptrace", "run", "--session", "work", "--", "agent")
		if st := w.tr.Stats(); st.TagsRefused != 1 {
			t.Errorf("stats %+v, want one refused tag", st)
		}
	})
	t.Run("run asks, before it execs, whether its tag was taken", func(t *testing.T) {
		s, err := w.tr.Begin(aliceRun, "work", OriginAPI)
		if err != nil || s.Root != aliceRun {
			t.Errorf("Begin on the run's own root = %+v, %v; want its session", s, err)
		}
	})
	// Dump and restore: the index of tags by owner is rebuilt.
	tr, err := Restore(w.g, Config{}, testLogger(t), w.tr.Dump())
	if err != nil {
		t.Fatal(err)
	}
	w.tr = tr
	t.Run("the owner's marker names its own tag", func(t *testing.T) {
		marker := w.fork(aliceRun, 602, alice)
		acts := w.exec(marker, alice, "mcptrace", "mark", "destroy", "--session", "srv")
		if len(acts) != 1 || acts[0].End.Root != aliceSrv {
			t.Fatalf("alice's marker for srv ended %v, want alice's srv only", ended(acts))
		}
		if st := w.tr.Stats(); st.MarkersRefused != 0 {
			t.Errorf("stats %+v", st)
		}
		if s := byRoot[bobSrv]; !isActive(w.tr, s.ID) {
			t.Errorf("bob's srv %q ended", s.ID)
		}
	})
	t.Run("another user's session of the same ID is never named", func(t *testing.T) {
		// Alice's own srv has ended; bob's srv has the same ID.
		bobs := byRoot[bobSrv].ID
		acts, err := w.tr.Mark(w.spawn(initID, 700, alice, "sh"), alice, bobs)
		if err != nil || len(acts) != 0 {
			t.Errorf("alice's marker for %q: %v, %v; want nothing (her own srv already ended)", bobs, ended(acts), err)
		}
		owner := bob
		if _, err := w.tr.Mark(w.spawn(initID, 701, alice, "sh"), alice, bobs); err != nil {
			t.Fatal(err)
		}
		if _, _, err := w.tr.Do(Op{Kind: OpMark, Caller: w.spawn(initID, 702, alice, "sh"), UID: alice, Session: bobs, Owner: &owner}); !errors.Is(err, ErrNotAuthorized) {
			t.Errorf("alice's marker for bob's %q: %v, want it refused", bobs, err)
		}
		if s, ok := w.tr.Get(Ref{bob, bobs}); !ok || s.State != Active {
			t.Errorf("bob's session %q ended", bobs)
		}
	})
}

func isActive(tr *Tracker, id string) bool {
	s, ok := tr.Find(id)
	return ok && s.State == Active
}

// One uid's churn (`mcptrace run -- true` in a loop) never evicts another
// uid's ended sessions: per owner quotas, and at the node cap the owner
// holding the most loses its oldest.
func TestEndedSessionsAreKeptPerOwner(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
	}{
		{"per-owner quota", Config{MaxEndedPerUID: 3, MaxEnded: 100}},
		{"node cap", Config{MaxEndedPerUID: 1000, MaxEnded: 4}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t, tc.cfg)
			for i := range 2 {
				w.exit(w.spawn(initID, uint32(600+i), alice, "mcptrace", "run", "--session", fmt.Sprintf("alice-%d", i), "--", "agent"))
			}
			for i := range 50 {
				w.exit(w.spawn(initID, uint32(1000+i), bob, "mcptrace", "run", "--", "true"))
			}
			for i := range 2 {
				w.wantState(fmt.Sprintf("alice-%d", i), Ended)
			}
			bobs := 0
			for _, s := range w.tr.Sessions() {
				if s.Owner == bob {
					bobs++
				}
			}
			if limit := min(tc.cfg.MaxEndedPerUID, tc.cfg.MaxEnded-2); bobs != limit {
				t.Errorf("bob has %d ended sessions retained, want %d", bobs, limit)
			}
			if st := w.tr.Stats(); st.DroppedOverQuota != uint64(50-bobs) || st.Dropped != st.DroppedOverQuota {
				t.Errorf("stats %+v", st)
			}
		})
	}
}

// lockedBuf is a log sink tests read.
type lockedBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// A user's churn does not flood the agent's log with per-session lines,
// nor hold back another user's.
func TestPerSessionLogsAreRateLimitedPerOwner(t *testing.T) {
	w := newWorld(t, Config{})
	var buf lockedBuf
	w.tr.SetLogger(slog.New(slog.NewTextHandler(&buf, nil)))
	const churn = 500
	for i := range churn {
		w.exit(w.spawn(initID, uint32(1000+i), bob, "mcptrace", "run", "--", "true"))
	}
	w.spawn(initID, 600, alice, "mcptrace", "run", "--session", "alices", "--", "agent")
	logs := buf.String()
	bobLines := strings.Count(logs, "owner_uid=1001")
	// 1000 lines unlimited; the clock of the churn advances about 14 ms
	// per session, 7 s in all: a burst of 20 and one per second.
	if bobLines > logBurst+10 {
		t.Errorf("%d per-session log lines for bob's %d sessions, want at most %d", bobLines, churn, logBurst+10)
	}
	if !strings.Contains(logs, "session=alices") {
		t.Error("alice's session began unlogged: another user's churn held it back")
	}
	if st := w.tr.Stats(); st.LogsSuppressed == 0 || st.LogsSuppressed+uint64(bobLines) != 2*churn {
		t.Errorf("logs suppressed %d, logged %d, want %d in all", st.LogsSuppressed, bobLines, 2*churn)
	}
	if !strings.Contains(logs, "held_back_logs=") {
		t.Error("no log says how many were held back")
	}
}

// Session IDs are scoped by owner: what another user's sessions are
// called never changes the ID a user's session gets, so nobody learns
// from an ID whether someone else holds it, and nobody can take a host's
// predictable ID (`claude-PID`, a known tag) before it starts.
func TestSessionIDsAreScopedByOwner(t *testing.T) {
	w := newWorld(t, Config{Rules: []Rule{{Name: "claude", Comm: []string{"claude"}}}})
	// bob squats alice's tag, her host's future rule ID and an exec tag.
	bobHost := w.spawn(initID, 500, bob, "mcptrace", "run", "--session", "work", "--", "sleep")
	if _, err := w.tr.Begin(w.spawn(bobHost, 501, bob, "sleep"), "claude-4242", OriginAPI); err != nil {
		t.Fatal(err)
	}
	w.spawn(bobHost, 502, bob, "mcptrace", "exec", "--session", "srv", "--", "sleep")
	w.spawn(bobHost, 503, bob, "mcptrace", "exec", "--session", "srv", "--", "sleep")

	aliceRun := w.spawn(initID, 600, alice, "mcptrace", "run", "--session", "work", "--", "agent")
	claude := w.spawn(initID, 4242, alice, "claude")
	aliceSrv := w.spawn(aliceRun, 601, alice, "mcptrace", "exec", "--session", "srv", "--", "server")
	aliceSrv2 := w.spawn(aliceRun, 602, alice, "mcptrace", "exec", "--session", "srv", "--", "server")
	for _, c := range []struct {
		name string
		root lineage.ID
		want string
	}{
		{"a tag another user holds", aliceRun, "work"},
		{"a rule ID another user took first", claude, "claude-4242"},
		{"an exec tag another user holds twice", aliceSrv, "srv"},
		{"the owner's own second server of a tag", aliceSrv2, "srv.2"},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, ok := w.tr.Get(Ref{alice, c.want})
			if !ok || s.Root != c.root || s.State != Active {
				t.Errorf("alice's %q = %+v, %v; want the active session rooted at %v", c.want, s, ok, c.root)
			}
		})
	}
	t.Run("the parent link names the owner too", func(t *testing.T) {
		s, _ := w.tr.Get(Ref{alice, "srv"})
		if s.ParentRef() != (Ref{alice, "work"}) {
			t.Errorf("alice's srv is nested in %v, want alice's work", s.ParentRef())
		}
	})
	t.Run("each user names its own", func(t *testing.T) {
		for _, c := range []struct {
			uid  uint32
			root lineage.ID
		}{{alice, aliceRun}, {bob, bobHost}} {
			s, err := w.tr.Resolve(c.uid, "work", nil)
			if err != nil || s.Root != c.root {
				t.Errorf("uid %d's work = %v, %v; want the session rooted at %v", c.uid, s.Root, err, c.root)
			}
		}
	})
	t.Run("root without an owner is told whose", func(t *testing.T) {
		_, err := w.tr.Resolve(0, "work", nil)
		if !errors.Is(err, ErrAmbiguous) || !strings.Contains(err.Error(), "uids 1000, 1001") || !strings.Contains(err.Error(), "--owner") {
			t.Errorf("root's work: %v, want ErrAmbiguous naming uids 1000 and 1001 and --owner", err)
		}
		owner := bob
		if s, err := w.tr.Resolve(0, "work", &owner); err != nil || s.Root != bobHost {
			t.Errorf("root's work of uid %d = %v, %v", bob, s.Root, err)
		}
		if _, err := w.tr.End(initID, 0, "work"); !errors.Is(err, ErrAmbiguous) {
			t.Errorf("root ending an ambiguous work: %v, want ErrAmbiguous", err)
		}
	})
	t.Run("a marker ends its sender's own session only", func(t *testing.T) {
		marker := w.fork(aliceRun, 603, alice)
		acts := w.exec(marker, alice, "mcptrace", "mark", "destroy", "--session", "srv")
		if len(acts) != 2 || acts[0].End.Owner != alice || acts[1].End.Owner != alice {
			t.Fatalf("alice's marker for srv ended %v, want her two servers", ended(acts))
		}
		if s, ok := w.tr.Get(Ref{bob, "srv"}); !ok || s.State != Active {
			t.Errorf("bob's srv: %+v, %v", s, ok)
		}
	})
	t.Run("an ending key names the owner", func(t *testing.T) {
		a, _ := w.tr.Get(Ref{alice, "work"})
		b, _ := w.tr.Get(Ref{bob, "work"})
		a.Began = b.Began // even two sessions begun at the same instant
		if EndingKey(a, 0) == EndingKey(b, 0) {
			t.Errorf("alice's and bob's work share the ending key %q", EndingKey(a, 0))
		}
	})
}

// A tag refused at its exec is counted and logged once: a Scan (a repair
// after lost events, a restart) while the refused `mcptrace run` still
// runs does not refuse it again. Seen on the 7.2 guest, where the kernel
// skips programs and the agent rescans: "refusals over the cap 2, want 1".
func TestTagRefusedAtExecIsNotRefusedAgainByScan(t *testing.T) {
	w := newWorld(t, Config{MaxActivePerUID: 1})
	w.spawn(initID, 600, alice, "mcptrace", "run", "--session", "first", "--", "agent")
	w.spawn(initID, 610, alice, "mcptrace", "run", "--session", "second", "--", "agent")
	if st := w.tr.Stats(); st.TagsRefused != 1 || st.RefusedOverCap != 1 {
		t.Fatalf("after the exec: %+v, want one refusal over the cap", st)
	}
	for range 3 {
		w.tr.Scan()
	}
	if st := w.tr.Stats(); st.TagsRefused != 1 || st.RefusedOverCap != 1 {
		t.Errorf("after three Scans: refused %d, over the cap %d; want 1 and 1", st.TagsRefused, st.RefusedOverCap)
	}
}
