package sessions

import (
	"fmt"
	"log/slog"
	"slices"

	"github.com/mcptrace/mcptrace/internal/ratelog"
	"github.com/mcptrace/mcptrace/lineage"
)

// Generations: a destroy marker for a session rooted at a host ends what
// the host started so far and leaves the host running (see Marker).

// newGeneration ends the generation in force of s (and every older one)
// at a marker's time at: the sessions nested in it end, and an Action for
// the generation is appended last.
func (t *Tracker) newGeneration(s *session, detail string, sender lineage.ID, uid uint32, at uint64, via string, acts []Action) []Action {
	gen := s.Generation
	key := EndingKey(s.Session, gen)
	s.Generation++
	s.Markers = append(s.Markers, Marker{Ended: gen, At: at, Via: via, Sender: sender, SenderUID: uid})
	if n := len(s.Markers) - MaxMarkers; n > 0 {
		s.Markers = slices.Delete(s.Markers, 0, n)
		s.MarkersDropped += uint32(n)
	}
	t.st.generations++
	// Children of the root whose start cannot be placed on either side of
	// the marker are left to the new generation: counted, never guessed.
	for _, c := range t.g.Children(s.Root) {
		if _, known := t.createdBefore(c, at); !known {
			t.st.generationUnknown++
			t.logFor(s.Owner, slog.LevelWarn, "a child of a session root started within a clock tick of a destroy marker; it is left to the next generation",
				"session", s.ID, "pid", c.ID.PID, "marker_ns", at)
		}
	}
	for _, c := range t.nested(s.Ref()) {
		if t.inGenerationsBefore(s, c.Root, at) {
			acts = t.endWithin(c, ReasonParentEnded, fmt.Sprintf("generation %d of enclosing session %q ended: %s", gen, s.ID, detail), at, key, acts)
		}
	}
	t.logFor(s.Owner, slog.LevelInfo, "session generation ended", "session", s.ID, "generation", gen, "root_pid", s.Root.PID, "detail", ratelog.Field(detail))
	return append(acts, Action{End: s.snapshot(), Reason: detail, Generation: gen, Cutoff: at, Sender: sender})
}

// createdBefore reports whether the child c of a session's root was created
// before cutoff. A start time read from /proc is known only to its clock
// tick; when cutoff falls within that tick the answer is not known.
func (t *Tracker) createdBefore(c lineage.Process, cutoff uint64) (before, known bool) {
	if !c.CoarseStart {
		return c.ID.Start < cutoff, true
	}
	first := c.ID.Tick() * lineage.TickNS
	switch {
	case first+lineage.TickNS <= cutoff:
		return true, true
	case first >= cutoff:
		return false, true
	}
	return false, false
}

// inGenerationsBefore reports whether the process id, a member of s below
// its root, descends from a child of the root created before cutoff.
func (t *Tracker) inGenerationsBefore(s *session, id lineage.ID, cutoff uint64) bool {
	chain := t.chain(id)
	for i := 1; i < len(chain); i++ {
		if t.isRoot(s, chain[i].ID) {
			before, known := t.createdBefore(chain[i-1], cutoff)
			return known && before
		}
	}
	return false
}

// hasMarker reports whether s already took a marker from sender at at: the
// same marker delivered again (its exec and its API call, a replay).
func (s *session) hasMarker(sender lineage.ID, at uint64) bool {
	for _, m := range s.Markers {
		if m.At == at && m.Sender == sender {
			return true
		}
	}
	return false
}

// MembersBefore returns what a destroy marker at cutoff ends in session s
// (the instance: see MembersOf):
// every child of the root created before cutoff, and everything those
// created, at any depth, alive and exited, in the graph's pre-order — the
// root excluded. Children created at or after cutoff, and everything below
// them, are the next generation and are left out, as are children whose
// start time is known only to a clock tick that contains cutoff (see
// createdBefore) and, as for Members, processes whose creator the graph
// does not know. Nil for an unknown ID.
func (t *Tracker) MembersBefore(s Session, cutoff uint64) []lineage.Process {
	t.mu.Lock()
	defer t.mu.Unlock()
	x := t.instance(s.Ref(), s.Began)
	if x == nil {
		return nil
	}
	return t.members(x, false, func(child lineage.Process) bool {
		before, known := t.createdBefore(child, cutoff)
		return before && known
	})
}

// Generations returns, for each process of procs, the generation of
// the session r names it belongs to: 0 for the root (and for processes that are not
// below it), else the generation its creator chain leads to through the
// root's child (see Marker). With markers dropped beyond MaxMarkers, the
// processes older than the oldest kept marker all show its generation.
func (t *Tracker) Generations(r Ref, procs []lineage.Process) []uint32 {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]uint32, len(procs))
	s := t.get(r)
	if s == nil {
		return out
	}
	// The generation of a root child, by creator chain, memoized.
	byChild := map[lineage.ID]uint32{}
	for i, p := range procs {
		chain := t.chain(p.ID)
		for j := 1; j < len(chain); j++ {
			if !t.isRoot(s, chain[j].ID) {
				continue
			}
			c := chain[j-1]
			g, ok := byChild[c.ID]
			if !ok {
				g = s.generationOf(t, c)
				byChild[c.ID] = g
			}
			out[i] = g
			break
		}
	}
	return out
}

// generationOf is the generation of the root's child c.
func (s *session) generationOf(t *Tracker, c lineage.Process) uint32 {
	gen := s.MarkersDropped + 1
	for _, m := range s.Markers {
		if before, known := t.createdBefore(c, m.At); known && before {
			break
		}
		gen = m.Ended + 1
	}
	return gen
}

// snapshot returns the public part of s, its slices copied.
func (s *session) snapshot() Session {
	out := s.Session
	out.Markers = slices.Clone(s.Markers)
	return out
}
