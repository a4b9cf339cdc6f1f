package sessions

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/mcptrace/mcptrace/lineage"
)

// mcpHost is a host under `mcptrace run` that starts server sets through
// wrappers, as the e2e host does: npx → sh -c → node, the wrappers exited.
type mcpHost struct {
	*world
	host lineage.ID
	pid  uint32
}

func newMCPHost(t *testing.T) *mcpHost {
	w := newWorld(t, Config{})
	host := w.spawn(initID, 600, alice, "mcptrace", "run", "--session", "h", "--", "node", "host.mjs")
	w.exec(host, alice, "node", "host.mjs")
	return &mcpHost{world: w, host: host, pid: 1000}
}

// ref names the host's session.
func (h *mcpHost) ref() Ref { return Ref{alice, "h"} }

// serverSet starts npx → sh -c → node server and lets the wrappers exit.
// It returns every process it started, the server last.
func (h *mcpHost) serverSet() []lineage.ID {
	h.t.Helper()
	pid := func() uint32 { h.pid++; return h.pid }
	npx := h.spawn(h.host, pid(), alice, "npx", "--no-install", "@modelcontextprotocol/server-filesystem", "/tmp")
	sh := h.spawn(npx, pid(), alice, "sh", "-c", "mcp-server-filesystem /tmp")
	server := h.spawn(sh, pid(), alice, "node", "/x/mcp-server-filesystem", "/tmp")
	h.exit(sh)
	return []lineage.ID{npx, sh, server}
}

// marker runs `mcptrace mark destroy` as a child of the host.
func (h *mcpHost) marker() (lineage.ID, []Action) {
	h.pid++
	m := h.fork(h.host, h.pid, alice)
	return m, h.exec(m, alice, "mcptrace", "mark", "destroy")
}

func (h *mcpHost) wantMembersBefore(id string, cutoff uint64, want ...lineage.ID) {
	h.t.Helper()
	got := procIDs(h.tr.MembersBefore(h.session(id), cutoff))
	slices.SortFunc(got, cmpID)
	want = slices.Clone(want)
	slices.SortFunc(want, cmpID)
	if !slices.Equal(got, want) {
		h.t.Errorf("MembersBefore(%q) = %v, want %v", id, got, want)
	}
}

func cmpID(a, b lineage.ID) int {
	if a.Start != b.Start {
		if a.Start < b.Start {
			return -1
		}
		return 1
	}
	return int(a.PID) - int(b.PID)
}

func TestDestroyMarkerEndsTheGenerationBelowTheHostAndSparesTheHost(t *testing.T) {
	h := newMCPHost(t)
	set1 := h.serverSet()
	set1b := h.serverSet() // the refresh that abandons the first set
	m1, acts := h.marker()
	wantEnded(t, acts, "h#1")
	a := acts[0]
	if a.Sender != m1 || a.End.Generation != 2 || len(a.End.Markers) != 1 || a.End.Markers[0].Ended != 1 || a.End.Markers[0].Via != "exec" {
		t.Errorf("action = %+v", a)
	}
	h.wantState("h", Active)
	// Everything the host started so far, dead wrappers and the marker
	// process included; never the host.
	h.wantMembersBefore("h", a.Cutoff, append(append(slices.Clone(set1), set1b...), m1)...)

	// Servers started after the marker are the next generation.
	set2 := h.serverSet()
	h.wantMembersBefore("h", a.Cutoff, append(append(slices.Clone(set1), set1b...), m1)...)
	gens := h.tr.Generations(h.ref(), h.tr.Members(h.ref()))
	members := h.tr.Members(h.ref())
	for i, p := range members {
		want := uint32(1)
		switch {
		case p.ID == h.host:
			want = 0
		case slices.Contains(set2, p.ID):
			want = 2
		}
		if gens[i] != want {
			t.Errorf("generation of %v = %d, want %d", p.ID, gens[i], want)
		}
	}

	// A second marker ends generation 2, and what is left of 1.
	m2, acts := h.marker()
	wantEnded(t, acts, "h#2")
	h.wantMembersBefore("h", acts[0].Cutoff, append(append(append(slices.Clone(set1), set1b...), m1), append(slices.Clone(set2), m2)...)...)
	if s := h.session("h"); s.Generation != 3 || len(s.Markers) != 2 {
		t.Errorf("session = %+v", s)
	}
	if st := h.tr.Stats(); st.Generations != 2 || st.MarkersAccepted != 2 {
		t.Errorf("stats = %+v", st)
	}

	// `session end` ends the host too.
	acts, err := h.tr.End(h.host, alice, "h")
	wantErr(t, err, nil)
	wantEnded(t, acts, "h")
	if acts[0].End.EndReason != ReasonSessionEnd {
		t.Errorf("reason %q", acts[0].End.EndReason)
	}
	if m := procIDs(h.tr.Members(h.ref())); len(m) == 0 || m[0] != h.host {
		t.Errorf("members of the ended session %v do not start with the host", m)
	}
}

func TestForkRacingAMarkerIsOrderedByStartTime(t *testing.T) {
	w := newWorld(t, Config{})
	host := w.spawn(initID, 600, alice, "mcptrace", "run", "--session", "h", "--", "host")
	fork := func(pid uint32, start uint64) lineage.ID {
		id := lineage.ID{PID: pid, Start: start}
		w.observe(lineage.Event{Kind: lineage.KindFork, Time: start, Proc: id, Creator: host, Parent: host, UID: alice})
		return id
	}
	const cutoff = 50 * sec
	before := fork(701, cutoff-1)
	at := fork(702, cutoff) // the marker's own instant is the next generation's
	_, res, err := w.tr.Do(Op{Kind: OpMark, At: cutoff, Caller: host, UID: alice, Session: "h"})
	wantErr(t, err, nil)
	wantEnded(t, res.Actions, "h#1")
	// The fork events of children forked around the marker arrive late.
	after := fork(703, cutoff+1)
	grandchild := fork(704, cutoff+5) // forked by the old generation after the marker
	w.observe(lineage.Event{Kind: lineage.KindFork, Time: cutoff + 6, Proc: lineage.ID{PID: 705, Start: cutoff + 6}, Creator: before, Parent: before, UID: alice})
	_ = grandchild
	got := procIDs(w.tr.MembersBefore(w.session("h"), cutoff))
	want := []lineage.ID{before, {PID: 705, Start: cutoff + 6}}
	if !slices.Equal(got, want) {
		t.Errorf("ended by the marker: %v, want %v (child at the marker's instant %v, after it %v and %v stay)", got, want, at, after, grandchild)
	}
}

func TestCoarseStartWithinTheMarkersTickIsLeftToTheNextGeneration(t *testing.T) {
	w := newWorld(t, Config{})
	host := w.spawn(initID, 600, alice, "mcptrace", "run", "--session", "h", "--", "host")
	const cutoff = 50*sec + 4*ms
	tick := uint64(lineage.TickNS)
	// Known from /proc only (a repair after lost events): start to the tick.
	w.g.Repair([]lineage.Snapshot{
		{ID: lineage.ID{PID: 1}, Comm: "systemd"},
		{ID: lineage.ID{PID: 600, Start: host.Start / tick * tick}, PPID: 1, UID: alice},
		{ID: lineage.ID{PID: 801, Start: cutoff / tick * tick}, PPID: 600, UID: alice, Argv: []string{"same-tick"}},
		{ID: lineage.ID{PID: 802, Start: (cutoff/tick - 1) * tick}, PPID: 600, UID: alice, Argv: []string{"tick-before"}},
		{ID: lineage.ID{PID: 803, Start: (cutoff/tick + 1) * tick}, PPID: 600, UID: alice, Argv: []string{"tick-after"}},
	}, 49*sec)
	_, res, err := w.tr.Do(Op{Kind: OpMark, At: cutoff, Caller: host, UID: 0, Session: "h"})
	wantErr(t, err, nil)
	wantEnded(t, res.Actions, "h#1")
	var got []uint32
	for _, p := range w.tr.MembersBefore(w.session("h"), cutoff) {
		got = append(got, p.ID.PID)
	}
	if !slices.Equal(got, []uint32{802}) {
		t.Errorf("ended %v, want only the child whose whole tick precedes the marker (802)", got)
	}
	if st := w.tr.Stats(); st.GenerationUnknown != 1 {
		t.Errorf("generation_unknown = %d, want 1 (pid 801)", st.GenerationUnknown)
	}
}

func TestMarkerDeliveredTwiceRaisesTheGenerationOnce(t *testing.T) {
	h := newMCPHost(t)
	h.serverSet()
	m, acts := h.marker()
	wantEnded(t, acts, "h#1")
	// The CLI's API call after its exec: the same marker.
	_, res, err := h.tr.Do(Op{Kind: OpMark, Caller: m, UID: alice})
	wantErr(t, err, nil)
	if !res.Duplicate || len(res.Actions) != 1 || ended(res.Actions)[0] != "h#1" {
		t.Errorf("API delivery of the exec'd marker: %+v, want a duplicate reporting h#1", res)
	}
	// The same exec event applied again (a journal replay beside the ring).
	p, _ := h.g.Get(m)
	ev := lineage.Event{Kind: lineage.KindExec, Time: p.Current().Time, Proc: m, UID: alice, Argv: p.Current().Argv, Filename: p.Current().Filename}
	if acts := h.tr.Observe(ev); len(acts) != 0 {
		t.Errorf("duplicate exec event ended %v", ended(acts))
	}
	if s := h.session("h"); s.Generation != 2 {
		t.Errorf("generation %d after one marker delivered three times, want 2", s.Generation)
	}
	// A host that calls the API itself twice sends two markers.
	for want := uint32(3); want <= 4; want++ {
		_, res, err := h.tr.Do(Op{Kind: OpMark, At: h.world.next(), Caller: h.host, UID: alice, Session: "h"})
		wantErr(t, err, nil)
		if res.Duplicate || h.session("h").Generation != want {
			t.Errorf("API marker from the host: %+v, generation %d, want %d", res, h.session("h").Generation, want)
		}
	}
	if st := h.tr.Stats(); st.MarkersAccepted != 3 || st.MarkersDuplicate != 2 {
		t.Errorf("stats = %+v, want 3 accepted, 2 duplicates", st)
	}
}

func TestMarkerSparesSessionsOfTheNewGeneration(t *testing.T) {
	h := newMCPHost(t)
	old := h.spawn(h.host, 700, alice, "mcptrace", "run", "--session", "inner-old", "--", "x")
	h.spawn(h.host, 701, alice, "mcptrace", "exec", "--session", "srv-old", "--", "server")
	_, acts := h.marker()
	wantEnded(t, acts, "inner-old", "srv-old", "h#1")
	h.spawn(h.host, 720, alice, "mcptrace", "exec", "--session", "srv-new", "--", "server")
	_, acts = h.marker()
	wantEnded(t, acts, "srv-new", "h#2")
	h.wantState("inner-old", Ended)
	if s := h.session("inner-old"); s.EndReason != ReasonParentEnded || s.Root != old {
		t.Errorf("nested session = %+v", s)
	}
	// A marker naming the sub-session ends the server itself (its root).
	h.spawn(h.host, 730, alice, "mcptrace", "exec", "--session", "srv-3", "--", "server")
	acts, err := h.tr.Mark(h.host, alice, "srv-3")
	wantErr(t, err, nil)
	wantEnded(t, acts, "srv-3")
	h.wantState("h", Active)
}

func TestSessionEndAuthorization(t *testing.T) {
	tests := []struct {
		name string
		uid  uint32
		err  error
	}{
		{"root user", 0, nil},
		{"the owner", alice, nil},
		{"another user finds no such session (IDs are scoped by owner)", bob, ErrNoSession},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newMCPHost(t)
			stranger := h.spawn(initID, 900, tt.uid, "bash")
			acts, err := h.tr.End(stranger, tt.uid, "h")
			wantErr(t, err, tt.err)
			if tt.err == nil {
				wantEnded(t, acts, "h")
			} else {
				wantEnded(t, acts)
				h.wantState("h", Active)
			}
		})
	}
	t.Run("unknown session", func(t *testing.T) {
		h := newMCPHost(t)
		_, err := h.tr.End(h.host, 0, "nope")
		wantErr(t, err, ErrNoSession)
	})
}

func TestTrackerStateRestoresSessionsGenerationsAndMarkers(t *testing.T) {
	h := newMCPHost(t)
	h.serverSet()
	m, _ := h.marker()
	h.serverSet()
	h.spawn(h.host, 1500, alice, "mcptrace", "exec", "--session", "srv", "--", "server")
	gone := h.spawn(initID, 1600, bob, "mcptrace", "run", "--session", "gone", "--", "x")
	h.exit(gone)

	dump := h.tr.Dump()
	b, err := json.Marshal(dump)
	if err != nil {
		t.Fatal(err)
	}
	var back TrackerState
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	tr, err := Restore(h.g, Config{}, testLogger(t), back)
	if err != nil {
		t.Fatal(err)
	}
	if got := tr.Dump(); !reflect.DeepEqual(got, dump) {
		t.Errorf("restored dump differs:\n got %+v\nwant %+v", got, dump)
	}
	if !reflect.DeepEqual(tr.Sessions(), h.tr.Sessions()) || !reflect.DeepEqual(tr.Members(h.ref()), h.tr.Members(h.ref())) {
		t.Error("restored tracker answers differently")
	}
	// The remembered marker still recognises the CLI's API call.
	op := Op{Kind: OpMark, At: h.world.next(), Caller: m, UID: alice}
	for _, x := range []*Tracker{h.tr, tr} {
		_, res, err := x.Do(op)
		if err != nil || !res.Duplicate {
			t.Errorf("API call of the marker after restore: %+v, %v; want a duplicate", res, err)
		}
	}
	// And both go on alike.
	exitAt := h.world.next()
	h.g.Apply(lineage.Event{Kind: lineage.KindExit, Time: exitAt, Proc: h.host})
	for _, x := range []*Tracker{h.tr, tr} {
		x.Observe(lineage.Event{Kind: lineage.KindExit, Time: exitAt, Proc: h.host})
	}
	if !reflect.DeepEqual(tr.Dump(), h.tr.Dump()) {
		t.Error("original and restored trackers differ after the host's exit")
	}
}

// A saved session no tracker could have held is left out, and only it:
// the other sessions of the node are restored.
func TestRestoreLeavesOutImpossibleSessionsOnly(t *testing.T) {
	h := newMCPHost(t)
	h.spawn(h.host, 1400, alice, "mcptrace", "exec", "--session", "other", "--", "server")
	good := h.tr.Dump()
	tests := []struct {
		name   string
		break_ func(s *TrackerState)
		want   []string
	}{
		{"second active session of an ID", func(s *TrackerState) { s.Active = append(s.Active, s.Active[0]) }, []string{"h", "other"}},
		{"active session marked ended", func(s *TrackerState) { s.Active[0].State = Ended }, []string{"other"}},
		{"root pid 1", func(s *TrackerState) { s.Active[0].Root.PID = 1 }, []string{"other"}},
		{"invalid ID", func(s *TrackerState) { s.Active[0].ID = "bad id" }, []string{"other"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, _ := json.Marshal(good)
			var s TrackerState
			json.Unmarshal(b, &s)
			tt.break_(&s)
			tr, err := Restore(h.g, Config{}, nil, s)
			if err != nil {
				t.Fatal(err)
			}
			if got := sessionIDs(tr.Sessions()); !slices.Equal(got, tt.want) {
				t.Errorf("restored %v, want %v", got, tt.want)
			}
		})
	}
}

// The second server of a tag of 128 bytes has an ID of 130: the tracker
// makes it, so a restart must take it back.
func TestRestoreTakesBackTheIDsTheTrackerMakes(t *testing.T) {
	h := newMCPHost(t)
	tag := strings.Repeat("a", 128)
	h.spawn(h.host, 1400, alice, "mcptrace", "exec", "--session", tag, "--", "server")
	h.spawn(h.host, 1401, alice, "mcptrace", "exec", "--session", tag, "--", "server")
	tr, err := Restore(h.g, Config{}, nil, h.tr.Dump())
	if err != nil {
		t.Fatal(err)
	}
	if got := sessionIDs(tr.Sessions()); !slices.Equal(got, []string{"h", tag, tag + ".2"}) {
		t.Errorf("restored %v", got)
	}
}

// An ending addresses one session instance: once session "foo" ended and
// a new one took its ID, the old ending's members are the old ones.
func TestEndingOfAnEndedSessionNeverReachesANewSessionOfItsID(t *testing.T) {
	w := newWorld(t, Config{})
	old := w.spawn(initID, 600, alice, "mcptrace", "run", "--session", "foo", "--", "host")
	oldServer := w.spawn(old, 601, alice, "server")
	acts := w.exit(old)
	wantEnded(t, acts, "foo")
	ended := acts[0].End
	fresh := w.spawn(initID, 700, alice, "mcptrace", "run", "--session", "foo", "--", "host")
	freshServer := w.spawn(fresh, 701, alice, "server")
	if got := procIDs(w.tr.MembersOf(ended)); !slices.Equal(got, []lineage.ID{old, oldServer}) {
		t.Errorf("members of the ended instance %v, want the old root and server", got)
	}
	if got := procIDs(w.tr.MembersOf(w.session("foo"))); !slices.Equal(got, []lineage.ID{fresh, freshServer}) {
		t.Errorf("members of the new instance %v", got)
	}
	if a, b := acts[0].Key(), EndingKey(w.session("foo"), 0); a == b {
		t.Errorf("both instances have the ending key %s", a)
	}
}

// When the tracker no longer remembers a marker's exec (refused markers
// of others cannot push it out, but the table is bounded), the same
// marker's API call is still applied once: at its exec's time, by its
// sender, which the session recognises.
func TestMarkerIsAppliedOnceEvenWhenItsExecIsNoLongerRemembered(t *testing.T) {
	h := newMCPHost(t)
	h.serverSet()
	m, acts := h.marker()
	wantEnded(t, acts, "h#1")
	// Other users' refused markers do not push it out.
	stranger := h.spawn(initID, 2000, bob, "bash")
	for i := 0; i < 2*maxMarkRecords; i++ {
		h.exec(stranger, bob, "mcptrace", "mark", "destroy", "--session", "h")
	}
	if h.tr.findMark(m, mustImage(t, h.g, m).Time) == nil {
		t.Fatal("refused markers pushed the marker's record out")
	}
	// Forgotten anyway (the table is bounded): still one generation.
	h.tr.marks = nil
	fresh := h.serverSet()
	_, res, err := h.tr.Do(Op{Kind: OpMark, At: h.world.next(), Caller: m, UID: alice})
	wantErr(t, err, nil)
	if !res.Duplicate || h.session("h").Generation != 2 {
		t.Errorf("the marker's API call after its record was dropped: %+v, generation %d; want a duplicate, generation 2", res, h.session("h").Generation)
	}
	for _, p := range h.tr.MembersBefore(h.session("h"), h.session("h").Markers[0].At) {
		if slices.Contains(fresh, p.ID) {
			t.Errorf("server %v started after the marker is in what it ends", p.ID)
		}
	}
}

// Sessions ended with their enclosing session's ending carry its key, so
// an enforcer that runs the enclosing ending skips them; a session that
// ends on its own does not.
func TestNestedEndingsNameTheEndingThatCoversThem(t *testing.T) {
	h := newMCPHost(t)
	h.spawn(h.host, 700, alice, "mcptrace", "exec", "--session", "old", "--", "server")
	_, acts := h.marker()
	if len(acts) != 2 || acts[0].Within != acts[1].Key() || acts[1].Within != "" {
		t.Errorf("marker actions %+v: want old within h's generation ending", acts)
	}
	srv := h.spawn(h.host, 710, alice, "mcptrace", "exec", "--session", "new", "--", "server")
	acts = h.exit(srv)
	if len(acts) != 1 || acts[0].Within != "" {
		t.Errorf("a sub-session whose root exits: %+v, want no Within", acts)
	}
	acts = h.exit(h.host)
	if len(acts) != 1 || acts[0].End.ID != "h" {
		t.Fatalf("host exit: %v", ended(acts))
	}
}

func mustImage(t *testing.T, g *lineage.Graph, id lineage.ID) lineage.Image {
	t.Helper()
	p, ok := g.Get(id)
	if !ok {
		t.Fatalf("%v not in the graph", id)
	}
	return p.Current()
}

// State saved by an agent from before IDs were scoped by owner names a
// parent by its ID alone and keys endings "ID@began[#gen]": restored, the
// nesting and the saved reports' keys are found again, nothing lost.
func TestRestoreUpgradesStateFromBeforeOwnerScopedIDs(t *testing.T) {
	h := newMCPHost(t)
	h.spawn(h.host, 1500, alice, "mcptrace", "exec", "--session", "srv", "--", "server")
	gone := h.spawn(initID, 1600, bob, "mcptrace", "run", "--session", "gone", "--", "x")
	h.exit(gone)
	st := h.tr.Dump()
	for i := range st.Active {
		st.Active[i].ParentOwner = 0 // the old state had no parent_owner_uid
	}
	tr, err := Restore(h.g, Config{}, testLogger(t), st)
	if err != nil {
		t.Fatal(err)
	}
	srv, ok := tr.Get(Ref{alice, "srv"})
	if !ok || srv.ParentRef() != (Ref{alice, "h"}) {
		t.Fatalf("restored srv %+v, %v; want it nested in alice's h", srv, ok)
	}
	if acts, err := tr.End(h.host, alice, "h"); err != nil || len(acts) != 2 {
		t.Errorf("ending h ended %v, %v; want srv within it, then h", ended(acts), err)
	}
	g, _ := tr.Get(Ref{bob, "gone"})
	for _, c := range []struct {
		old, want string
		ok        bool
	}{
		{fmt.Sprintf("gone@%d", g.Began), EndingKey(g, 0), true},
		{fmt.Sprintf("h@%d#3", h.session("h").Began), EndingKey(h.session("h"), 3), true},
		{EndingKey(g, 0), EndingKey(g, 0), true},
		{"gone@1", "", false},
		{"gone@x", "", false},
	} {
		if got, ok := tr.UpgradeEndingKey(c.old); got != c.want || ok != c.ok {
			t.Errorf("UpgradeEndingKey(%q) = %q, %v; want %q, %v", c.old, got, ok, c.want, c.ok)
		}
	}
}
