package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// A config is what runs beside a workload: nothing, the agent, bpftrace or
// forkstat. start returns the function that stops it.
type config struct {
	name  string
	start func(ctx context.Context) (stop func() error, err error)
}

// onlyConfigs, when not empty, names the configurations the storms run
// beside the baseline (-configs), separated by ';'.
var onlyConfigs string

// configs are the storms' configurations, baseline first.
func (b *bench) configs() ([]config, error) {
	return selectNamed(b.allConfigs(), func(c config) string { return c.name }, "-configs", onlyConfigs, "baseline")
}

func (b *bench) allConfigs() []config {
	return []config{
		{"baseline", b.startBaseline},
		{"mcptrace", func(ctx context.Context) (func() error, error) { return b.startAgentWithSessions(ctx) }},
		// The same without the container request reader, which runs on
		// every system call: its price, side by side.
		{"mcptrace, no containers", func(ctx context.Context) (func() error, error) {
			return b.startAgentWithSessions(ctx, "--containers.engine-socket=")
		}},
		// The same without the history journal, which writes every
		// event to disk: its price, side by side.
		{configNoHistory, func(ctx context.Context) (func() error, error) {
			return b.startAgentWithSessions(ctx, "--history.dir=")
		}},
		{"bpftrace", b.startBpftrace},
		{"forkstat", b.startForkstat},
	}
}

// startBaseline runs nothing, after checking that no sched_process_*
// program is loaded: one left attached would falsify the round.
func (b *bench) startBaseline(ctx context.Context) (func() error, error) {
	if err := b.checkNoTracer(ctx); err != nil {
		return nil, err
	}
	return func() error { return nil }, nil
}

// checkNoTracer waits up to 30 s for every sched_process_* program to be
// gone, then fails (or warns, with -allow-foreign).
func (b *bench) checkNoTracer(ctx context.Context) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		left, err := schedProgs(ctx)
		if err != nil {
			return err
		}
		if len(left) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			msg := fmt.Sprintf("sched_process_* programs loaded during a baseline round (not the bench's: every tracer it started is stopped): %s; pinned under /sys/fs/bpf: %s", strings.Join(left, "; "), pinned())
			if b.allowForeign {
				b.foreignSeen = true
				b.warn("%s", msg)
				return nil
			}
			return fmt.Errorf("%s; find and stop them (bpftool prog show; mcptrace uninstall --bpf.pin-dir …), or rerun with -allow-foreign to measure anyway", msg)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// startAgentWithSessions starts the agent (enforcing, default
// configuration but narrowed to the bench) with a few sessions running
// `sleep`.
func (b *bench) startAgentWithSessions(ctx context.Context, extra ...string) (func() error, error) {
	a, err := b.startAgent(ctx, b.agentDirs(), extra...)
	if err != nil {
		return nil, err
	}
	for i := 0; i < benchSessions; i++ {
		if _, err := a.runSession(fmt.Sprintf("bench-%d", i), "sleep", "3600"); err != nil {
			a.close()
			return nil, err
		}
	}
	if err := a.waitSessions(ctx, benchSessions); err != nil {
		a.close()
		return nil, err
	}
	return a.close, nil
}

// waitSessions waits until the agent lists n active sessions.
func (a *agentProc) waitSessions(ctx context.Context, n int) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		ss, err := a.client.Sessions(ctx)
		active := 0
		for _, s := range ss {
			if s.Alive > 0 {
				active++
			}
		}
		if err == nil && active >= n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("agent lists %d active sessions of %d after 30 s (err %v)", active, n, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// bpftraceScript prints a line for every event of the three tracepoints
// the agent attaches to.
const bpftraceScript = `tracepoint:sched:sched_process_fork { printf("fork %d %d\n", args->parent_pid, args->child_pid); }
tracepoint:sched:sched_process_exec { printf("exec %d %s\n", pid, str(args->filename)); }
tracepoint:sched:sched_process_exit { printf("exit %d %s\n", pid, comm); }`

// startBpftrace runs bpftrace on the same tracepoints, printing to a file,
// and waits until it has attached.
func (b *bench) startBpftrace(ctx context.Context) (func() error, error) {
	out := filepath.Join(b.tmpDir("bpftrace"), "out")
	f, err := os.Create(out)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	cmd := exec.Command("bpftrace", "-e", bpftraceScript)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start bpftrace: %w", err)
	}
	stop := func() error {
		err := stopProcess(cmd, syscall.SIGINT)
		os.Remove(out)
		return err
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		data, _ := os.ReadFile(out)
		if strings.Contains(string(data), "Attaching") {
			time.Sleep(200 * time.Millisecond)
			return stop, nil
		}
		if cmd.ProcessState != nil || time.Now().After(deadline) {
			stop()
			return nil, fmt.Errorf("bpftrace did not attach: %.500s", data)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// startForkstat runs forkstat on fork, exec and exit events (the proc
// connector), output discarded.
func (b *bench) startForkstat(ctx context.Context) (func() error, error) {
	cmd := exec.Command("forkstat", "-e", "fork,exec,exit")
	cmd.Stdout = nil // /dev/null
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start forkstat: %w", err)
	}
	time.Sleep(time.Second)
	if err := cmd.Process.Signal(syscall.Signal(0)); err != nil {
		return nil, fmt.Errorf("forkstat exited at start: %w", err)
	}
	return func() error { return stopProcess(cmd, syscall.SIGINT) }, nil
}

// stopProcess signals a child and waits for it, SIGKILL after 10 s.
func stopProcess(cmd *exec.Cmd, sig syscall.Signal) error {
	done := make(chan error, 1)
	_ = cmd.Process.Signal(sig)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
		return nil
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		return fmt.Errorf("%s did not stop on %v within 10 s: killed", filepath.Base(cmd.Path), sig)
	}
}

// pinned lists what is pinned at the top of /sys/fs/bpf, to tell whose
// programs a baseline found.
func pinned() string {
	ents, err := os.ReadDir("/sys/fs/bpf")
	if err != nil {
		return err.Error()
	}
	var names []string
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".debug") {
			names = append(names, e.Name())
		}
	}
	if len(names) == 0 {
		return "nothing"
	}
	return strings.Join(names, ", ")
}
