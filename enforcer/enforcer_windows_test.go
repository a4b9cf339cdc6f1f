package enforcer

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mcptrace/mcptrace/internal/testenv"
	"github.com/mcptrace/mcptrace/lineage"
	"github.com/mcptrace/mcptrace/procmatch"
	"github.com/mcptrace/mcptrace/windows/owners"
	"github.com/mcptrace/mcptrace/windows/winproc"
)

// These tests run under wine in CI (scripts/wine-test.sh) and on Windows:
// real processes, real handles, real TerminateProcess.

func TestMain(m *testing.M) {
	testenv.RunHelper(testenv.WindowsHelpers)
	os.Exit(m.Run())
}

// winTree is a `cmd.exe /c helper` tree the test started: cmd.exe, the
// spawn helper below it and that helper's own child, as a lineage graph
// seeded from a process snapshot.
type winTree struct {
	g          *lineage.Graph
	root       lineage.ID
	grandchild uint32
	handles    []*winproc.Handle // of every process of the tree
}

func startWinTree(t *testing.T, extra ...string) *winTree {
	t.Helper()
	pidFile := filepath.Join(testenv.TempDir(t), "child.pid")
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	root := exec.Command("cmd.exe", append([]string{"/c", self, "-test.run=^$"}, extra...)...)
	root.Env = append(testenv.HelperEnv("spawn"), testenv.PIDFileVar+"="+pidFile)
	if err := root.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = root.Process.Kill(); _ = root.Wait() })
	grandchild := testenv.SpawnedPID(t, pidFile)
	clock, err := winproc.SystemClock()
	if err != nil {
		t.Fatal(err)
	}
	entries, err := winproc.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	g := lineage.New(lineage.Config{})
	g.Seed(winproc.Snapshots(entries, clock, nil), clock.Now()) // owners are read live, from tokens
	rootProc, ok := g.Lookup(uint32(root.Process.Pid))
	if !ok {
		t.Fatalf("cmd.exe %d is not in the snapshot", root.Process.Pid)
	}
	tr := &winTree{g: g, root: rootProc.ID, grandchild: grandchild}
	for _, p := range g.Descendants(rootProc.ID) {
		h, err := winproc.Open(p.ID.PID, 0)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { h.Terminate(1); h.Close() })
		tr.handles = append(tr.handles, h)
	}
	if len(tr.handles) != 3 {
		var names []string
		for _, p := range tr.members() {
			names = append(names, fmt.Sprintf("%d %s %q", p.ID.PID, p.Comm, p.Current().Argv))
		}
		t.Fatalf("the tree has %d processes, want cmd.exe, the helper and its child: %s", len(tr.handles), strings.Join(names, "; "))
	}
	return tr
}

// members is the session's member set: the root and its descendants.
func (tr *winTree) members() []lineage.Process { return tr.g.Descendants(tr.root) }

func (tr *winTree) alive(t *testing.T) int {
	n := 0
	for _, h := range tr.handles {
		if done, _, err := h.Exited(); err != nil {
			t.Fatal(err)
		} else if !done {
			n++
		}
	}
	return n
}

func fastConfig(c Config) Config {
	c.SweepInterval = 20 * time.Millisecond
	if c.SweepTimeout == 0 {
		c.SweepTimeout = 20 * time.Second
	}
	return c
}

func resultsOf(r Report) []string {
	var out []string
	for _, rec := range r.Records {
		out = append(out, rec.Result)
	}
	slices.Sort(out)
	return out
}

// A `cmd.exe /c` tree is ended whole, grandchild included, each member
// through a handle checked against its identity; a process beside it
// lives on.
func TestEndTerminatesACmdTreeAndLeavesABystander(t *testing.T) {
	bystander := testenv.Helper("sleep")
	if err := bystander.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bystander.Process.Kill(); _ = bystander.Wait() })
	tr := startWinTree(t)
	e := New(fastConfig(Config{Policy: PolicyImmediate}), nil, nil)
	r := e.End(context.Background(), Ending{Session: "win", Members: tr.members})
	if r.Killed != 3 || !r.Empty || r.Survivors != 0 {
		t.Fatalf("report %+v, results %v; want 3 killed, empty", r, resultsOf(r))
	}
	for _, rec := range r.Records {
		if rec.Signal != SignalTerminate || rec.Latency <= 0 {
			t.Errorf("record %+v: want %s and an observed death", rec, SignalTerminate)
		}
	}
	if n := tr.alive(t); n != 0 {
		t.Errorf("%d members of the tree still run", n)
	}
	bh, err := winproc.Open(uint32(bystander.Process.Pid), 0)
	if err != nil {
		t.Fatalf("the bystander is gone: %v", err)
	}
	defer bh.Close()
	if done, _, _ := bh.Exited(); done {
		t.Error("the bystander was ended")
	}
}

// A member whose PID now names a process created at another time is not
// that member: it is refused, and the process lives on.
func TestEndRefusesAPIDThatNamesAnotherProcess(t *testing.T) {
	tr := startWinTree(t)
	p, _ := tr.g.Lookup(tr.grandchild)
	stale := p
	stale.ID.Start -= uint64(time.Second)
	e := New(fastConfig(Config{Policy: PolicyImmediate}), nil, nil)
	r := e.End(context.Background(), Ending{Session: "stale", Members: func() []lineage.Process { return []lineage.Process{stale} }})
	if r.Refused != 1 || r.Killed != 0 || !strings.Contains(r.Records[0].Result, "identity mismatch") {
		t.Fatalf("report %+v, results %v; want the stale identity refused", r, resultsOf(r))
	}
	if n := tr.alive(t); n != 3 {
		t.Errorf("%d of 3 processes alive after a refusal", n)
	}
}

// A spare rule spares the member it matches (by its command line here)
// and nothing else; a session owned by another user spares every member
// across the privilege boundary; audit mode ends nothing.
func TestEndSparesByRuleByOwnerAndInAudit(t *testing.T) {
	t.Run("spare rule", func(t *testing.T) {
		tr := startWinTree(t, "--spare-me")
		// The helper below cmd.exe, not cmd.exe, whose command line
		// names it too.
		rule := procmatch.Rule{Name: "keep", Argv: procmatch.Patterns{`--spare-me$`}, Not: procmatch.Patterns{`^cmd\.exe `}}
		e := New(fastConfig(Config{Policy: PolicyImmediate, Spare: []procmatch.Rule{rule}}), nil, nil)
		r := e.End(context.Background(), Ending{Session: "spare", Members: tr.members})
		if r.Spared != 1 || r.Killed != 2 || !r.Empty {
			t.Fatalf("report %+v, results %v; want the helper spared, 2 killed", r, resultsOf(r))
		}
		if n := tr.alive(t); n != 1 {
			t.Errorf("%d alive, want the spared helper only", n)
		}
	})
	t.Run("another owner", func(t *testing.T) {
		tr := startWinTree(t)
		// Under wine every process is an elevated administrator's: root.
		// A session of another owner ends none of them, nor one with no
		// owner table to tell.
		tab, _ := owners.Load("")
		owner := func(tok owners.Token) uint32 { uid, _ := tab.Owner(tok); return uid }
		e := New(fastConfig(Config{Policy: PolicyImmediate, Owner: owner}), nil, nil)
		r := e.End(context.Background(), Ending{Session: "other", Owner: owners.FirstUID + 7, Members: tr.members})
		if r.SparedPrivilege != 3 || r.Killed != 0 {
			t.Fatalf("report %+v, results %v; want all 3 spared across the privilege boundary", r, resultsOf(r))
		}
		if n := tr.alive(t); n != 3 {
			t.Errorf("%d of 3 alive", n)
		}
	})
	t.Run("audit", func(t *testing.T) {
		tr := startWinTree(t)
		e := New(fastConfig(Config{Mode: ModeAudit}), nil, nil)
		r := e.End(context.Background(), Ending{Session: "audit", Members: tr.members})
		if r.WouldKill != 3 || r.Killed != 0 {
			t.Fatalf("report %+v, results %v; want 3 would-kill", r, resultsOf(r))
		}
		if n := tr.alive(t); n != 3 {
			t.Errorf("%d of 3 alive after an audit", n)
		}
	})
}

// Under the graceful policy members get the grace to exit on their own;
// those that do not are terminated when it has passed, not before.
func TestEndWaitsTheGraceThenTerminates(t *testing.T) {
	tr := startWinTree(t)
	grace := 600 * time.Millisecond
	e := New(fastConfig(Config{Policy: PolicyGraceful, Grace: grace}), nil, nil)
	r := e.End(context.Background(), Ending{Session: "grace", Members: tr.members})
	if r.Killed != 3 || !r.Empty {
		t.Fatalf("report %+v, results %v; want 3 killed", r, resultsOf(r))
	}
	for _, rec := range r.Records {
		if rec.Latency < grace {
			t.Errorf("pid %d ended %v after the session's end, before the grace of %v passed", rec.Process.PID, rec.Latency, grace)
		}
	}
}
