package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/mcptrace/mcptrace/api"
)

// agentDirs are an agent's private places: a restart reuses them.
type agentDirs struct {
	pinDir   string
	stateDir string
	// historyDir is on disk, as the default history.dir is.
	historyDir string
	socket     string
}

// newAgentDirs returns fresh private places under tmp (the state under
// shm, on tmpfs), numbered n.
func newAgentDirs(tmp, shm string, n int) agentDirs {
	name := fmt.Sprintf("agent%d", n)
	return agentDirs{
		pinDir:     fmt.Sprintf("/sys/fs/bpf/mcptrace-bench-%d-%d", os.Getpid(), n),
		stateDir:   filepath.Join(shm, name, "state"),
		historyDir: filepath.Join(tmp, name, "history"),
		socket:     filepath.Join(tmp, name, "api.sock"),
	}
}

// agentProc is a running agent the bench started.
type agentProc struct {
	b       *bench
	dirs    agentDirs
	cmd     *exec.Cmd
	log     string
	client  *api.Client
	done    chan error
	started time.Time
	// serving is the time from exec to the first status answer.
	serving time.Duration
	// sessions are `mcptrace run` roots the bench started under it.
	sessions []*exec.Cmd
	// progIDs are the programs it attached, checked gone after close.
	progIDs []uint32
}

// startAgent starts bin/mcptrace agent, narrowed to the bench's subtree,
// with extra flags, and waits until it answers a status request.
func (b *bench) startAgent(ctx context.Context, dirs agentDirs, extra ...string) (*agentProc, error) {
	if err := os.MkdirAll(filepath.Dir(dirs.socket), 0o755); err != nil {
		return nil, err
	}
	b.agents++
	a := &agentProc{b: b, dirs: dirs, log: filepath.Join(filepath.Dir(dirs.socket), fmt.Sprintf("agent-%d.log", b.agents)), done: make(chan error, 1)}
	logf, err := os.Create(a.log)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	args := []string{"agent",
		"--sessions.within-pid", strconv.Itoa(os.Getpid()),
		"--sessions.default-rules=false",
		"--bpf.pin-dir", dirs.pinDir,
		"--state.dir", dirs.stateDir,
		"--history.dir", dirs.historyDir,
		"--api.socket", dirs.socket,
		"--log.level", b.agentLogLevel,
		// Metrics on, as by default, on a port of their own.
		"--metrics.listen-address", "127.0.0.1:0",
		// The private engine's socket (or one standing in for it), so
		// the container request reader is attached, as on a node with
		// Docker (extra may turn it off: the last value given wins).
		"--containers.engine-socket", b.engineSocket(),
	}
	args = append(args, extra...)
	a.cmd = exec.Command(b.mcptrace, args...)
	a.cmd.Stdout, a.cmd.Stderr = logf, logf
	a.started = time.Now()
	if err := a.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start agent: %w", err)
	}
	go func() { a.done <- a.cmd.Wait() }()
	a.client = api.NewClient(dirs.socket)
	deadline := time.Now().Add(5 * time.Minute)
	for {
		sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := a.client.Status(sctx)
		cancel()
		if err == nil {
			a.serving = time.Since(a.started)
			if a.progIDs, err = agentProgIDs(ctx, dirs.pinDir); err != nil {
				a.close()
				return nil, err
			}
			return a, nil
		}
		select {
		case werr := <-a.done:
			a.done <- werr
			_ = b.uninstall(dirs) // what it may have attached
			return nil, fmt.Errorf("agent exited before serving (%v): %s", werr, tail(a.log, 10))
		default:
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			a.close()
			return nil, fmt.Errorf("agent not serving after %s: %v: %s", time.Since(a.started).Round(time.Second), err, tail(a.log, 10))
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// status returns the agent's status.
func (a *agentProc) status(ctx context.Context) (api.Status, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	st, err := a.client.Status(ctx)
	if err != nil {
		return st, fmt.Errorf("agent status: %w", err)
	}
	return st, nil
}

// runSession starts `mcptrace run --session id -- argv…` as a child: the
// returned process is the session's root (run execs argv in place).
func (a *agentProc) runSession(id string, argv ...string) (*exec.Cmd, error) {
	args := append([]string{"run", "--session", id, "--api.socket", a.dirs.socket, "--"}, argv...)
	cmd := exec.Command(a.b.mcptrace, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("mcptrace run %s: %w", id, err)
	}
	a.sessions = append(a.sessions, cmd)
	return cmd, nil
}

// stop ends the agent with SIGTERM (SIGKILL after 60 s) and waits for it;
// sessions it started are left to the caller (see close).
func (a *agentProc) stop() error {
	if a.cmd.Process == nil {
		return nil
	}
	_ = a.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-a.done:
		a.done <- err
		return nil
	case <-time.After(60 * time.Second):
		_ = a.cmd.Process.Kill()
		err := <-a.done
		a.done <- err
		return fmt.Errorf("agent did not stop on SIGTERM within 60 s: killed")
	}
}

// close stops the agent, kills the session roots it started (they are the
// bench's children), and uninstalls the agent's pins and state so no
// program stays attached.
func (a *agentProc) close() error {
	err := a.stop()
	for _, s := range a.sessions {
		if s.Process != nil {
			_ = s.Process.Kill()
			_, _ = s.Process.Wait()
		}
	}
	a.sessions = nil
	if err := errors.Join(err, a.b.uninstall(a.dirs)); err != nil {
		return err
	}
	// A program left attached would falsify every later baseline. The
	// kernel frees a detached program once its last reference goes, which
	// may take a moment.
	var left []string
	for end := time.Now().Add(5 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		ps, err := progs(context.Background())
		if err != nil {
			return err
		}
		left = left[:0]
		for _, id := range a.progIDs {
			if p, ok := ps[id]; ok {
				left = append(left, fmt.Sprintf("%d %s", id, p.Name))
			}
		}
		if len(left) == 0 || time.Now().After(end) {
			break
		}
	}
	if len(left) > 0 {
		return fmt.Errorf("programs of a stopped agent still loaded after mcptrace uninstall --bpf.pin-dir %s: %s", a.dirs.pinDir, strings.Join(left, ", "))
	}
	return nil
}

// uninstall detaches and unpins what an agent left under dirs.
func (b *bench) uninstall(dirs agentDirs) error {
	if _, err := os.Stat(dirs.pinDir); os.IsNotExist(err) {
		return nil
	}
	out, err := exec.Command(b.mcptrace, "uninstall", "--bpf.pin-dir", dirs.pinDir, "--state.dir", dirs.stateDir, "--api.socket", dirs.socket).CombinedOutput()
	if err != nil {
		return fmt.Errorf("mcptrace uninstall --bpf.pin-dir %s: %w: %s", dirs.pinDir, err, strings.TrimSpace(string(out)))
	}
	_ = os.Remove(dirs.pinDir)
	return nil
}

// tail returns the last n lines of a file, for error messages.
func tail(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// logLine returns the first line of the agent's log containing s.
func (a *agentProc) logLine(s string) string {
	data, _ := os.ReadFile(a.log)
	for _, line := range strings.Split(string(data), "\n") {
		if strings.Contains(line, s) {
			return line
		}
	}
	return ""
}

// standInEngine returns the path of a unix socket that stands in for a
// container engine for the whole run (it accepts and closes), created on
// first use.
func (b *bench) standInEngine() string {
	if b.engineSock != "" {
		return b.engineSock
	}
	path := filepath.Join(b.tmp, "engine.sock")
	l, err := net.Listen("unix", path)
	if err != nil {
		b.warn("no stand-in engine socket (%v): the container request reader stays detached", err)
		return path
	}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	b.engineSock = path
	return path
}
