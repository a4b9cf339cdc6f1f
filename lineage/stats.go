package lineage

import (
	"math/bits"
	"strings"
)

// Stats describes a Graph. Tracked, Alive and Exited are current; the
// other counters only grow.
type Stats struct {
	Tracked int // processes in the graph
	Alive   int
	Exited  int // exited but kept (retention, or a descendant still runs)

	Retired uint64 // processes dropped by Retire
	Repairs uint64 // calls to Repair
	// Gaps counts, per single Gap flag, how many times the graph set it on
	// a process. Every flag has an entry.
	Gaps map[Gap]uint64
	// DuplicateExits counts exit events for processes already exited.
	DuplicateExits uint64
	// Ignored counts events that name no process (PID 0, unknown kind).
	Ignored uint64

	// ImagesDropped counts exec images not kept because a process had
	// Config.MaxImages already (Process.ImagesDropped, summed). A duplicate
	// exec event for an image already dropped counts again.
	ImagesDropped uint64
	// Evicted counts nodes removed by the node cap (Config.MaxNodes),
	// oldest dead branch first.
	Evicted uint64
	// OverCap counts processes admitted while the graph was at its cap
	// and nothing was left to evict: every node alive or an ancestor of a
	// live one. They are admitted because a process the graph does not
	// know escapes its session's enforcement.
	OverCap uint64
	// Folded counts exited processes folded out of creator chains
	// (Process.CreatorsElided): by Retire past runs of 64, by the caps
	// when no dead branch was left to evict.
	Folded uint64
	// Dropped counts exited processes no session held that went after
	// Config.RecentExits newer ones (recent.go), with the creators that
	// went with them.
	Dropped uint64
	// ImageBytes is the graph's accounting of the memory its images hold
	// now (Process.ImageBytes, summed).
	ImageBytes int
}

// allGaps lists the gap flags in bit order.
var allGaps = [...]Gap{GapSeeded, GapNoFork, GapUnknownCreator, GapNoExit, GapRepaired}

type counters struct {
	retired, repairs, duplicateExits, ignored uint64
	imagesDropped, evicted, overCap, folded   uint64
	dropped                                   uint64
	gaps                                      [len(allGaps)]uint64
}

func gapIndex(g Gap) int { return bits.TrailingZeros16(uint16(g)) }

// Stats returns the graph's counters.
func (g *Graph) Stats() Stats {
	g.mu.RLock()
	defer g.mu.RUnlock()
	s := Stats{
		Tracked:        len(g.byID),
		Retired:        g.stats.retired,
		Repairs:        g.stats.repairs,
		DuplicateExits: g.stats.duplicateExits,
		Ignored:        g.stats.ignored,
		ImagesDropped:  g.stats.imagesDropped,
		Evicted:        g.stats.evicted,
		OverCap:        g.stats.overCap,
		Folded:         g.stats.folded,
		Dropped:        g.stats.dropped,
		ImageBytes:     g.imageBytes,
		Gaps:           make(map[Gap]uint64, len(allGaps)),
	}
	for _, n := range g.byID {
		if n.p.Exited {
			s.Exited++
		} else {
			s.Alive++
		}
	}
	for i, gap := range allGaps {
		s.Gaps[gap] = g.stats.gaps[i]
	}
	return s
}

// String names a gap flag ("seeded", "no_fork", "unknown_creator",
// "no_exit", "repaired"); a combination is joined with "|".
func (g Gap) String() string {
	if g == 0 {
		return "none"
	}
	names := [...]string{"seeded", "no_fork", "unknown_creator", "no_exit", "repaired"}
	var parts []string
	for i, f := range allGaps {
		if g&f != 0 {
			parts = append(parts, names[i])
			g &^= f
		}
	}
	if g != 0 {
		parts = append(parts, "unknown")
	}
	return strings.Join(parts, "|")
}
