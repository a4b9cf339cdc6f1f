package agenttest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"syscall"
	"testing"
	"time"

	"github.com/mcptrace/mcptrace/api"
	"github.com/mcptrace/mcptrace/internal/testenv"
)

// Process is the real mcptrace binary running as an agent, for tests that
// stop it (SIGTERM, SIGKILL, SIGSTOP) and start it again: its socket, pin
// directory and state directory are private to the test and stay the same
// across restarts, it has no host rules and is narrowed to the test
// binary's subtree. Whatever it pinned is removed when the test ends.
type Process struct {
	t        testing.TB
	Bin      string
	Socket   string
	PinDir   string
	StateDir string
	// HistoryDir is the agent's history.dir, kept across restarts.
	HistoryDir string
	// Args are the flags every start passes after the private ones.
	Args []string

	cmd  *exec.Cmd
	done chan struct{}
	logs testenv.LockedBuffer
}

// StartProcess starts the agent binary with flags and waits until it
// serves.
func StartProcess(t testing.TB, flags ...string) *Process {
	t.Helper()
	testenv.Root(t)
	dir, err := os.MkdirTemp("", "mcptrace-agent-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o755) // tests connect as other users too
	t.Cleanup(func() { os.RemoveAll(dir) })
	p := &Process{
		t:          t,
		Bin:        testenv.Binary(t),
		Socket:     filepath.Join(dir, "mcptrace.sock"),
		PinDir:     PinDir(t),
		StateDir:   filepath.Join(dir, "state"),
		HistoryDir: filepath.Join(dir, "history"),
		Args:       flags,
	}
	t.Cleanup(func() {
		p.Stop(syscall.SIGKILL)
		if t.Failed() {
			t.Logf("agent logs:\n%s", p.Logs())
		}
	})
	p.Start()
	return p
}

// Start starts the agent (again) and waits until it answers on its
// socket. It returns how long that took.
func (p *Process) Start() time.Duration {
	p.t.Helper()
	if p.cmd != nil {
		p.t.Fatal("agent already running")
	}
	args := append([]string{"agent", "--api.socket", p.Socket, "--bpf.pin-dir", p.PinDir, "--state.dir", p.StateDir,
		"--history.dir", p.HistoryDir, "--sessions.default-rules=false", WithinFlag(), "--metrics.listen-address", "127.0.0.1:0"}, p.Args...)
	cmd := exec.Command(p.Bin, args...)
	cmd.Stderr = &p.logs
	start := time.Now()
	if err := cmd.Start(); err != nil {
		p.t.Fatal(err)
	}
	p.cmd, p.done = cmd, make(chan struct{})
	go func() { cmd.Wait(); close(p.done) }()
	client := api.NewClient(p.Socket)
	deadline := time.Now().Add(60 * time.Second)
	for {
		if _, err := client.Status(context.Background()); err == nil {
			return time.Since(start)
		}
		select {
		case <-p.done:
			p.cmd = nil
			p.t.Fatalf("agent exited before serving (%v):\n%s", cmd.ProcessState, p.Logs())
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("agent not serving after 60s:\n%s", p.Logs())
		}
	}
}

// MetricsURL is the URL of the agent's /metrics: test agents listen on
// a free loopback port, which the agent logs when it starts serving.
//
// The agent serves its metrics from a goroutine of their own once it
// serves the API (a taken port must not hold up enforcement), so the line
// may come a moment after it is ready: MetricsURL waits for it, bounded.
// An agent started again (Start) listens on another port: the last
// address logged is the one.
func (p *Process) MetricsURL() string {
	p.t.Helper()
	var m [][]string
	testenv.Eventually(p.t, "the agent's metrics address in its log", func() (bool, string) {
		m = metricsAddr.FindAllStringSubmatch(p.Logs(), -1)
		return m != nil, p.Logs()
	})
	return "http://" + m[len(m)-1][1] + "/metrics"
}

var metricsAddr = regexp.MustCompile(`msg="serving metrics" .*address=(\S+)`)

// Stop sends sig and, unless it is SIGSTOP, waits for the agent to exit.
func (p *Process) Stop(sig syscall.Signal) {
	p.t.Helper()
	if p.cmd == nil {
		return
	}
	p.cmd.Process.Signal(sig)
	if sig == syscall.SIGSTOP {
		return
	}
	if sig != syscall.SIGKILL {
		p.cmd.Process.Signal(syscall.SIGCONT)
	}
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		p.cmd.Process.Kill()
		<-p.done
		p.t.Errorf("agent did not stop within 30s of %v", sig)
	}
	p.cmd = nil
}

// Continue resumes an agent stopped with SIGSTOP.
func (p *Process) Continue() { p.cmd.Process.Signal(syscall.SIGCONT) }

// Client talks to the agent.
func (p *Process) Client() *api.Client { return api.NewClient(p.Socket) }

// PID is the running agent's pid.
func (p *Process) PID() int { return p.cmd.Process.Pid }

// Logs returns what the agent logged so far, over every start.
func (p *Process) Logs() string { return p.logs.String() }

// CLI runs the mcptrace command line against the agent and returns its
// output and error.
func (p *Process) CLI(args ...string) (string, error) {
	cmd := exec.Command(p.Bin, append(args, "--api.socket", p.Socket)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("mcptrace %v: %w", args, err)
	}
	return string(out), nil
}

// CLIAs runs the real CLI as uid against the agent on socket and returns
// its exit code and output.
func CLIAs(t testing.TB, socket string, uid int, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(testenv.Binary(t), append(args, "--api.socket", socket)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)}}
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), string(out)
	} else if err != nil {
		t.Fatalf("run mcptrace as uid %d: %v", uid, err)
	}
	return 0, string(out)
}
