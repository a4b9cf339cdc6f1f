package main

import (
	"context"
	"fmt"
	"time"

	"github.com/mcptrace/mcptrace/api"
	"github.com/mcptrace/mcptrace/history"
)

// events drives the agent at the top creation rate this machine reaches
// (two exec storms in parallel, unpinned) and with a burst of 1M
// fork/exec/exit events, and reads what it handled, lost and recovered.
func (b *bench) events(ctx context.Context) error {
	res := &eventResults{}
	b.res.events = res
	a, err := b.startAgent(ctx, b.agentDirs())
	if err != nil {
		return err
	}
	defer a.close()

	sustained := 10.0
	burst := int64(1_000_000)
	if b.quick {
		sustained, burst = 1, 20_000
	}
	// Each exec storm child makes three events: fork, exec, exit.
	procs := (burst + 2) / 3
	steps := []struct {
		name  string
		secs  float64
		procs int64
	}{
		{fmt.Sprintf("top rate, %g s", sustained), sustained, 0},
		{fmt.Sprintf("burst of %s events", count(burst)), 0, procs},
	}
	for _, s := range steps {
		b.progress("%s", s.name)
		st0, err := a.settled(ctx, api.Status{}, 0, 10*time.Second)
		if err != nil {
			return err
		}
		r, err := b.tools.storm(ctx, 'e', s.secs, (s.procs+1)/2, -1, 2)
		if err != nil {
			return err
		}
		st1, err := a.settled(ctx, st0, uint64(3*r.children), 2*time.Minute)
		if err != nil {
			return err
		}
		if st1, err = a.historyFlushed(ctx, st0, st1); err != nil {
			return err
		}
		h0, h1 := historyOf(st0), historyOf(st1)
		res.runs = append(res.runs, eventRun{
			histWritten: h1.Events - h0.Events, histDropped: h1.Dropped - h0.Dropped, histFailed: h1.Failed - h0.Failed,
			histBytes: h1.FileBytes - h0.FileBytes,
			name:      s.name, processes: r.children, seconds: r.seconds,
			made:      uint64(3 * r.children),
			handled:   sum(st1.Events) - sum(st0.Events),
			lost:      sum(st1.Lost) - sum(st0.Lost),
			recovered: sum(st1.Recovered) - sum(st0.Recovered),
			repairs:   st1.Repairs - st0.Repairs,
			lostKinds: diff(st1.Lost, st0.Lost),
		})
	}
	return nil
}

// settled waits until the agent's event count has nearly stopped moving
// and returns its status: under 200 events in a second, or, once it has
// applied want events more than in before, under 200 + want/100 (the
// node's own background goes on); at most limit.
func (a *agentProc) settled(ctx context.Context, before api.Status, want uint64, limit time.Duration) (api.Status, error) {
	deadline := time.Now().Add(limit)
	st, err := a.status(ctx)
	if err != nil {
		return st, err
	}
	for time.Now().Before(deadline) {
		time.Sleep(time.Second)
		next, err := a.status(ctx)
		if err != nil {
			return next, err
		}
		moved := sum(next.Events) - sum(st.Events) + sum(next.Lost) - sum(st.Lost)
		done := sum(next.Events) + sum(next.Lost) - sum(before.Events) - sum(before.Lost)
		if moved < 200 || (done >= want && moved < 200+want/100) {
			return next, nil
		}
		st = next
	}
	return st, nil
}

// historyFlushed waits (up to 30 s) until the history has settled
// (written, dropped or failed) as many events as the agent handled since
// before, and returns the status then: its batches are seconds apart.
func (a *agentProc) historyFlushed(ctx context.Context, before, st api.Status) (api.Status, error) {
	handled := sum(st.Events) - sum(before.Events)
	h0 := historyOf(before)
	for range 30 {
		h := historyOf(st)
		if h.Events+h.Dropped+h.Failed-h0.Events-h0.Dropped-h0.Failed >= handled {
			return st, nil
		}
		time.Sleep(time.Second)
		next, err := a.status(ctx)
		if err != nil {
			return next, err
		}
		st = next
	}
	return st, nil
}

func historyOf(st api.Status) history.Stats {
	if st.History.Stats == nil {
		return history.Stats{}
	}
	return *st.History.Stats
}

func sum(m map[string]uint64) uint64 {
	var n uint64
	for _, v := range m {
		n += v
	}
	return n
}

func diff(after, before map[string]uint64) map[string]uint64 {
	out := map[string]uint64{}
	for k, v := range after {
		if d := v - before[k]; d > 0 {
			out[k] = d
		}
	}
	return out
}
