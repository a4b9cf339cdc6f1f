package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mcptrace/mcptrace/enforcer"
	"github.com/mcptrace/mcptrace/internal/testenv"
	"github.com/mcptrace/mcptrace/windows/winproc"
)

// These tests run under wine in CI (scripts/wine-test.sh) and on Windows.

// runHelpers: "leave" starts a "spawn" helper (which starts a "sleep"
// child), waits for the PID file, and exits 7, leaving both behind, as a
// host leaves its servers. "runjob" is `mcptrace run -- <leave-and-stay>`
// in a process of its own, for killing it.
var runHelpers = map[string]func(){
	"leave": func() {
		c := testenv.Helper("spawn")
		c.Env = append(c.Env, testenv.PIDFileVar+"="+os.Getenv(testenv.PIDFileVar))
		if err := c.Start(); err != nil {
			fmt.Fprintln(os.Stderr, "leave: start the spawn helper:", err)
			os.Exit(3)
		}
		for range 500 {
			if b, _ := os.ReadFile(os.Getenv(testenv.PIDFileVar)); len(b) > 0 {
				os.Exit(7)
			}
			time.Sleep(20 * time.Millisecond)
		}
		fmt.Fprintln(os.Stderr, "leave: the spawn helper wrote no PID file in 10 s")
		os.Exit(4)
	},
	"runjob": func() {
		self, _ := os.Executable()
		root := []string{self, "-test.run=^$"}
		os.Setenv(testenv.HelperVar, "spawn")
		err := runInJob(context.Background(), os.Stderr, slog.Default(), enforcer.Config{}, "crash", root)
		os.Exit(map[bool]int{true: 0, false: 5}[err == nil])
	},
}

func TestMain(m *testing.M) {
	helpers := maps.Clone(testenv.WindowsHelpers)
	maps.Copy(helpers, runHelpers)
	testenv.RunHelper(helpers)
	os.Exit(m.Run())
}

// leaverEnv makes the test binary, started by run, the "leave" helper,
// and returns the binary and the file its grandchild's PID goes to.
func leaverEnv(t *testing.T) (self, pidFile string) {
	t.Helper()
	pidFile = filepath.Join(testenv.TempDir(t), "child.pid")
	t.Setenv(testenv.HelperVar, "leave")
	t.Setenv(testenv.PIDFileVar, pidFile)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return self, pidFile
}

// runLeaver runs `mcptrace run -- <leave>` in this process under ec and
// returns the grandchild the root left behind, opened, and what run
// printed.
func runLeaver(t *testing.T, ec enforcer.Config) (*winproc.Handle, error, string) {
	t.Helper()
	self, pidFile := leaverEnv(t)
	var out testenv.LockedBuffer
	ec.SweepTimeout = 20 * time.Second
	runErr := runInJob(context.Background(), &out, testenv.Logger(t, slog.LevelInfo), ec, "run-test", []string{self, "-test.run=^$"})
	// The root exits 7 once its spawn helper wrote the PID file; any
	// other end means no tree was left (its stderr, in the test's log,
	// says why).
	if ee := (exitError{}); !errors.As(runErr, &ee) || ee.code != 7 {
		t.Fatalf("the root (the leave helper) ended with %v, not exit status 7 (3: it could not start its spawn helper; 4: no PID file in 10 s); run printed %q", runErr, out.String())
	}
	grandchild := testenv.SpawnedPID(t, pidFile)
	h, err := winproc.Open(grandchild, 0)
	if errors.Is(err, winproc.ErrGone) {
		return nil, runErr, out.String()
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Terminate(1); h.Close() })
	// Its parent, the spawn helper, too: a helper left running keeps wine
	// from returning until it ends by itself.
	entries, err := winproc.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.PID != grandchild {
			continue
		}
		if ph, err := winproc.Open(e.PPID, 0); err == nil {
			if ph.Create <= h.Create {
				t.Cleanup(func() { ph.Terminate(1); ph.Close() })
			} else {
				ph.Close()
			}
		}
	}
	return h, runErr, out.String()
}

// The root exits, leaving a server and the server's child: run ends both
// through the job and passes on the root's exit status.
func TestRunEndsWhatTheRootLeftAndPassesItsStatusOn(t *testing.T) {
	h, err, out := runLeaver(t, enforcer.Config{Policy: enforcer.PolicyImmediate})
	var ee exitError
	if !errors.As(err, &ee) || ee.code != 7 {
		t.Errorf("run returned %v, want the root's exit status 7", err)
	}
	if h != nil {
		if done, _ := h.Wait(5 * time.Second); !done {
			t.Errorf("the root's grandchild %d still runs after run returned", h.PID)
		}
	}
	if !strings.Contains(out, "session run-test ended: 2 killed") {
		t.Errorf("run printed %q, want 2 killed", out)
	}
}

// In audit mode nothing is ended, and closing the job does not end what
// the audit left either.
func TestRunInAuditModeLeavesTheTreeRunning(t *testing.T) {
	h, _, out := runLeaver(t, enforcer.Config{Mode: enforcer.ModeAudit})
	if h == nil {
		t.Fatal("the root's grandchild is gone after an audit")
	}
	if done, _ := h.Wait(500 * time.Millisecond); done {
		t.Errorf("the grandchild %d exited after an audit-mode run", h.PID)
	}
	if !strings.Contains(out, "2 would be killed (audit)") {
		t.Errorf("run printed %q, want 2 would be killed", out)
	}
}

// mcptrace itself is killed while the root still runs: the kernel closes
// the job and kills the whole tree, with nothing left to run the
// enforcer.
func TestRunKilledMidwayStillEndsTheTree(t *testing.T) {
	pidFile := filepath.Join(testenv.TempDir(t), "child.pid")
	runner := testenv.Helper("runjob")
	runner.Env = append(runner.Env, testenv.PIDFileVar+"="+pidFile)
	if err := runner.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = runner.Process.Kill(); _ = runner.Wait() })
	grandchild := testenv.SpawnedPID(t, pidFile)
	h, err := winproc.Open(grandchild, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if done, _ := h.Wait(200 * time.Millisecond); done {
		t.Fatal("the grandchild exited before mcptrace was killed")
	}
	if err := runner.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	if done, _ := h.Wait(10 * time.Second); !done {
		t.Errorf("the grandchild %d survived the death of the mcptrace run that held its job", grandchild)
	}
}

// Where no agent runs, tree shows a snapshot of the machine: a
// `cmd.exe /c` chain with the server below it and the server's child,
// with the command lines read from each process and secrets redacted.
func TestTreeShowsACmdChainFromASnapshot(t *testing.T) {
	pidFile := filepath.Join(testenv.TempDir(t), "child.pid")
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	root := exec.Command("cmd.exe", "/c", self, "-test.run=^$", "--token=s3cr3t")
	root.Env = append(testenv.HelperEnv("spawn"), testenv.PIDFileVar+"="+pidFile)
	// In a job, so the whole tree ends with the test.
	job, err := winproc.NewJob()
	if err != nil {
		t.Fatal(err)
	}
	defer job.Close()
	rh, err := job.Start(root)
	if err != nil {
		t.Fatal(err)
	}
	rh.Close()
	t.Cleanup(func() { _ = root.Process.Kill(); _ = root.Wait() })
	grandchild := testenv.SpawnedPID(t, pidFile)
	gh, err := winproc.Open(grandchild, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { gh.Terminate(1); gh.Close() }()

	var out, errOut strings.Builder
	cmd := newRoot()
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SetArgs([]string{"tree", strconv.Itoa(root.Process.Pid), "--width", "400", "-v"})
	if err := cmd.Execute(); err != nil {
		t.Fatalf("tree: %v\n%s", err, errOut.String())
	}
	text := out.String()
	t.Logf("tree:\n%s", text)
	lines := strings.Split(strings.TrimSpace(text), "\n")
	if len(lines) < 3 || !strings.Contains(lines[0], "cmd.exe") || !strings.Contains(text, strconv.Itoa(int(grandchild))) {
		t.Errorf("want cmd.exe on top and the grandchild %d below it", grandchild)
	}
	if strings.Contains(text, "s3cr3t") {
		t.Error("a secret in a command line was shown")
	}
	cmd = newRoot()
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SetArgs([]string{"tree", "--session", "s1"})
	if err := cmd.Execute(); err == nil || !strings.Contains(err.Error(), "need the agent") {
		t.Errorf("tree --session on Windows: %v, want it to say it needs the agent", err)
	}
}

// `mcptrace run` from the command line, with the default configuration
// read as the CLI reads it, ends what the root left.
func TestRunFromTheCommandLineEndsWhatTheRootLeft(t *testing.T) {
	self, pidFile := leaverEnv(t)
	var out, errOut strings.Builder
	cmd := newRoot()
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SetArgs([]string{"run", "--session", "cli", "--", self, "-test.run=^$"})
	err := cmd.Execute()
	var ee exitError
	if !errors.As(err, &ee) || ee.code != 7 {
		t.Fatalf("mcptrace run returned %v, want the root's status 7\n%s", err, errOut.String())
	}
	if !strings.Contains(errOut.String(), "session cli ended: 2 killed") {
		t.Errorf("run printed %q", errOut.String())
	}
	grandchild := testenv.SpawnedPID(t, pidFile)
	if h, err := winproc.Open(grandchild, 0); err == nil {
		defer h.Close()
		if done, _ := h.Wait(5 * time.Second); !done {
			h.Terminate(1)
			t.Errorf("the root's grandchild %d still runs", grandchild)
		}
	}
}
