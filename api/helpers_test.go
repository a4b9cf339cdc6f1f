package api

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/mcptrace/mcptrace/enforcer"
	"github.com/mcptrace/mcptrace/lineage"
	"github.com/mcptrace/mcptrace/orphans"
	"github.com/mcptrace/mcptrace/procfs"
	"github.com/mcptrace/mcptrace/sessions"
)

// world is a synthetic node: a graph fed with events, a tracker on it and
// a server answering from both, without a socket.
type world struct {
	t     testing.TB
	g     *lineage.Graph
	tr    *sessions.Tracker
	s     *Server
	clock uint64
}

const (
	sec    = uint64(1e9)
	nobody = 65534
	other  = 1000
)

func newWorld(t testing.TB) *world {
	t.Helper()
	g := lineage.New(lineage.Config{})
	g.Seed([]lineage.Snapshot{{ID: lineage.ID{PID: 1}, Comm: "systemd", Filename: "/usr/lib/systemd/systemd", Argv: []string{"/sbin/init"}}}, 1)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	w := &world{t: t, g: g, clock: sec}
	tr, err := sessions.NewTracker(g, sessions.Config{Now: func() uint64 { return w.clock }}, log)
	if err != nil {
		t.Fatal(err)
	}
	w.tr = tr
	w.s = &Server{
		Graph: g, Sessions: tr, Log: log,
		Do: func(op sessions.Op) (sessions.Result, error) {
			_, res, err := tr.Do(op)
			return res, err
		},
		Now: func() uint64 { return w.clock },
	}
	// Orphans as the agent finds them, on synthetic facts: every process
	// no session owns reads a stdin pipe nobody writes and writes a
	// stdout pipe nobody reads, reparented to init; a claude or codex
	// process is a recognised host.
	w.s.Orphans = func(uid uint32, root bool) (orphans.Found, error) {
		var in orphans.Input
		for i, p := range tr.Unowned(func(p lineage.Process) bool { return root || p.UID == uid }) {
			in.Procs = append(in.Procs, orphans.Proc{Process: p, PPID: 1, FactsOK: true, CutFor: time.Hour, OutCutFor: time.Hour,
				Stdio: procfs.Stdio{InCut: true, OutCut: true, InLocal: true, OutLocal: true},
				Facts: procfs.Facts{Stdin: procfs.StdinPipe, StdinInode: uint64(i + 1), Stdout: procfs.StdinPipe, StdoutInode: uint64(i + 1<<20),
					UIDs: procfs.UIDs{Real: p.UID, Effective: p.UID, Saved: p.UID}, Cgroup: "/user.slice"}})
		}
		in.HostKind = func(p lineage.Process) string {
			if p.Comm == "claude" || p.Comm == "codex" {
				return p.Comm
			}
			return ""
		}
		in.Ancestors = g.Ancestors
		return orphans.Find(in), nil
	}
	// Ending them is the agent's (tested there): here it lists what it
	// would end and ends nothing.
	w.s.EndOrphans = func(_ context.Context, uid uint32, root, _, _ bool) ([]orphans.Orphan, enforcer.Report, error) {
		found, err := w.s.Orphans(uid, root)
		return found.Orphans, enforcer.Report{Session: "(orphans)", Mode: enforcer.ModeAudit}, err
	}
	return w
}

func (w *world) next() uint64 { w.clock += 7e6; return w.clock }

func (w *world) observe(ev lineage.Event) {
	w.g.Apply(ev)
	w.tr.Observe(ev)
}

// spawn forks pid from creator as uid and execs argv in it.
func (w *world) spawn(creator lineage.ID, pid, uid uint32, argv ...string) lineage.ID {
	id := lineage.ID{PID: pid, Start: w.next()}
	w.observe(lineage.Event{Kind: lineage.KindFork, Time: id.Start, Proc: id, Creator: creator, Parent: creator, UID: uid, Comm: "fork"})
	if len(argv) > 0 {
		w.exec(id, uid, argv...)
	}
	return id
}

// exec runs argv in p, now of uid.
func (w *world) exec(p lineage.ID, uid uint32, argv ...string) {
	w.observe(lineage.Event{Kind: lineage.KindExec, Time: w.next(), Proc: p, UID: uid, Comm: argv[0], Filename: "/usr/bin/" + argv[0], Argv: argv})
}

func (w *world) begin(root lineage.ID, id string) sessions.Session {
	w.t.Helper()
	s, err := w.tr.Begin(root, id, sessions.OriginAPI)
	if err != nil {
		w.t.Fatalf("begin %s: %v", id, err)
	}
	return s
}

// request sends a request through the server's handler as c (a caller
// injected as the socket's peer would be) and returns status and body.
func (w *world) request(c Caller, method, target, body string) (int, string) {
	req := httptest.NewRequest(method, "http://mcptrace"+target, strings.NewReader(body))
	req = req.WithContext(context.WithValue(req.Context(), callerKey{}, c))
	rec := httptest.NewRecorder()
	w.s.handler().ServeHTTP(rec, req)
	// JSON escapes < and > in strings; tests look for <redacted>.
	return rec.Code, strings.NewReplacer(`\u003c`, "<", `\u003e`, ">").Replace(rec.Body.String())
}

var init1 = lineage.ID{PID: 1}

func callerOf(p lineage.ID, uid uint32) Caller { return Caller{PID: p.PID, UID: uid} }

func statusOK(code int) bool { return code == http.StatusOK }

// serveUntilDone runs s on l until the test ends, and fails the test if
// Serve ends with an error.
func serveUntilDone(t *testing.T, s *Server, l net.Listener) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, l) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
}
