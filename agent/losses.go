package agent

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/mcptrace/mcptrace/lineage"
	"github.com/mcptrace/mcptrace/procfs"
	"github.com/mcptrace/mcptrace/sensor"
	"github.com/mcptrace/mcptrace/state"
)

// kernelSeen is what the agent has accounted for of the kernel's counters:
// per pin set the values it last read, and the totals since the state
// began. It is saved, so events lost while no agent ran (the ring buffer
// overflowed during an outage) are found and repaired at the next start.
type kernelSeen struct {
	Sets      map[string]setSeen `json:"sets,omitempty"`
	Lost      map[string]uint64  `json:"lost_total,omitempty"`
	Recovered map[string]uint64  `json:"recovered_total,omitempty"`
	// RepairPending: a loss was seen and the /proc repair has not
	// succeeded yet; it is retried every repair interval, across restarts.
	RepairPending bool `json:"repair_pending,omitempty"`
}

// setSeen are one pin set's counters as last read, by event kind name;
// "unknown" counts records of another layout that were dropped.
type setSeen struct {
	Lost      map[string]uint64 `json:"lost,omitempty"`
	Recovered map[string]uint64 `json:"recovered,omitempty"`
}

const unknownKind = "unknown"

func newKernelSeen() kernelSeen {
	var k kernelSeen
	k.fill()
	return k
}

// fill makes the maps of a decoded value usable.
func (k *kernelSeen) fill() {
	if k.Sets == nil {
		k.Sets = map[string]setSeen{}
	}
	if k.Lost == nil {
		k.Lost = map[string]uint64{}
	}
	if k.Recovered == nil {
		k.Recovered = map[string]uint64{}
	}
}

func (k kernelSeen) clone() kernelSeen {
	out := kernelSeen{Sets: make(map[string]setSeen, len(k.Sets)), Lost: maps.Clone(k.Lost), Recovered: maps.Clone(k.Recovered), RepairPending: k.RepairPending}
	for name, s := range k.Sets {
		out.Sets[name] = setSeen{Lost: maps.Clone(s.Lost), Recovered: maps.Clone(s.Recovered)}
	}
	return out
}

// account takes in the counters read now: what grew since last seen is
// added to the totals. It returns the losses that grew (kind, count
// pairs for a log line) and whether anything changed.
func (k *kernelSeen) account(cs []sensor.Counters) (grew []any, changed bool) {
	for _, c := range cs {
		seen := k.Sets[c.Set]
		if seen.Lost == nil {
			seen = setSeen{Lost: map[string]uint64{}, Recovered: map[string]uint64{}}
		}
		lost := map[string]uint64{unknownKind: c.Discarded}
		rec := map[string]uint64{}
		for kind, n := range c.Lost {
			lost[kind.String()] = n
		}
		for kind, n := range c.Recovered {
			rec[kind.String()] = n
		}
		for name, n := range lost {
			if d := n - min(n, seen.Lost[name]); d > 0 {
				k.Lost[name] += d
				grew = append(grew, name, d)
				changed = true
			}
		}
		for name, n := range rec {
			if d := n - min(n, seen.Recovered[name]); d > 0 {
				k.Recovered[name] += d
				changed = true
			}
		}
		k.Sets[c.Set] = setSeen{Lost: lost, Recovered: rec}
	}
	// Sets no sensor reports anymore (drained by an earlier agent) are
	// accounted for for good.
	for name := range k.Sets {
		if !slices.ContainsFunc(cs, func(c sensor.Counters) bool { return c.Set == name }) {
			delete(k.Sets, name)
		}
	}
	return grew, changed
}

// checkLost repairs the graph from /proc when the kernel dropped events
// since the last check. Losses are logged and counted, never hidden. A
// repair that fails (a /proc read error, EMFILE) is retried at the next
// check until it succeeds: the loss stays pending until then.
func (a *Agent) checkLost() error {
	cs, err := a.sensor.Counters()
	if err != nil {
		return err
	}
	a.mu.Lock()
	grew, changed := a.kernel.account(cs)
	for i := 0; i+1 < len(grew); i += 2 {
		// A lost request is counted; /proc holds nothing to repair it
		// from (its container goes unattributed).
		if grew[i] != lineage.KindRequest.String() {
			a.kernel.RepairPending = true
		}
	}
	if changed {
		a.journal([]state.Record{jsonRecord(recKernel, a.kernel.clone())})
	}
	need := a.kernel.RepairPending
	a.mu.Unlock()
	if len(grew) > 0 {
		a.emitLosses(grew)
		a.log.Warn("kernel lost events; repairing the graph from "+processSource, grew...)
		a.historyNote("the kernel lost events (the graph is repaired from "+processSource+"): "+pairs(grew), 0)
	}
	if !need {
		return nil
	}
	start := time.Now()
	readAt := procfs.BootTimeNow()
	snaps, how, err := a.scanProcesses()
	if err != nil {
		return fmt.Errorf("repair: %w", err)
	}
	// The repair is journaled (takeScan): no checkpoint is needed to
	// keep what it learned.
	res := a.takeScan(state.Scan{ReadAt: readAt, Repair: true, Snapshots: snaps})
	a.mu.Lock()
	a.kernel.RepairPending = false
	a.journal([]state.Record{jsonRecord(recKernel, a.kernel.clone())})
	a.mu.Unlock()
	a.scan()
	a.log.Info("graph repaired from "+processSource, "read_from", how, "added", res.Added, "marked_exited", res.MarkedExited, "took", time.Since(start).Round(time.Millisecond))
	a.historyNote(fmt.Sprintf("the graph was repaired from %s: %d processes added, %d marked exited", processSource, res.Added, res.MarkedExited), 0)
	return nil
}

// pairs writes slog's key, value pairs as "k=v, k=v".
func pairs(kv []any) string {
	var parts []string
	for i := 0; i+1 < len(kv); i += 2 {
		parts = append(parts, fmt.Sprintf("%v=%v", kv[i], kv[i+1]))
	}
	return strings.Join(parts, ", ")
}
