package sessions

import (
	"slices"

	"github.com/mcptrace/mcptrace/lineage"
)

// Indexes of the active sessions, by (owner, ID), by name, by (owner,
// tag) and by parent: what keeps the tracker's work per begin, tag, marker
// and end independent of how many sessions there are (it runs under the
// lock the event consumer needs).

// addActive registers s, active, in every index.
func (t *Tracker) addActive(s *session) {
	t.active[s.Ref()] = s
	k := tagKey{s.Owner, s.Tag}
	t.tags[k] = append(t.tags[k], s)
	t.names[s.ID] = append(t.names[s.ID], s)
	if s.Tag != s.ID {
		t.names[s.Tag] = append(t.names[s.Tag], s)
	}
	t.activePerUID[s.Owner]++
	if s.Parent != "" {
		t.addChild(s.ParentRef(), s)
	}
}

// removeActive takes s out of every index of the active sessions.
func (t *Tracker) removeActive(s *session) {
	if t.active[s.Ref()] == s {
		delete(t.active, s.Ref())
	}
	k := tagKey{s.Owner, s.Tag}
	unlist(t.tags, k, s)
	if len(t.tags[k]) == 0 {
		delete(t.suffix, Ref{s.Owner, s.Tag})
	}
	unlist(t.names, s.ID, s)
	if s.Tag != s.ID {
		unlist(t.names, s.Tag, s)
	}
	if len(t.suffix) > len(t.active)+1024 {
		clear(t.suffix) // bases whose tag was never in use (rule IDs)
	}
	if t.activePerUID[s.Owner]--; t.activePerUID[s.Owner] <= 0 {
		delete(t.activePerUID, s.Owner)
	}
	if s.Parent != "" {
		t.removeChild(s.ParentRef(), s)
	}
	if len(t.children[s.Ref()]) == 0 {
		delete(t.children, s.Ref())
	}
}

// unlist takes s out of the list index m keeps under k, and k out of m
// when its list is empty.
func unlist[K comparable](m map[K][]*session, k K, s *session) {
	list := m[k]
	if i := slices.Index(list, s); i >= 0 {
		list = slices.Delete(list, i, i+1)
	}
	if len(list) == 0 {
		delete(m, k)
	} else {
		m[k] = list
	}
}

func (t *Tracker) addChild(parent Ref, s *session) {
	set := t.children[parent]
	if set == nil {
		set = make(map[*session]struct{})
		t.children[parent] = set
	}
	set[s] = struct{}{}
}

func (t *Tracker) removeChild(parent Ref, s *session) {
	if set := t.children[parent]; set != nil {
		delete(set, s)
		if len(set) == 0 {
			delete(t.children, parent)
		}
	}
}

// setParent nests the active session s in parent (ID "": at top level).
func (t *Tracker) setParent(s *session, parent Ref) {
	if s.ParentRef() == parent {
		return
	}
	if s.State == Active && s.Parent != "" {
		t.removeChild(s.ParentRef(), s)
	}
	s.Parent, s.ParentOwner = parent.ID, parent.Owner
	if parent.ID == "" {
		s.ParentOwner = 0
	}
	if s.State == Active && parent.ID != "" {
		t.addChild(s.ParentRef(), s)
	}
}

// adoptBelow nests in s the active sessions that began earlier below its
// root, at s's level: it walks the root's proven descendants without
// copying them (for the exec of a tag, the process alone), never the
// other sessions.
func (t *Tracker) adoptBelow(s *session) {
	var roots []lineage.ID // members below the root whose PID roots a session
	f := memberFilter{withRoot: true, branch: func(lineage.Process) bool { return true }}
	first := true
	t.g.WalkDescendants(s.Root, func(p lineage.Process) bool {
		switch {
		case !f.take(p):
			return false
		case first:
			first = false
		case len(t.byPID[p.ID.PID]) > 0:
			roots = append(roots, p.ID)
		}
		return true
	})
	for _, id := range roots {
		if c := t.rootSession(id, true); c != nil && c != s && c.ParentRef() == s.ParentRef() {
			t.setParent(c, s.Ref())
		}
	}
}

// Per-owner log limits: a burst of logBurst per-session logs, then one
// per logEvery of event time; what is held back is counted and said with
// the next log of that owner.
const (
	logBurst   = 20
	logEvery   = uint64(1_000_000_000) // ns
	maxLogUIDs = 4096
)

// unknownOwner is the log-limit key of sessions the tracker no longer
// lists (no uid is 2^32-1: it is the kernel's "no uid").
const unknownOwner = ^uint32(0)
