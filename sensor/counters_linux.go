package sensor

import (
	"fmt"

	"github.com/cilium/ebpf"

	"github.com/mcptrace/mcptrace/bpf"
	"github.com/mcptrace/mcptrace/lineage"
)

// Counters returns the counters of every set the sensor has read or reads:
// the drained ones (final), the ones still being drained, and its own.
func (s *Sensor) Counters() ([]Counters, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := append([]Counters(nil), s.retired...)
	for _, st := range append(append([]*set(nil), s.old...), s.own) {
		c, err := st.counters()
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

// counters reads a set's counters.
func (st *set) counters() (Counters, error) {
	c := Counters{Set: st.name, Lost: map[lineage.EventKind]uint64{}, Recovered: map[lineage.EventKind]uint64{}, Discarded: st.skipped.Load(), Read: st.read.Load()}
	for _, h := range []struct {
		name string
		kind lineage.EventKind
		slot uint32 // the kind's index in lost_events and recovered: enum event_kind
	}{
		{"sched_process_fork", lineage.KindFork, uint32(bpf.McptraceEventKindEVENT_FORK)},
		{"sched_process_exec", lineage.KindExec, uint32(bpf.McptraceEventKindEVENT_EXEC)},
		{"sched_process_exit", lineage.KindExit, uint32(bpf.McptraceEventKindEVENT_EXIT)},
		{requestsProgram, lineage.KindRequest, uint32(bpf.McptraceEventKindEVENT_REQUEST)},
	} {
		var full, rec uint64
		var err error
		if st.maps.lost != nil && h.slot < st.maps.lost.MaxEntries() {
			if full, err = sumPerCPU(st.maps.lost, "lost_events", h.slot); err != nil {
				return c, err
			}
		}
		if st.maps.recovered != nil && h.slot < st.maps.recovered.MaxEntries() {
			if rec, err = sumPerCPU(st.maps.recovered, "recovered", h.slot); err != nil {
				return c, err
			}
		}
		var misses uint64
		p := st.primaries[h.name]
		if p == nil && h.kind == lineage.KindRequest {
			p = st.primaries[legacyRequestsProgram] // a set of an earlier build
		}
		if p != nil {
			stats, err := p.Stats()
			if err != nil {
				return c, fmt.Errorf("read %s program stats: %w", h.name, err)
			}
			misses = stats.RecursionMisses
		}
		// A primary can also run after its backup stood in (an evicted
		// claim): never let that hide a loss of another event.
		if h.kind == lineage.KindRequest {
			c.Lost[h.kind], c.Recovered[h.kind], c.RequestSkips = full, rec, misses
			continue
		}
		var skipped uint64
		if misses > rec {
			skipped = misses - rec
		}
		c.Lost[h.kind] = full + skipped
		c.Recovered[h.kind] = rec
	}
	if st.maps.doomKills != nil {
		var err error
		if c.Doom, err = doomKills(st.maps.doomKills); err != nil {
			return c, err
		}
	}
	return c, nil
}

// Lost returns, per event kind, the events lost in every set the sensor
// reads (see Counters.Lost), summed.
func (s *Sensor) Lost() (map[lineage.EventKind]uint64, error) {
	return s.sum(func(c Counters) map[lineage.EventKind]uint64 { return c.Lost })
}

// Recovered returns, per event kind, the events the backup programs ran
// in every set the sensor reads, summed.
func (s *Sensor) Recovered() (map[lineage.EventKind]uint64, error) {
	return s.sum(func(c Counters) map[lineage.EventKind]uint64 { return c.Recovered })
}

func (s *Sensor) sum(field func(Counters) map[lineage.EventKind]uint64) (map[lineage.EventKind]uint64, error) {
	cs, err := s.Counters()
	if err != nil {
		return nil, err
	}
	out := make(map[lineage.EventKind]uint64, 3)
	for _, c := range cs {
		for k, n := range field(c) {
			out[k] += n
		}
	}
	return out, nil
}

// sumPerCPU adds up the per-CPU values of key in a per-CPU array.
func sumPerCPU(m *ebpf.Map, name string, key uint32) (uint64, error) {
	var perCPU []uint64
	if err := m.Lookup(key, &perCPU); err != nil {
		return 0, fmt.Errorf("read %s[%d]: %w", name, key, err)
	}
	var n uint64
	for _, v := range perCPU {
		n += v
	}
	return n, nil
}

// doomKills reads a doom_kills map.
func doomKills(m *ebpf.Map) (DoomKills, error) {
	sum := func(k bpf.McptraceDoomKill) (uint64, error) {
		return sumPerCPU(m, "doom_kills", uint32(k))
	}
	var d DoomKills
	var err error
	if d.Forkers, err = sum(bpf.McptraceDoomKillDOOM_KILL_FORKER); err != nil {
		return d, err
	}
	if d.Children, err = sum(bpf.McptraceDoomKillDOOM_KILL_CHILD); err != nil {
		return d, err
	}
	if d.Execs, err = sum(bpf.McptraceDoomKillDOOM_KILL_EXEC); err != nil {
		return d, err
	}
	// A set an earlier build pinned may not count spared execs.
	if uint32(bpf.McptraceDoomKillDOOM_SPARED_EXEC) < m.MaxEntries() {
		d.SparedExecs, err = sum(bpf.McptraceDoomKillDOOM_SPARED_EXEC)
	}
	return d, err
}
