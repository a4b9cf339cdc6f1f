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
	var unknown []lineage.Process
	root := true
	t.g.WalkDescendants(s.Root, func(c lineage.Process) bool {
		if root { // the root comes first: on to its children, no further
			root = false
			return true
		}
		if _, known := t.createdBefore(c, at); !known {
			unknown = append(unknown, c)
		}
		return false
	})
	for _, c := range unknown {
		t.st.generationUnknown++
		t.logFor(s.Owner, slog.LevelWarn, "a child of a session root started within a clock tick of a destroy marker; it is left to the next generation",
			"session", s.ID, "pid", c.ID.PID, "marker_ns", at)
	}
	var rc map[lineage.ID]lineage.Process
	for _, c := range t.nested(s.Ref()) {
		if rc == nil {
			rc = t.rootChildren(s)
		}
		// Nested in the ended generations: below a child of the root
		// created before the marker.
		if child, ok := t.rootChildOf(rc, c.Root); ok {
			if before, known := t.createdBefore(child, at); before && known {
				acts = t.endWithin(c, ReasonParentEnded, fmt.Sprintf("generation %d of enclosing session %q ended: %s", gen, s.ID, detail), at, key, acts)
			}
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

// rootChildren maps every proven member below the root of s (Members,
// the root excluded) to the root's child it descends from, in one walk of
// the root's subtree that copies no command line: what decides a member's
// generation, found for all members in O(members) rather than by a
// creator chain each.
func (t *Tracker) rootChildren(s *session) map[lineage.ID]lineage.Process {
	out := map[lineage.ID]lineage.Process{}
	var root lineage.ID
	t.g.WalkDescendants(s.Root, func(p lineage.Process) bool {
		switch {
		case root.IsZero():
			root = p.ID
		case p.Gaps&lineage.GapUnknownCreator != 0:
			return false
		case p.Creator == root:
			out[p.ID] = p
		default:
			c, ok := out[p.Creator]
			if !ok {
				return false
			}
			out[p.ID] = c
		}
		return true
	})
	return out
}

// rootChildOf returns the root's child that member id descends from, in
// rc (rootChildren of its session). An ID handed out before the graph
// refined it from /proc's tick to the kernel's exact start is resolved
// first.
func (t *Tracker) rootChildOf(rc map[lineage.ID]lineage.Process, id lineage.ID) (lineage.Process, bool) {
	if c, ok := rc[id]; ok {
		return c, true
	}
	if p, ok := t.g.Get(id); ok && p.ID != id {
		c, ok := rc[p.ID]
		return c, ok
	}
	return lineage.Process{}, false
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
	// The generation of a root child, memoized.
	rc := t.rootChildren(s)
	byChild := map[lineage.ID]uint32{}
	for i, p := range procs {
		c, ok := t.rootChildOf(rc, p.ID)
		if !ok {
			continue
		}
		g, ok := byChild[c.ID]
		if !ok {
			g = s.generationOf(t, c)
			byChild[c.ID] = g
		}
		out[i] = g
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
