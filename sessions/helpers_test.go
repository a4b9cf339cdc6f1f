package sessions

import (
	"errors"
	"log/slog"
	"path"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/mcptrace/mcptrace/internal/testenv"
	"github.com/mcptrace/mcptrace/lineage"
	"github.com/mcptrace/mcptrace/procmatch"
)

// Test times are ns since boot. Starts are deliberately not whole ticks,
// as kernel start times almost never are.
const (
	ms  = uint64(1_000_000)
	sec = 1000 * ms
)

// initID is PID 1 as kernel events name it; the graph is seeded with its
// coarse /proc identity, as the agent does.
var initID = lineage.ID{PID: 1, Start: 5_000_001}

// world is a real lineage graph and a tracker fed the way the agent feeds
// them: every event applied to the graph, then observed.
type world struct {
	t     *testing.T
	g     *lineage.Graph
	tr    *Tracker
	clock uint64
}

func newWorld(t *testing.T, cfg Config) *world {
	t.Helper()
	return newWorldOf(t, lineage.Config{}, cfg)
}

// newWorldOf is newWorld with a graph made with gcfg (its caps).
func newWorldOf(t *testing.T, gcfg lineage.Config, cfg Config) *world {
	t.Helper()
	g := lineage.New(gcfg)
	g.Seed([]lineage.Snapshot{{ID: lineage.ID{PID: 1}, Comm: "systemd", Filename: "/usr/lib/systemd/systemd", Argv: []string{"/sbin/init"}}}, 1)
	tr, err := NewTracker(g, cfg, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	return &world{t: t, g: g, tr: tr, clock: 1 * sec}
}

func testLogger(t *testing.T) *slog.Logger { return testenv.Logger(t, slog.LevelDebug) }

// next returns a fresh event time.
func (w *world) next() uint64 {
	w.clock += 7*ms + 13
	return w.clock
}

func (w *world) observe(ev lineage.Event) []Action {
	w.g.Apply(ev)
	return w.tr.Observe(ev)
}

// forkActs forks pid from creator and returns the new identity and the
// tracker's actions.
func (w *world) forkActs(creator lineage.ID, pid, uid uint32) (lineage.ID, []Action) {
	child := lineage.ID{PID: pid, Start: w.next()}
	acts := w.observe(lineage.Event{Kind: lineage.KindFork, Time: child.Start, Proc: child, Creator: creator, Parent: creator, UID: uid})
	return child, acts
}

// fork forks pid from creator; a fork is expected to end nothing.
func (w *world) fork(creator lineage.ID, pid, uid uint32) lineage.ID {
	w.t.Helper()
	child, acts := w.forkActs(creator, pid, uid)
	if len(acts) > 0 {
		w.t.Fatalf("fork of %d: unexpected actions %v", pid, acts)
	}
	return child
}

// exec makes p exec argv; the filename is argv[0] when absolute, else
// /usr/bin/argv[0].
func (w *world) exec(p lineage.ID, uid uint32, argv ...string) []Action {
	filename := argv[0]
	if !strings.HasPrefix(filename, "/") {
		filename = "/usr/bin/" + filename
	}
	return w.execFile(p, uid, filename, argv...)
}

func (w *world) execFile(p lineage.ID, uid uint32, filename string, argv ...string) []Action {
	return w.observe(lineage.Event{
		Kind: lineage.KindExec, Time: w.next(), Proc: p, UID: uid,
		Comm: procmatch.TruncComm(path.Base(filename)), Filename: filename, Argv: argv,
	})
}

func (w *world) exit(p lineage.ID) []Action {
	return w.observe(lineage.Event{Kind: lineage.KindExit, Time: w.next(), Proc: p})
}

// foldLoop runs another user's (uid 2000) fork-and-exit loop of n links
// below init, each link forking the next and exiting (pids 200 on), and
// fails the test unless the graph folded some of it: a graph made with a
// small lineage.Config.MaxNodes then has folded whatever it may.
func (w *world) foldLoop(n int) {
	w.t.Helper()
	p := w.fork(initID, 200, 2000)
	for i := range n {
		q := w.fork(p, uint32(201+i), 2000)
		w.exit(p)
		p = q
	}
	if w.g.Stats().Folded == 0 {
		w.t.Fatal("nothing folded: the loop no longer reaches the graph's cap")
	}
}

// spawn forks pid from creator and makes it exec argv.
func (w *world) spawn(creator lineage.ID, pid, uid uint32, argv ...string) lineage.ID {
	w.t.Helper()
	p := w.fork(creator, pid, uid)
	if acts := w.exec(p, uid, argv...); len(acts) > 0 {
		w.t.Fatalf("exec of %v: unexpected actions %v", argv, acts)
	}
	return p
}

func (w *world) session(id string) Session {
	w.t.Helper()
	s, ok := w.tr.Find(id)
	if !ok {
		w.t.Fatalf("session %q not found; have %v", id, sessionIDs(w.tr.Sessions()))
	}
	return s
}

// ref names the session with this ID (the one owner that has one).
func (w *world) ref(id string) Ref { w.t.Helper(); return w.session(id).Ref() }

func (w *world) wantState(id string, want State) {
	w.t.Helper()
	if s := w.session(id); s.State != want {
		w.t.Errorf("session %q is %v, want %v", id, s.State, want)
	}
}

func (w *world) wantMembers(id string, want ...lineage.ID) {
	w.t.Helper()
	got := procIDs(w.tr.Members(w.ref(id)))
	if !slices.Equal(got, want) {
		w.t.Errorf("Members(%q) = %v, want %v", id, got, want)
	}
}

func (w *world) wantSessionOf(p lineage.ID, want string) {
	w.t.Helper()
	got, ok := w.tr.SessionOf(p)
	if want == "" && ok || want != "" && got != want {
		w.t.Errorf("SessionOf(%v) = %q, %v; want %q", p, got, ok, want)
	}
}

func procIDs(ps []lineage.Process) []lineage.ID {
	out := make([]lineage.ID, 0, len(ps))
	for _, p := range ps {
		out = append(out, p.ID)
	}
	return out
}

func sessionIDs(ss []Session) []string {
	out := make([]string, 0, len(ss))
	for _, s := range ss {
		out = append(out, s.ID)
	}
	return out
}

// ended lists the sessions the actions end, in order.
// ended names what each action ends: the session's ID, or "ID#N" for
// generation N of a session whose root a marker spared.
func ended(acts []Action) []string {
	out := make([]string, 0, len(acts))
	for _, a := range acts {
		k := a.End.ID
		if a.Generation != 0 {
			k += "#" + strconv.FormatUint(uint64(a.Generation), 10)
		}
		out = append(out, k)
	}
	return out
}

func wantEnded(t *testing.T, acts []Action, want ...string) {
	t.Helper()
	if got := ended(acts); !slices.Equal(got, want) {
		t.Errorf("actions end %v, want %v", got, want)
	}
	for _, a := range acts {
		switch {
		case a.Generation != 0:
			if a.End.State != Active || a.Cutoff == 0 || a.Reason == "" || a.End.Generation != a.Generation+1 {
				t.Errorf("action %+v: a generation action must leave its session active in the next generation, with a cutoff and a reason", a)
			}
		case a.End.State != Ended || a.End.EndReason == "" || a.Reason == "":
			t.Errorf("action %+v: session not marked ended with a reason", a)
		}
	}
}

func wantErr(t *testing.T, err, target error) {
	t.Helper()
	switch {
	case target == nil && err != nil:
		t.Errorf("error %v, want none", err)
	case target != nil && !errors.Is(err, target):
		t.Errorf("error %v, want %v", err, target)
	}
}
