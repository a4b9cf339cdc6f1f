package sessions

import (
	"testing"

	"github.com/mcptrace/mcptrace/lineage"
)

// benchTracker is a graph and a tracker with n active sessions of one uid,
// each the root of `mcptrace run` (distinct IDs) or, with sameTag, of
// `mcptrace exec --session srv` (one tag: IDs srv, srv.2, …), all children
// of one shell, as one user's loop of `mcptrace run -- sleep` makes them.
type benchTracker struct {
	g     *lineage.Graph
	tr    *Tracker
	shell lineage.ID
	clock uint64
	pid   uint32
}

const benchUID = 1000

func newBenchTracker(b *testing.B, n int, sameTag bool) *benchTracker {
	b.Helper()
	g := lineage.New(lineage.Config{})
	g.Seed([]lineage.Snapshot{{ID: lineage.ID{PID: 1}, Comm: "systemd", Filename: "/usr/lib/systemd/systemd", Argv: []string{"/sbin/init"}}}, 1)
	tr, err := NewTracker(g, benchConfig(n+2), nil)
	if err != nil {
		b.Fatal(err)
	}
	w := &benchTracker{g: g, tr: tr, clock: sec, pid: 100}
	w.shell = w.fork(initID)
	// A root with a tag the shell's session would have: a host in one
	// session, as when a user's agent runs the loop.
	w.exec(w.shell, "mcptrace", "run", "--session", "host", "--", "sh")
	for i := 0; i < n; i++ {
		w.begin(sameTag)
	}
	if got := len(tr.Sessions()); got != n+1 {
		b.Fatalf("%d sessions, want %d", got, n+1)
	}
	return w
}

func (w *benchTracker) next() uint64 { w.clock += 7*ms + 13; return w.clock }

func (w *benchTracker) observe(ev lineage.Event) []Action {
	w.g.Apply(ev)
	return w.tr.Observe(ev)
}

func (w *benchTracker) fork(creator lineage.ID) lineage.ID {
	w.pid++
	child := lineage.ID{PID: w.pid, Start: w.next()}
	w.observe(lineage.Event{Kind: lineage.KindFork, Time: child.Start, Proc: child, Creator: creator, Parent: creator, UID: benchUID})
	return child
}

func (w *benchTracker) exec(p lineage.ID, argv ...string) []Action {
	return w.observe(lineage.Event{Kind: lineage.KindExec, Time: w.next(), Proc: p, UID: benchUID,
		Comm: argv[0], Filename: "/usr/bin/" + argv[0], Argv: argv})
}

// begin forks a child of the shell that execs a tag: one more session.
func (w *benchTracker) begin(sameTag bool) lineage.ID {
	p := w.fork(w.shell)
	if sameTag {
		w.exec(p, "mcptrace", "exec", "--session", "srv", "--", "sleep", "300")
	} else {
		w.exec(p, "mcptrace", "run", "--", "sleep", "300")
	}
	return p
}

// benchBegin measures one begin (fork, exec of the tag) and the end of
// that session (its root exits) with n other sessions active.
func benchBegin(b *testing.B, n int, sameTag bool) {
	w := newBenchTracker(b, n, sameTag)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		p := w.begin(sameTag)
		if acts := w.observe(lineage.Event{Kind: lineage.KindExit, Time: w.next(), Proc: p}); len(acts) != 1 {
			b.Fatalf("exit of root %v ended %d sessions, want 1", p, len(acts))
		}
		if i%1024 == 1023 {
			b.StopTimer()
			w.g.Retire(w.clock + uint64(24*3600)*sec)
			b.StartTimer()
		}
	}
}

func BenchmarkBeginWith100Sessions(b *testing.B)   { benchBegin(b, 100, false) }
func BenchmarkBeginWith1000Sessions(b *testing.B)  { benchBegin(b, 1000, false) }
func BenchmarkBeginWith10000Sessions(b *testing.B) { benchBegin(b, 10000, false) }

// The same with one `mcptrace exec` tag: IDs srv, srv.2, … srv.N.
func BenchmarkExecTagWith100Servers(b *testing.B)   { benchBegin(b, 100, true) }
func BenchmarkExecTagWith1000Servers(b *testing.B)  { benchBegin(b, 1000, true) }
func BenchmarkExecTagWith10000Servers(b *testing.B) { benchBegin(b, 10000, true) }

// benchConfig lets one uid hold n sessions (and the host, and the one a round begins).
func benchConfig(n int) Config { return Config{MaxActivePerUID: n} }

// BenchmarkSessionDetailOfADeepChain prices what `GET /v1/sessions/ID`
// asks of the tracker (Members, then Generations) for a session whose
// members are one chain of 2,000 processes, each of which forked the next
// and exited, with a 64-word command line: the shape another user builds
// to make a detail request expensive.
func BenchmarkSessionDetailOfADeepChain(b *testing.B) {
	w := newBenchTracker(b, 0, false)
	argv := append([]string{"node"}, make([]string, 63)...)
	p := w.fork(w.shell)
	for range 2000 {
		w.exec(p, argv...)
		q := w.fork(p)
		w.observe(lineage.Event{Kind: lineage.KindExit, Time: w.next(), Proc: p})
		p = q
	}
	s, ok := w.tr.Find("host")
	if !ok {
		b.Fatal("no session host")
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		members := w.tr.Members(s.Ref())
		if gens := w.tr.Generations(s.Ref(), members); len(gens) != 2002 {
			b.Fatalf("%d generations, want 2002", len(gens))
		}
	}
}

// BenchmarkSessionOfWith10000Sessions measures the lookup the API makes
// for a process (which session it belongs to) with 10,000 sessions active:
// a member two levels below one of them.
func BenchmarkSessionOfWith10000Sessions(b *testing.B) {
	w := newBenchTracker(b, 10000, false)
	root := w.begin(false)
	member := w.fork(w.fork(root))
	want, ok := w.tr.SessionOf(root)
	if !ok {
		b.Fatal("root has no session")
	}
	b.ReportAllocs()
	for b.Loop() {
		if got, ok := w.tr.SessionOf(member); !ok || got != want {
			b.Fatalf("SessionOf(member) = %q, %v; want %q", got, ok, want)
		}
	}
}
