package agent

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/mcptrace/mcptrace/api"
	"github.com/mcptrace/mcptrace/enforcer"
	"github.com/mcptrace/mcptrace/internal/etwtest"
	"github.com/mcptrace/mcptrace/internal/testenv"
	"github.com/mcptrace/mcptrace/lineage"
	"github.com/mcptrace/mcptrace/sessions"
	"github.com/mcptrace/mcptrace/windows/etw"
	"github.com/mcptrace/mcptrace/windows/winproc"
)

// These tests run under wine in CI (scripts/wine-test.sh) and on Windows.
// Wine's ETW delivers no events, so a stand-in session (etwtest) hands the
// agent's sensor the starts and stops of real processes, as ProcessTrace's
// callback would; everything else is the agent as it runs on Windows:
// snapshots, the owners table, the API on a named pipe, the enforcer's
// handles, the state directory.

func TestMain(m *testing.M) {
	testenv.RunHelper(testenv.WindowsHelpers)
	os.Exit(m.Run())
}

// The agent on Windows: a session declared over the named pipe on a
// helper that started a child; when the helper exits, the enforcer ends
// the child through a handle, and a bystander the test started lives on.
// The agent then stops cleanly, writing its state, and the next agent on
// that state knows the session and its end. The metrics count the kill;
// a loss the session reports repairs the graph from a snapshot.
func TestTheAgentEndsWhatASessionRootLeftOnWindows(t *testing.T) {
	dir := testenv.TempDir(t)
	a, src, done, cancel := startWindowsAgent(t, dir)
	h := src.Handler(t, 30*time.Second)
	self, _, err := winproc.Self()
	if err != nil {
		t.Fatal(err)
	}
	// started tells the agent, as ETW would, that process pid started,
	// created by parent.
	started := func(pid int, parent uint32) *winproc.Handle {
		t.Helper()
		hd, err := winproc.Open(uint32(pid), 0)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { hd.Close() })
		h.Start(etw.ProcessStart{ProcessID: hd.PID, CreateTime: hd.Create, ParentProcessID: parent, ImageName: `\Device\HarddiskVolume1\` + filepath.Base(os.Args[0])})
		return hd
	}
	pidFile := filepath.Join(dir, "child.pid")
	root := testenv.Helper("spawn")
	root.Env = append(root.Env, testenv.PIDFileVar+"="+pidFile)
	if err := root.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = root.Process.Kill(); _ = root.Wait() })
	rootH := started(root.Process.Pid, self)
	childPID := testenv.SpawnedPID(t, pidFile)
	childH := started(int(childPID), rootH.PID)
	t.Cleanup(func() { _ = childH.Terminate(1) })
	bystander := testenv.Helper("sleep")
	if err := bystander.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bystander.Process.Kill(); _ = bystander.Wait() })
	byH := started(bystander.Process.Pid, self)

	c := api.NewClient(a.Socket())
	bctx, bcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer bcancel()
	s, err := c.Begin(bctx, rootH.PID, "wine-session")
	if err != nil {
		t.Fatalf("begin a session on the helper over the pipe: %v", err)
	}
	d, err := c.Session(bctx, "wine-session", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("session %+v: %d processes", s, len(d.Processes))
	if len(d.Processes) != 2 {
		t.Errorf("the session has %d processes, want the helper and its child: %+v", len(d.Processes), d.Processes)
	}

	if err := rootH.Terminate(1); err != nil {
		t.Fatal(err)
	}
	if ok, _ := rootH.Wait(10 * time.Second); !ok {
		t.Fatal("the helper did not exit")
	}
	h.Stop(etw.ProcessStop{ProcessID: rootH.PID, CreateTime: rootH.Create, ExitTime: winproc.FiletimeNow(), ExitCode: 1})
	if ok, _ := childH.Wait(20 * time.Second); !ok {
		t.Fatal("the child the session root left is still running 20 s after the root exited")
	}
	if exited, _, _ := byH.Exited(); exited {
		t.Error("the bystander was ended")
	}
	testenv.Eventually(t, "the session's report", func() (bool, string) {
		r, ok := a.SessionReport("wine-session", 0)
		return ok && r.Killed == 1, fmt.Sprintf("%+v", r)
	})
	// A stop ETW lost: the session reports a loss, and the agent repairs
	// the graph from a snapshot, in which that process is gone.
	lost := testenv.Helper("sleep")
	if err := lost.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lost.Process.Kill(); _ = lost.Wait() })
	lostH := started(lost.Process.Pid, self)
	if err := lostH.Terminate(1); err != nil {
		t.Fatal(err)
	}
	if ok, _ := lostH.Wait(10 * time.Second); !ok {
		t.Fatal("the helper whose stop is lost did not exit")
	}
	src.SetLosses(etw.Losses{Events: 1})
	testenv.Eventually(t, "the repair after the session's loss", func() (bool, string) {
		st := a.Status()
		p, ok := a.Graph().Lookup(lostH.PID)
		return st.Lost["unknown"] >= 1 && st.Repairs >= 1 && ok && p.Exited && p.Gaps&lineage.GapNoExit != 0,
			fmt.Sprintf("lost %v, repairs %d, the process %+v (known %v)", st.Lost, st.Repairs, p, ok)
	})

	// The metrics say it too.
	testenv.Eventually(t, "the kill in the metrics", func() (bool, string) {
		resp, err := http.Get("http://" + a.MetricsAddress() + "/metrics")
		if err != nil {
			return false, err.Error()
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return regexp.MustCompile(`(?m)^mcptrace_enforcer_kills_total\{[^}]*reason="root-exit"[^}]*\} 1$`).Match(body), string(body[:min(len(body), 2000)])
	})
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("the agent stopped with %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the agent did not stop within 30 s")
	}

	// A restart forgets nothing: the next agent on the same state knows
	// the session and what its end did.
	b, _, _, _ := startWindowsAgent(t, dir)
	if r, ok := b.SessionReport("wine-session", 0); !ok || r.Killed != 1 {
		t.Errorf("after a restart the session's report is %+v (%v), want its kill", r, ok)
	}
	if _, ok := b.Sessions().Find("wine-session"); !ok {
		t.Error("after a restart the ended session is forgotten")
	}
}

// startWindowsAgent runs an agent on the state in dir, narrowed to this
// test's processes, with a stand-in ETW session, until the test ends, and
// waits until it serves.
func startWindowsAgent(t *testing.T, dir string) (*Agent, *etwtest.Session, <-chan error, context.CancelFunc) {
	t.Helper()
	src := etwtest.New()
	a, err := New(Options{
		Socket:                fmt.Sprintf(`\\.\pipe\mcptrace-agent-test-%d`, os.Getpid()),
		StateDir:              filepath.Join(dir, "state"),
		HistoryDir:            "-",
		ContainerEngineSocket: "-",
		MetricsAddress:        "127.0.0.1:0",
		SampleInterval:        100 * time.Millisecond,
		Sessions:              sessions.Config{WithinPID: uint32(os.Getpid())},
		Enforcer:              enforcer.Config{Mode: enforcer.ModeEnforce, Policy: enforcer.PolicyImmediate},
		ETW:                   src,
		Logger:                testenv.Logger(t, slog.LevelDebug),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx); close(done) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Error("the agent did not stop within 30 s")
		}
	})
	select {
	case <-a.Ready():
	case err := <-done:
		t.Fatalf("the agent stopped: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("the agent did not become ready")
	}
	return a, src, done, cancel
}
