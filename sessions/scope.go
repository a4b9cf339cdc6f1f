package sessions

import (
	"github.com/mcptrace/mcptrace/lineage"
)

// Scope: which processes may begin or end sessions (sessions.within-pid),
// and the creator chains that decide nesting and authority.

// chain returns the identities of id's process and its creators,
// innermost first, as far as the graph proves them: it stops at a process
// flagged GapUnknownCreator, whose creator the graph only stands in for.
// It copies no process (Graph.CreatorChain). Nil when id is unknown.
func (t *Tracker) chain(id lineage.ID) []lineage.ID { return t.g.CreatorChain(id) }

// inScope reports whether id is within Config.WithinPID's subtree (always,
// when it is 0). The scope's identity is fixed the first time its PID is
// found alive in the graph, so a recycled PID never widens it; a chain
// the graph cannot prove (unknown creator) is outside.
func (t *Tracker) inScope(id lineage.ID) bool {
	if t.withinPID == 0 {
		return true
	}
	if t.within.IsZero() {
		p, ok := t.g.Lookup(t.withinPID)
		if !ok || p.Exited {
			return false
		}
		t.within = p.ID
		t.g.Pin(p.ID) // the scope's chain is walked through it: never folded
	}
	for _, a := range t.chain(id) {
		if a == t.within {
			return true
		}
		if a.PID == t.within.PID {
			// The graph may have refined a /proc identity to the kernel's
			// exact one since: resolve it as session roots are.
			if p, ok := t.g.Get(t.within); ok && p.ID == a {
				t.within = a
				return true
			}
			return false
		}
	}
	return false
}

// inChain reports whether x is root or one of root's proven creators.
func (t *Tracker) inChain(x, root lineage.ID) bool { return t.g.InCreatorChain(x, root) }

// rootSession returns the session rooted at the process id (a current
// graph identity): the active one, else (unless activeOnly) the newest
// retained ended one. Session roots are resolved through the graph, so a
// root seeded with a coarse identity matches its exact one, and a recycled
// PID never matches.
func (t *Tracker) rootSession(id lineage.ID, activeOnly bool) *session {
	var found *session
	for _, s := range t.byPID[id.PID] {
		if !t.isRoot(s, id) {
			continue
		}
		if s.State == Active {
			return s
		}
		if !activeOnly && (found == nil || s.EndedAt >= found.EndedAt) {
			found = s
		}
	}
	return found
}

func (t *Tracker) isRoot(s *session, id lineage.ID) bool {
	if s.Root == id {
		return true
	}
	if s.Root.PID != id.PID {
		return false
	}
	p, ok := t.g.Get(s.Root)
	if ok && p.ID == id {
		s.Root = id
		return true
	}
	return false
}
