package agent

import (
	"time"

	"github.com/mcptrace/mcptrace/api"
	"github.com/mcptrace/mcptrace/lineage"
)

// Status reports the agent's counters for the API. Event, loss and
// recovery counters count since the saved state began (they survive
// restarts).
func (a *Agent) Status() api.Status {
	gs := a.graph.Stats()
	st := api.Status{
		Agent:         a.agentStatus(),
		Kernel:        a.kernelStatus(),
		Leaks:         leakStatus(a.Picture()),
		Problems:      a.ops.problems.list(),
		Tracked:       gs.Tracked,
		Alive:         gs.Alive,
		Exited:        gs.Exited,
		Retired:       gs.Retired,
		Repairs:       gs.Repairs,
		ImagesDropped: gs.ImagesDropped,
		Evicted:       gs.Evicted,
		Folded:        gs.Folded,
		Dropped:       gs.Dropped,
		OverCap:       gs.OverCap,
		ImageBytes:    gs.ImageBytes,
		Events:        map[string]uint64{},
		Lost:          map[string]uint64{},
		Gaps:          gapCounts(gs),
		Recovered:     map[string]uint64{},
		History:       a.historyStatus(),
		Stream:        a.eventsStatus(),
	}
	for _, k := range eventKinds {
		st.Events[k.String()] = a.events[k].Load()
	}
	size, _ := a.store.Size()
	a.mu.Lock()
	for k, n := range a.kernel.Lost {
		st.Lost[k] = n
	}
	for k, n := range a.kernel.Recovered {
		st.Recovered[k] = n
	}
	st.RepairPending = a.kernel.RepairPending
	st.PendingEndings = len(a.pending)
	st.Sessions = a.tracker.Stats()
	st.State = api.StateStatus{
		Dir: a.opts.StateDir, Bytes: size, JournalBytes: a.journaled, JournalErrors: a.journalErrs,
		CheckpointAgeSeconds: time.Since(a.lastCP).Seconds(),
	}
	b := a.boot
	a.mu.Unlock()
	st.Start = api.StartStatus{
		Restored: b.restored, JournalRecords: b.replayed, TornRecords: b.torn, Drained: b.drained,
		StartedMeanwhile: b.procAdded, GoneMeanwhile: b.procGone, Resumed: b.resumed,
		ServingAfterMS: float64(b.ready) / float64(time.Millisecond),
	}
	for _, p := range b.problems {
		st.Start.Problems = append(st.Start.Problems, p.What)
	}
	st.Containers = a.containerStatus()
	a.metricsStatus(&st.Metrics)
	if pic := a.Picture(); !pic.At.IsZero() {
		st.Metrics.SampleAgeSeconds, st.Metrics.SampleSeconds = time.Since(pic.At).Seconds(), pic.Took.Seconds()
	}
	if a.enf != nil {
		es := a.enf.Stats()
		st.Enforcer = api.EnforcerStatus{
			Endings: es.Sessions, Killed: es.Killed, Spared: es.Spared, SparedPrivilege: es.SparedPrivilege,
			Refused: es.Refused, Failed: es.Failed, Survivors: es.Survivors, Escalated: es.Escalated, DoomErrors: es.DoomErrors,
		}
	}
	if a.sensor != nil {
		if dk, err := a.sensor.DoomKills(); err == nil {
			st.Enforcer.DoomSparedExecs = dk.SparedExecs
		}
	}
	return st
}

func gapCounts(gs lineage.Stats) map[string]uint64 {
	out := make(map[string]uint64, len(gs.Gaps))
	for g, n := range gs.Gaps {
		out[g.String()] = n
	}
	return out
}
