package lineage

import "slices"

// Identity index: how IDs from events, snapshots and callers resolve to
// nodes, and the few primitives that change the index or the edges.

func sameTick(a, b uint64) bool { return a/TickNS == b/TickNS }

// findEvent resolves an identity named by a kernel event: the exact node,
// or a coarse (snapshot) node of the same PID started in the same tick.
// Event identities are exact, so an exact node never matches by tick.
func (g *Graph) findEvent(id ID) *node {
	if n := g.byID[id]; n != nil {
		return n
	}
	nodes := g.byPID[id.PID]
	for i := len(nodes) - 1; i >= 0; i-- {
		if n := nodes[i]; n.p.CoarseStart && sameTick(n.p.ID.Start, id.Start) {
			return n
		}
	}
	return nil
}

// findSnap resolves a snapshot identity, which has tick precision: the
// exact node, or any node of the same PID started in the same tick.
func (g *Graph) findSnap(id ID) *node {
	if n := g.byID[id]; n != nil {
		return n
	}
	nodes := g.byPID[id.PID]
	for i := len(nodes) - 1; i >= 0; i-- {
		if n := nodes[i]; sameTick(n.p.ID.Start, id.Start) {
			return n
		}
	}
	return nil
}

// findQuery resolves an identity a caller passed: like findEvent, and in
// addition an ID whose Start is a whole number of ticks — the form of a
// coarse ID handed out before the node was upgraded — still finds the node
// by tick after the upgrade.
func (g *Graph) findQuery(id ID) *node {
	if n := g.findEvent(id); n != nil {
		return n
	}
	if id.Start%TickNS == 0 {
		return g.findSnap(id)
	}
	return nil
}

// lookupPID returns the newest alive node with pid, else the newest node.
func (g *Graph) lookupPID(pid uint32) *node {
	nodes := g.byPID[pid]
	for i := len(nodes) - 1; i >= 0; i-- {
		if !nodes[i].p.Exited {
			return nodes[i]
		}
	}
	if len(nodes) > 0 {
		return nodes[len(nodes)-1]
	}
	return nil
}

// create adds a bare node. The caller fills it and then calls inferReuse.
func (g *Graph) create(id ID, coarse bool) *node {
	if g.nextEvictAt > 0 && g.overCaps() {
		g.stats.overCap++ // see enforceCap
	}
	n := &node{p: Process{ID: id, CoarseStart: coarse}}
	g.byID[id] = n
	nodes := append(g.byPID[id.PID], n)
	// Keep oldest first; a new node is almost always the newest.
	for i := len(nodes) - 1; i > 0 && less(nodes[i], nodes[i-1]); i-- {
		nodes[i], nodes[i-1] = nodes[i-1], nodes[i]
	}
	g.byPID[id.PID] = nodes
	return n
}

// upgrade gives a coarse node the exact identity an event named it by.
// Edges are pointers, so only the indexes change.
func (g *Graph) upgrade(n *node, exact ID) {
	if !n.p.CoarseStart || n.p.ID == exact || exact.PID != n.p.ID.PID {
		return
	}
	if g.byID[exact] != nil { // cannot happen: findEvent would have returned it
		return
	}
	delete(g.byID, n.p.ID)
	n.p.ID = exact
	n.p.CoarseStart = false
	g.byID[exact] = n
	slices.SortStableFunc(g.byPID[exact.PID], cmpNodes)
}

// inferReuse applies "a PID names one live process at a time" to a node
// just created: every older node of its PID must have died before it
// started, and if a newer node of its PID exists, this one must be dead.
// A node created from an event is also dead if the last repair's scan
// should have listed it and did not (goneAtRepair). It returns how many
// older nodes it marked exited.
func (g *Graph) inferReuse(n *node) int {
	if !n.p.CoarseStart && g.goneAtRepair(n.p.ID) {
		g.markExited(n, GapNoExit, g.repairAt)
	}
	marked := 0
	for _, m := range g.byPID[n.p.ID.PID] {
		switch {
		case m == n:
		case less(m, n):
			if g.markExited(m, GapNoExit, n.p.ID.Start) {
				marked++
			}
		default:
			g.markExited(n, GapNoExit, m.p.ID.Start)
		}
	}
	return marked
}

// goneAtRepair reports whether the last Repair's scan proves id had exited:
// it started before the scan and the scan did not list it. Processes
// started since (every new fork) cost one comparison.
func (g *Graph) goneAtRepair(id ID) bool {
	if g.repairAt == 0 || id.Start >= g.repairAt {
		return false
	}
	start, listed := g.repaired[id.PID]
	return !listed || !sameTick(start, id.Start)
}

// markExited marks n exited without an exit event, at time at.
func (g *Graph) markExited(n *node, gap Gap, at uint64) bool {
	if n.p.Exited {
		return false
	}
	if at == 0 {
		at = g.clock
	}
	n.p.Exited = true
	n.markedAt = at
	g.addGap(n, gap)
	return true
}

// addGap sets a gap flag on n and counts it the first time.
func (g *Graph) addGap(n *node, gap Gap) {
	if n.p.Gaps&gap == gap {
		return
	}
	n.p.Gaps |= gap
	g.stats.gaps[gapIndex(gap)]++
}

// link makes c the creator of n. It refuses (returns false) when that
// would close a cycle, which only nonsensical input can ask for.
func (g *Graph) link(n, c *node) bool {
	if c == nil || c == n {
		return false
	}
	if n.creator == c {
		return true
	}
	for a := c; a != nil; a = a.creator {
		if a == n {
			return false
		}
	}
	if old := n.creator; old != nil {
		old.removeChild(n)
	}
	n.creator = c
	c.addChild(n)
	return true
}

// addChild appends n to c's children.
func (c *node) addChild(n *node) {
	n.childIdx = int32(len(c.children))
	c.children = append(c.children, n)
}

// removeChild takes n out of c's children in O(1): the last child takes
// its place (children have no order).
func (c *node) removeChild(n *node) {
	i := int(n.childIdx)
	if i >= len(c.children) || c.children[i] != n {
		return // not c's child
	}
	last := len(c.children) - 1
	if i != last {
		m := c.children[last]
		c.children[i] = m
		m.childIdx = int32(i)
	}
	c.children[last] = nil
	c.children = c.children[:last]
}

// replaceChild puts n in old's place among c's children.
func (c *node) replaceChild(old, n *node) {
	i := int(old.childIdx)
	if i < len(c.children) && c.children[i] == old {
		c.children[i] = n
		n.childIdx = int32(i)
	}
}

func removeNode(list []*node, n *node) []*node {
	for i, m := range list {
		if m == n {
			last := len(list) - 1
			copy(list[i:], list[i+1:])
			list[last] = nil
			return list[:last]
		}
	}
	return list
}

// setParent records p (or, when p is not in the graph, its identity) as
// the current parent of n, as reported at time at.
func (n *node) setParent(p *node, id ID, at uint64) {
	if p == n {
		return
	}
	n.parent = p
	n.parentID = ID{}
	if p == nil {
		n.parentID = id
	}
	n.parentAt = at
}

func (n *node) hasParent() bool { return n.parent != nil || !n.parentID.IsZero() }
