package sessions

import (
	"github.com/mcptrace/mcptrace/lineage"
)

// Members: the processes a session holds, and the listing that counts
// them without copying.

// MembersOf is Members of one session instance (see Action.Key): the
// processes an ending of s kills, never those of a later session that
// took its ID.
func (t *Tracker) MembersOf(s Session) []lineage.Process {
	t.mu.Lock()
	defer t.mu.Unlock()
	if x := t.instance(s.Ref(), s.Began); x != nil {
		return t.members(x, true, func(lineage.Process) bool { return true })
	}
	return nil
}

// Members returns the session's root and everything it created at any
// depth, alive and exited, in the graph's pre-order (Graph.Descendants):
// including processes that daemonized, changed process group or were
// reparented, and those of the sessions nested in it. A process flagged
// lineage.GapUnknownCreator (the graph only stands in for its creator) is
// left out with everything below it. Processes seeded from /proc at agent
// start (lineage.GapSeeded) are taken with the creator the graph gives
// them: their parent at that time, so one that had already been reparented
// to init or a subreaper is not a member. For an ended session the list
// shrinks as the graph retires dead branches. Nil for an unknown ID.
func (t *Tracker) Members(r Ref) []lineage.Process {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.get(r)
	if s == nil {
		return nil
	}
	return t.members(s, true, func(lineage.Process) bool { return true })
}

// members returns the root of s (when withRoot) and its proven
// descendants in pre-order, keeping only the branches of the root's
// children that branch accepts. A process flagged GapUnknownCreator is
// left out with everything below it.
func (t *Tracker) members(s *session, withRoot bool, branch func(child lineage.Process) bool) []lineage.Process {
	f := memberFilter{withRoot: withRoot, branch: branch}
	var out []lineage.Process
	for _, p := range t.g.Descendants(s.Root) {
		if f.take(p) {
			out = append(out, p)
		}
	}
	return out
}

// memberFilter tells, for the processes of the subtree of a session's
// root in Descendants order, which are members (see Members): the root
// (when withRoot), and each process whose creator is a member, keeping
// only the branches of the root's children that branch accepts; a process
// flagged GapUnknownCreator is left out with everything below it.
type memberFilter struct {
	withRoot bool
	branch   func(child lineage.Process) bool
	root     lineage.ID
	in       map[lineage.ID]bool
}

func (f *memberFilter) take(p lineage.Process) bool {
	if f.in == nil { // the root comes first
		f.root, f.in = p.ID, map[lineage.ID]bool{p.ID: true}
		return f.withRoot
	}
	if p.Gaps&lineage.GapUnknownCreator != 0 || !f.in[p.Creator] || p.Creator == f.root && !f.branch(p) {
		return false
	}
	f.in[p.ID] = true
	return true
}

// Counted is a session with how many of its members (root included) a
// caller may see, and how many of those are alive.
type Counted struct {
	Session
	Members, Alive int
}

// SessionsCounted is Sessions narrowed to those keep accepts, each with
// the count of its members that count accepts, in O(sessions + their
// members) and without copying any member (count sees each without its
// Images). keep and count run with the Tracker's lock held and must not
// call it.
func (t *Tracker) SessionsCounted(keep func(Session) bool, count func(lineage.Process) bool) []Counted {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []Counted
	for _, s := range t.sorted() {
		snap := s.snapshot()
		if !keep(snap) {
			continue
		}
		c := Counted{Session: snap}
		f := memberFilter{withRoot: true, branch: func(lineage.Process) bool { return true }}
		t.g.WalkDescendants(s.Root, func(p lineage.Process) {
			if f.take(p) && count(p) {
				c.Members++
				if !p.Exited {
					c.Alive++
				}
			}
		})
		out = append(out, c)
	}
	return out
}
