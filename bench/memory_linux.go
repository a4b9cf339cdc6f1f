package main

import (
	"context"
	"fmt"
	"time"
)

// memory reads the agent's RSS and its maps' kernel memory at 0, 1k and
// 10k live processes beyond the node's own, then after 1M short-lived
// processes.
func (b *bench) memory(ctx context.Context) error {
	res := &memoryResults{}
	b.res.memory = res
	a, err := b.startAgent(ctx, b.agentDirs())
	if err != nil {
		return err
	}
	defer a.close()
	small, large, short := 1_000, 10_000, int64(1_000_000)
	if b.quick {
		small, large, short = 100, 1_000, 20_000
	}
	measure := func(label string, live int) error {
		time.Sleep(2 * time.Second) // let the consumer and the GC settle
		st, err := a.status(ctx)
		if err != nil {
			return err
		}
		rss, err := rssBytes(a.cmd.Process.Pid)
		if err != nil {
			return err
		}
		mm, err := agentMapMemory(ctx, a.dirs.pinDir)
		if err != nil {
			return err
		}
		res.points = append(res.points, memPoint{label: label, live: live, tracked: st.Tracked, alive: st.Alive, rss: rss, kernel: mm})
		b.progress("%s: tracked %d, RSS %s, maps %s", label, st.Tracked, mib(rss), mib(int64(mm.total)))
		return nil
	}
	if err := measure("idle", 0); err != nil {
		return err
	}
	base, err := a.status(ctx)
	if err != nil {
		return err
	}
	var live []*sleepers
	defer func() {
		for _, s := range live {
			s.stop()
		}
	}()
	for _, n := range []int{small, large} {
		add := n
		if len(live) > 0 {
			add = n - small
		}
		b.progress("starting %d sleepers", add)
		s, err := startSleepers(ctx, add, nil)
		if err != nil {
			return err
		}
		live = append(live, s)
		if err := a.waitTracked(ctx, base.Alive+n); err != nil {
			return err
		}
		if err := measure(fmt.Sprintf("%s live", count(int64(n))), n); err != nil {
			return err
		}
	}
	for _, s := range live {
		s.stop()
	}
	live = nil
	if err := measure("sleepers gone", 0); err != nil {
		return err
	}
	b.progress("%s short-lived processes", count(short))
	st0, err := a.status(ctx)
	if err != nil {
		return err
	}
	r, err := b.tools.storm(ctx, 'f', 0, short/2, -1, 2)
	if err != nil {
		return err
	}
	if _, err := a.settled(ctx, st0, uint64(2*r.children), 2*time.Minute); err != nil {
		return err
	}
	return measure(fmt.Sprintf("after %s short-lived", count(short)), 0)
}
