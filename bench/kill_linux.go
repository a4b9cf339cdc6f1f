package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// sessionScript builds a session of wrappers three deep (sh → sh → sh →
// sh), a setsid daemon, a fork loop and $2 sleepers.
const sessionScript = `#!/bin/sh
d=$1
if [ "$d" -lt 3 ]; then sh "$0" $((d+1)) "$2" & wait; exit 0; fi
setsid sleep 1000 &
(while :; do /bin/true; done) &
i=0
while [ "$i" -lt "$2" ]; do sleep 1000 & i=$((i+1)); done
wait
`

// killSize is the session's size: root, 3 wrappers, the daemon, the fork
// loop and the sleepers.
const killSize = 200

// kill measures the time from the SIGKILL of a session's root to the
// death of its last member, under the immediate and the graceful policy.
func (b *bench) kill(ctx context.Context) error {
	script := filepath.Join(b.tmpDir("kill"), "session.sh")
	if err := os.WriteFile(script, []byte(sessionScript), 0o755); err != nil {
		return err
	}
	grace := time.Second
	res := &killResults{size: killSize, grace: grace}
	b.res.kill = res
	for _, p := range []struct {
		name  string
		flags []string
		minus time.Duration
	}{
		{"immediate", []string{"--enforcer.policy", "immediate"}, 0},
		// The members exit on SIGTERM (none traps it), so under the
		// graceful policy they die at the SIGTERM: the grace is not
		// waited and not subtracted.
		{"graceful", []string{"--enforcer.policy", "graceful", "--enforcer.grace-period", grace.String()}, 0},
	} {
		a, err := b.startAgent(ctx, b.agentDirs(), p.flags...)
		if err != nil {
			return err
		}
		pol := killPolicy{name: p.name, minus: p.minus}
		for t := 1; t <= b.killTrials && err == nil; t++ {
			b.progress("%s: trial %d/%d", p.name, t, b.killTrials)
			var tr killTrial
			tr, err = a.killTrial(ctx, fmt.Sprintf("kill-%s-%d", p.name, t), script)
			if err == nil {
				tr.latency -= p.minus
				pol.trials = append(pol.trials, tr)
			}
		}
		res.policies = append(res.policies, pol)
		if cerr := a.close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// killTrial starts the session, waits until the agent tracks its members,
// SIGKILLs its root and waits for every member to die.
func (a *agentProc) killTrial(ctx context.Context, id, script string) (killTrial, error) {
	var tr killTrial
	root, err := a.runSession(id, "sh", script, "0", fmt.Sprint(killSize-6))
	if err != nil {
		return tr, err
	}
	defer func() {
		_ = root.Process.Kill()
		_, _ = root.Process.Wait()
	}()
	rootM, err := self(root.Process.Pid)
	if err != nil {
		return tr, err
	}
	// Ready: /proc shows the session whole, and so does the agent.
	deadline := time.Now().Add(60 * time.Second)
	var members []member
	for {
		members = append([]member{rootM}, descendants(rootM.pid)...)
		alive := 0
		if len(members) >= killSize-1 {
			if d, err := a.client.Session(ctx, id, nil); err == nil {
				alive = d.Session.Alive
			}
		}
		if alive >= killSize-1 {
			break
		}
		if time.Now().After(deadline) {
			killMembers(members)
			return tr, fmt.Errorf("session %s: %d processes in /proc, %d alive for the agent after 60 s", id, len(members), alive)
		}
		time.Sleep(10 * time.Millisecond)
	}
	var fds []unix.PollFd
	for _, m := range members {
		fd, err := m.pidfd()
		if err != nil {
			return tr, err
		}
		if fd >= 0 {
			fds = append(fds, unix.PollFd{Fd: int32(fd), Events: unix.POLLIN})
		}
	}
	defer func() {
		for _, p := range fds {
			unix.Close(int(p.Fd))
		}
	}()
	tr.members = len(fds)
	start := time.Now()
	if err := root.Process.Kill(); err != nil {
		return tr, fmt.Errorf("SIGKILL session root: %w", err)
	}
	// Poll the pidfds: each turns readable when its process exits.
	left := append([]unix.PollFd(nil), fds...)
	var last time.Time
	timeout := start.Add(30 * time.Second)
	for len(left) > 0 && time.Now().Before(timeout) {
		n, err := unix.Poll(left, 100)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return tr, fmt.Errorf("poll pidfds: %w", err)
		}
		if n == 0 {
			continue
		}
		now := time.Now()
		keep := left[:0]
		for _, p := range left {
			if p.Revents == 0 {
				p.Revents = 0
				keep = append(keep, p)
			} else {
				last = now
			}
		}
		left = keep
		for i := range left {
			left[i].Revents = 0
		}
	}
	tr.latency = last.Sub(start)
	tr.survivors = len(left)
	if tr.survivors > 0 {
		killMembers(members)
		waitGone(members, 10*time.Second)
	}
	// Let the enforcer finish before the next trial.
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if st, err := a.status(ctx); err == nil && st.PendingEndings == 0 {
			break
		}
	}
	return tr, nil
}
