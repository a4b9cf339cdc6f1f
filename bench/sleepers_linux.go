package main

import (
	"bufio"
	"context"
	"fmt"
	"os/exec"
	"strings"
	"time"
)

// sleepers are n `sleep 3600` processes the bench started, children of
// one bash.
type sleepers struct {
	cmd     *exec.Cmd
	members []member
}

// sleepersScript starts $1 sleepers, says so, and waits.
const sleepersScript = `for i in $(seq "$1"); do sleep 3600 & done; echo ready; wait`

// startSleepers starts n sleepers (through cmd when not nil, e.g. a
// session's `mcptrace run … -- bash -c`, else a plain bash) and waits
// until /proc shows them all.
func startSleepers(ctx context.Context, n int, cmd *exec.Cmd) (*sleepers, error) {
	if cmd == nil {
		cmd = exec.Command("bash", "-c", sleepersScript, "bash", fmt.Sprint(n))
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %d sleepers: %w", n, err)
	}
	s := &sleepers{cmd: cmd}
	ready := make(chan error, 1)
	go func() {
		line, err := bufio.NewReader(out).ReadString('\n')
		if err == nil && strings.TrimSpace(line) != "ready" {
			err = fmt.Errorf("sleepers said %q", line)
		}
		ready <- err
	}()
	select {
	case err = <-ready:
	case <-time.After(10 * time.Minute):
		err = fmt.Errorf("%d sleepers not started after 10 minutes", n)
	case <-ctx.Done():
		err = ctx.Err()
	}
	root, rerr := self(cmd.Process.Pid)
	s.members = append([]member{root}, descendants(cmd.Process.Pid)...)
	if err == nil {
		err = rerr
	}
	if err == nil && len(s.members) < n {
		err = fmt.Errorf("%d of %d sleepers in /proc", len(s.members)-1, n)
	}
	if err != nil {
		s.stop()
		return nil, err
	}
	return s, nil
}

// stop kills the sleepers by their recorded identities and waits until
// they are gone.
func (s *sleepers) stop() {
	killMembers(s.members)
	_, _ = s.cmd.Process.Wait()
	waitGone(s.members, 30*time.Second)
}

// waitTracked waits until the agent counts at least n live processes.
func (a *agentProc) waitTracked(ctx context.Context, n int) error {
	deadline := time.Now().Add(5 * time.Minute)
	for {
		st, err := a.status(ctx)
		if err == nil && st.Alive >= n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("agent counts %d live processes, want %d, after 5 minutes (err %v)", st.Alive, n, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
