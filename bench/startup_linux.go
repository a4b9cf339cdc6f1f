package main

import (
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"time"
)

// startup measures the time from the agent's exec to its first status
// answer: seeding from /proc with 10k live processes, and restarting with
// 10k tracked processes in a session.
func (b *bench) startup(ctx context.Context) error {
	n, trials := 10_000, 3
	if b.quick {
		n, trials = 1_000, 1
	}
	res := &startupResults{processes: n}
	b.res.startup = res
	info := []string{"--log.level", "info"} // for the agent's start_to_serving

	b.progress("seed: starting %d sleepers", n)
	s, err := startSleepers(ctx, n, nil)
	if err != nil {
		return err
	}
	for t := 1; t <= trials && err == nil; t++ {
		b.progress("seed: trial %d/%d", t, trials)
		var a *agentProc
		a, err = b.startAgent(ctx, b.agentDirs(), info...)
		if err != nil {
			break
		}
		var p startPoint
		p, err = a.startPoint(ctx)
		res.seed = append(res.seed, p)
		if cerr := a.close(); err == nil {
			err = cerr
		}
	}
	s.stop()
	if err != nil {
		return err
	}

	dirs := b.agentDirs()
	a, err := b.startAgent(ctx, dirs, info...)
	if err != nil {
		return err
	}
	defer func() { a.close() }()
	b.progress("restart: a session of %d sleepers", n)
	root := exec.Command(b.mcptrace, "run", "--session", "big", "--api.socket", dirs.socket, "--", "bash", "-c", sleepersScript, "bash", fmt.Sprint(n))
	s, err = startSleepers(ctx, n, root)
	if err != nil {
		return err
	}
	defer s.stop()
	if err := a.waitTracked(ctx, n); err != nil {
		return err
	}
	for t := 1; t <= trials; t++ {
		b.progress("restart: trial %d/%d", t, trials)
		if err := a.stop(); err != nil {
			return err
		}
		next, err := b.startAgent(ctx, dirs, info...)
		if err != nil {
			// Nothing runs on the pins: uninstall what the last one left.
			a = &agentProc{b: b, dirs: dirs, cmd: &exec.Cmd{}}
			return err
		}
		a = next
		p, err := a.startPoint(ctx)
		if err != nil {
			return err
		}
		res.restart = append(res.restart, p)
	}
	return nil
}

var startToServing = regexp.MustCompile(`start_to_serving=(\S+)`)

// startPoint reads what a just-started agent says about its start.
func (a *agentProc) startPoint(ctx context.Context) (startPoint, error) {
	p := startPoint{serving: a.serving}
	st, err := a.status(ctx)
	if err != nil {
		return p, err
	}
	p.tracked = st.Tracked
	p.restored = st.Start.Restored
	p.agentMS = st.Start.ServingAfterMS
	// The log line is written right after the socket serves.
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if m := startToServing.FindStringSubmatch(a.logLine("msg=serving")); m != nil {
			p.logged = m[1]
			break
		}
	}
	return p, nil
}
