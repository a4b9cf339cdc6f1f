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

	"github.com/mcptrace/mcptrace/internal/dockertest"
	"github.com/mcptrace/mcptrace/internal/testenv"
)

// A private Docker engine (internal/dockertest: Debian's dockerd, a
// busybox image, everything in a directory of its own) for the storms
// and the in-kernel costs: the agents watch its socket, as on a node with
// Docker, and one workload runs the write storm beside a session whose
// `docker run -i` client and container are alive. Without docker.io the
// agents watch a stand-in socket and that workload is left out, said in
// the report.

// dockerWait bounds a container's start and removal.
const dockerWait = 60 * time.Second

// startEngine starts the private engine; a failure is a warning, not
// the bench's end.
func (b *bench) startEngine() {
	b.progress("starting a private dockerd")
	e, err := dockertest.StartProgram()
	if err != nil {
		b.warn("no private Docker engine (%v): the agents watch a stand-in socket, and the workload with a docker run -i client is left out", err)
		return
	}
	b.engine = e
}

// stopEngine stops the private engine, if one runs.
func (b *bench) stopEngine() {
	if b.engine == nil {
		return
	}
	if err := b.engine.Close(); err != nil {
		b.warn("stopping the private dockerd: %v", err)
	}
	b.engine = nil
}

// engineSocket is the socket the agents watch: the private engine's, or a
// stand-in that accepts and closes.
func (b *bench) engineSocket() string {
	if b.engine != nil {
		return b.engine.Socket
	}
	return b.standInEngine()
}

// writeBesideAClient is the write storm pinned to CPU 0 while a session's
// `docker run -i --rm` client and its container run: the client is the
// session's root (`mcptrace run --session … -- docker run -i …`, its
// stdin held open), started and waited for before the storm, killed and
// its container removed after it.
func (b *bench) writeBesideAClient(ctx context.Context) (float64, error) {
	e := b.engine
	dir := b.tmpDir("docker")
	cidFile := filepath.Join(dir, "cid")
	docker := e.Docker("run", "-i", "--rm", "--network", "none", "--cidfile", cidFile, e.Image, "sleep", "3600")
	b.dockerRuns++
	// No agent needs to answer: the kernel's report of the exec declares
	// the session.
	args := append([]string{"run", "--session", fmt.Sprintf("bench-docker-%d", b.dockerRuns), "--api.socket", filepath.Join(dir, "no-agent.sock"), "--"}, docker.Args...)
	cmd := exec.Command(b.mcptrace, args...)
	cmd.Env = docker.Env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return 0, err
	}
	out := &testenv.LockedBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("docker run -i in a session: %w", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	id := ""
	defer func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		stdin.Close()
		<-exited
		if id != "" {
			// Whether the agent ended the session's container or not.
			rm := e.Docker("rm", "--force", id)
			if o, err := rm.CombinedOutput(); err != nil && !strings.Contains(string(o), "No such container") && !strings.Contains(string(o), "already in progress") {
				b.warn("docker rm --force %s: %v: %s", id[:12], err, strings.TrimSpace(string(o)))
			}
			b.waitContainerGone(id)
		}
	}()
	deadline := time.Now().Add(dockerWait)
	for {
		if data, _ := os.ReadFile(cidFile); len(data) == 64 && id == "" {
			id = string(data)
		}
		if id != "" {
			if o, err := e.Docker("inspect", "--type", "container", "--format", "{{.State.Running}}", id).Output(); err == nil && strings.TrimSpace(string(o)) == "true" {
				break
			}
		}
		select {
		case <-exited:
			return 0, fmt.Errorf("docker run -i exited before its container ran: %s", out.String())
		default:
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return 0, fmt.Errorf("the container of docker run -i did not run within %v: %s", dockerWait, out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	r, err := b.tools.storm(ctx, 'w', b.stormSecs, 0, 0, 1)
	return r.rate(), err
}

// waitContainerGone waits until the engine no longer has container id.
func (b *bench) waitContainerGone(id string) {
	deadline := time.Now().Add(dockerWait)
	for time.Now().Before(deadline) {
		if err := b.engine.Docker("inspect", "--type", "container", id).Run(); err != nil {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	b.warn("container %s still there %v after docker rm --force", id[:12], dockerWait)
}
