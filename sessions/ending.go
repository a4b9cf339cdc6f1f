package sessions

import (
	"cmp"
	"fmt"
	"log/slog"
	"slices"

	"github.com/mcptrace/mcptrace/lineage"
)

// Ending: a root that exited, nested sessions that end with their
// parent, and the sweep of roots the graph found gone.

func rootEndReason(p lineage.Process) string {
	if p.Gaps&lineage.GapNoExit != 0 {
		return ReasonRootGone
	}
	return ReasonRootExit
}

func exitDetail(p lineage.Process) string {
	switch {
	case p.Gaps&lineage.GapNoExit != 0:
		return fmt.Sprintf("root pid %d ended without an exit event (lost, or its PID was reused)", p.ID.PID)
	case p.Signal != 0:
		return fmt.Sprintf("root pid %d killed by signal %d", p.ID.PID, p.Signal)
	}
	return fmt.Sprintf("root pid %d exited with code %d", p.ID.PID, p.ExitCode)
}

// endIfExited ends the active session rooted at id if the graph already
// shows id exited.
func (t *Tracker) endIfExited(id lineage.ID, at uint64, acts []Action) []Action {
	s := t.rootSession(id, true)
	if s == nil {
		return acts
	}
	if p, ok := t.g.Get(id); ok && p.Exited {
		acts = t.end(s, rootEndReason(p), exitDetail(p), at, acts)
	}
	return acts
}

// end ends s and, first, every active session nested in it, appending one
// Action per session, innermost first.
func (t *Tracker) end(s *session, reason, detail string, at uint64, acts []Action) []Action {
	return t.endWithin(s, reason, detail, at, "", acts)
}

// endWithin is end for a session that ends because the ending keyed
// within ends ("" for a session that ends on its own).
func (t *Tracker) endWithin(s *session, reason, detail string, at uint64, within string, acts []Action) []Action {
	if s.State != Active {
		return acts
	}
	key := EndingKey(s.Session, 0)
	for _, c := range t.nested(s.Ref()) {
		acts = t.endWithin(c, ReasonParentEnded, fmt.Sprintf("enclosing session %q ended: %s", s.ID, detail), at, key, acts)
	}
	t.removeActive(s)
	s.State = Ended
	s.EndedAt = at
	s.EndReason = reason
	t.st.ended[s.Origin]++
	t.st.reasons[reason]++
	t.logFor(s.Owner, slog.LevelInfo, "session ended", "session", s.ID, "root_pid", s.Root.PID, "owner_uid", s.Owner, "reason", reason, "detail", detail)
	acts = append(acts, Action{End: s.snapshot(), Reason: detail, Within: within})
	t.retain(s)
	return acts
}

// nested returns the active sessions nested in r, by Began then ID.
func (t *Tracker) nested(r Ref) []*session {
	var out []*session
	for s := range t.children[r] {
		out = append(out, s)
	}
	slices.SortFunc(out, cmpSessions)
	return out
}

func cmpSessions(a, b *session) int {
	return cmp.Or(
		cmp.Compare(a.Began, b.Began),
		cmp.Compare(a.Root.Start, b.Root.Start),
		cmp.Compare(a.ID, b.ID),
	)
}

// drop forgets the i-th retained ended session.
func (t *Tracker) drop(i int) {
	s := t.ended[i]
	t.ended = slices.Delete(t.ended, i, i+1)
	if t.endedPerUID[s.Owner]--; t.endedPerUID[s.Owner] <= 0 {
		delete(t.endedPerUID, s.Owner)
	}
	list := t.byPID[s.Root.PID]
	if j := slices.Index(list, s); j >= 0 {
		list = slices.Delete(list, j, j+1)
	}
	if len(list) == 0 {
		delete(t.byPID, s.Root.PID)
	} else {
		t.byPID[s.Root.PID] = list
	}
	t.g.Unclaim(s.Root)
	t.dropContainersBelow(s.Root)
	t.st.dropped++
}

// Sweep ends the active sessions whose root the graph shows exited or no
// longer knows (exit events lost), and forgets ended sessions older than
// the retention at now (CLOCK_BOOTTIME ns). Call it periodically, e.g.
// with Graph.Retire.
func (t *Tracker) Sweep(now uint64) []Action {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.clock = max(t.clock, now)
	acts := t.sweepRoots(now, nil)
	if now > t.retention {
		cutoff := now - t.retention
		for i := 0; i < len(t.ended); {
			// An ended session a member of which still lives stays: it
			// is a leak (audit mode, a privilege boundary, a survivor)
			// that metrics report and `mcptrace tree --session` shows
			// until it ends. The per-owner quotas still bound them.
			if t.ended[i].EndedAt < cutoff && !t.hasLiveMember(t.ended[i]) {
				t.drop(i)
				continue
			}
			i++
		}
	}
	return acts
}

// hasLiveMember reports whether a member of s other than its root is
// alive (Members' rules: nothing below a process of unknown creator).
func (t *Tracker) hasLiveMember(s *session) bool {
	live := false
	t.g.WalkDescendants(s.Root, func(p lineage.Process) bool {
		if live || p.Gaps&lineage.GapUnknownCreator != 0 {
			return false
		}
		if p.ID != s.Root && !p.Exited {
			live = true
		}
		return !live
	})
	return live
}

func (t *Tracker) sweepRoots(at uint64, acts []Action) []Action {
	var list []*session
	for _, s := range t.active {
		list = append(list, s)
	}
	slices.SortFunc(list, cmpSessions)
	for _, s := range list {
		if s.State != Active {
			continue // ended above, nested in another
		}
		p, ok := t.g.Get(s.Root)
		switch {
		case !ok:
			acts = t.end(s, ReasonRootGone, fmt.Sprintf("root %v is no longer in the graph", s.Root), at, acts)
		case p.Exited:
			s.Root = p.ID
			acts = t.end(s, rootEndReason(p), exitDetail(p), at, acts)
		}
	}
	return acts
}
