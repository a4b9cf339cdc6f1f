package sessions

import (
	"slices"

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

// MembersBelow is MembersBrief narrowed to id and what it created, at
// any depth, while s (this instance) is still active: nil once it ended
// (its own ending takes over), or when id is not a member of s. It costs
// id's subtree and its creator chain, not the whole session.
func (t *Tracker) MembersBelow(s Session, id lineage.ID) []lineage.Process {
	t.mu.Lock()
	defer t.mu.Unlock()
	x := t.instance(s.Ref(), s.Began)
	if x == nil || x.State != Active || !t.g.InCreatorChain(x.Root, id) {
		return nil
	}
	f := memberFilter{withRoot: true, branch: func(lineage.Process) bool { return true }}
	var out []lineage.Process
	t.g.WalkDescendants(id, func(p lineage.Process) bool {
		if f.take(p) {
			out = append(out, p)
		}
		return true
	})
	return out
}

// MembersBrief is MembersOf without the members' images (nil): it copies
// no command line under the tracker's lock, so a session whose members
// carry long ones costs a caller its own time, not the event consumer's.
// Fetch the images of the members it needs one at a time (Graph.Get).
func (t *Tracker) MembersBrief(s Session) []lineage.Process {
	t.mu.Lock()
	defer t.mu.Unlock()
	x := t.instance(s.Ref(), s.Began)
	if x == nil {
		return nil
	}
	f := memberFilter{withRoot: true, branch: func(lineage.Process) bool { return true }}
	var out []lineage.Process
	t.g.WalkDescendants(x.Root, func(p lineage.Process) bool {
		if f.take(p) {
			out = append(out, p)
		}
		return true
	})
	return out
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
// the count of its members that count accepts, in O(sessions + the
// processes below their roots) and without copying any member (count
// sees each without its Images): a process below several listed roots
// (nested sessions) is visited once, however deep the nesting. keep and
// count run with the Tracker's lock held and must not call it.
func (t *Tracker) SessionsCounted(keep func(Session) bool, count func(lineage.Process) bool) []Counted {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []Counted
	for _, s := range t.sorted() {
		if snap := s.snapshot(); keep(snap) {
			out = append(out, Counted{Session: snap})
		}
	}
	c := newCounter(count, out)
	for i := range out {
		out[i].Members, out[i].Alive = c.session(t.g, out[i].Root)
	}
	return out
}

// counter counts the members of sessions (memberFilter's rule) in walks of
// their roots' subtrees, and remembers the count below every listed root
// it passes, so that a later walk that meets that root adds its count
// instead of walking below it again.
type counter struct {
	count  func(lineage.Process) bool
	listed map[uint32]bool // PIDs of the listed roots
	memo   map[lineage.ID]tally
	stack  []frame
}

type tally struct{ members, alive int }

func (a *tally) add(b tally) { a.members += b.members; a.alive += b.alive }

// frame is a process on the path from the walk's root to where it is, with
// the count of what it and the part of its subtree walked so far hold.
type frame struct {
	id lineage.ID
	tally
}

func newCounter(count func(lineage.Process) bool, sessions []Counted) *counter {
	c := &counter{count: count, listed: map[uint32]bool{}, memo: map[lineage.ID]tally{}}
	for _, s := range sessions {
		c.listed[s.Root.PID] = true
	}
	return c
}

// session returns the members and live members of the session rooted at
// root (the root counted whatever its gaps, as memberFilter does).
func (c *counter) session(g *lineage.Graph, root lineage.ID) (members, alive int) {
	c.stack = c.stack[:0]
	var known *tally
	started := false
	g.WalkDescendants(root, func(p lineage.Process) bool {
		if !started { // the root comes first
			started = true
			if m, ok := c.memo[p.ID]; ok {
				known = &m
				return false
			}
			c.push(p)
			return true
		}
		for len(c.stack) > 0 && c.stack[len(c.stack)-1].id != p.Creator {
			c.pop()
		}
		switch {
		case len(c.stack) == 0 || p.Gaps&lineage.GapUnknownCreator != 0:
			return false // not a proven member, nor anything below it
		case c.listed[p.ID.PID]:
			if m, ok := c.memo[p.ID]; ok {
				c.stack[len(c.stack)-1].add(m)
				return false
			}
		}
		c.push(p)
		return true
	})
	if known != nil {
		return known.members, known.alive
	}
	if len(c.stack) == 0 {
		return 0, 0 // the root is no longer in the graph
	}
	for len(c.stack) > 1 {
		c.pop()
	}
	r := c.stack[0]
	c.memo[r.id] = r.tally
	return r.members, r.alive
}

// push starts p's frame, counting p itself.
func (c *counter) push(p lineage.Process) {
	f := frame{id: p.ID}
	if c.count(p) {
		f.members = 1
		if !p.Exited {
			f.alive = 1
		}
	}
	c.stack = append(c.stack, f)
}

// pop ends the top frame: its subtree is counted; the count goes to its
// creator's frame, and to memo when it is a listed root.
func (c *counter) pop() {
	f := c.stack[len(c.stack)-1]
	c.stack = c.stack[:len(c.stack)-1]
	if c.listed[f.id.PID] {
		c.memo[f.id] = f.tally
	}
	if len(c.stack) > 0 {
		c.stack[len(c.stack)-1].add(f.tally)
	}
}

// Unowned returns the live processes within the tracker's scope
// (Config.WithinPID) that no session owns, active or ended while it is
// kept, with their images: what package orphans looks for leaks in. keep
// (nil: all) sees each process without its images and decides whether it
// is wanted (the API keeps a caller's own). It walks every session's
// members once and the graph once.
func (t *Tracker) Unowned(keep func(lineage.Process) bool) []lineage.Process {
	// The tracker's lock, which every event the consumer applies takes,
	// is held for the members and the scope only: the walk over the
	// whole graph, which copies what it keeps, goes without it.
	t.mu.Lock()
	owned := map[lineage.ID]bool{}
	for _, x := range t.sorted() {
		f := memberFilter{withRoot: true, branch: func(lineage.Process) bool { return true }}
		t.g.WalkDescendants(x.Root, func(p lineage.Process) bool {
			if f.take(p) {
				owned[p.ID] = true
			}
			return true
		})
	}
	t.mu.Unlock()
	live := t.g.ProcessesWhere(func(p lineage.Process) bool {
		return !p.Exited && !p.Kernel && !owned[p.ID] && (keep == nil || keep(p))
	})
	// The scope walks the graph itself: after the walk above, not in it.
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.DeleteFunc(live, func(p lineage.Process) bool { return !t.inScope(p.ID) })
}
