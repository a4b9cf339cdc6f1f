package lineage

// Retire drops the branches that are entirely dead and have been for
// longer than Config.Retention before now (CLOCK_BOOTTIME ns). A node goes
// only when it and every process it created, at any depth, have exited and
// the newest exit among them is older than now-Retention; so a dead
// wrapper stays as long as anything it started runs. An exit with unknown
// time counts from when the graph marked it. Retire returns how many nodes
// it dropped.
//
// Retire also folds runs of more than 64 exited creators out of creator
// chains (fold.go). It walks the whole graph: call it periodically, not
// per event.
func (g *Graph) Retire(now uint64) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	defer g.fold(foldRun)
	if now <= g.retention {
		return 0
	}
	cutoff := now - g.retention

	roots := g.roots()
	removed := 0
	walkSubtrees(roots, func(n *node, dead bool, last uint64, _ int) {
		n.dropRetiredChildren() // retired below

		if dead && last < cutoff {
			g.remove(n)
			removed++
		}
	})
	g.stats.retired += uint64(removed)
	if !g.overCaps() {
		g.nextEvictAt, g.nextEvictBytes = 0, 0 // room again: evict as usual when it fills
	}
	return removed
}

// roots returns the nodes no known process created: the tops of the
// creation trees.
func (g *Graph) roots() []*node {
	var out []*node
	for _, n := range g.byID {
		if n.creator == nil {
			out = append(out, n)
		}
	}
	return out
}

// walkSubtrees visits the creation trees under roots in post-order,
// without recursion: visit sees a node after everything it created, with
// whether its whole subtree is dead, the newest exit in that subtree, and
// its depth. visit may remove the node it is given (the walk keeps its own
// copy of what it summarised).
func walkSubtrees(roots []*node, visit func(n *node, dead bool, last uint64, depth int)) {
	type frame struct {
		n    *node
		next int
		dead bool
		last uint64
	}
	var stack []frame
	for _, r := range roots {
		stack = append(stack[:0], frame{n: r, dead: r.p.Exited, last: r.exitAt()})
		for len(stack) > 0 {
			top := len(stack) - 1
			if f := &stack[top]; f.next < len(f.n.children) {
				c := f.n.children[f.next]
				f.next++
				stack = append(stack, frame{n: c, dead: c.p.Exited, last: c.exitAt()})
				continue
			}
			f := stack[top]
			stack = stack[:top]
			visit(f.n, f.dead, f.last, top)
			if top > 0 {
				p := &stack[top-1]
				p.dead = p.dead && f.dead
				p.last = max(p.last, f.last)
			}
		}
	}
}

// remove takes a node out of the indexes. Its creator drops it from its
// children when Retire finishes the creator's frame; its own children are
// all retired with it. A live process may still name it as parent, so the
// node keeps its identity but lets go of everything else.
func (g *Graph) remove(n *node) {
	g.unqueue(n)
	delete(g.byID, n.p.ID)
	nodes := removeNode(g.byPID[n.p.ID.PID], n)
	if len(nodes) == 0 {
		delete(g.byPID, n.p.ID.PID)
	} else {
		g.byPID[n.p.ID.PID] = nodes
	}
	n.retired = true
	n.creator = nil
	n.children = nil
	n.parent = nil
	n.p.Images = nil
	g.imageBytes -= n.bytes
	n.bytes = 0
}

// dropRetiredChildren removes the retired nodes from n's children, in
// place, keeping the order of the rest.
func (n *node) dropRetiredChildren() {
	kids := n.children[:0]
	for _, c := range n.children {
		if !c.retired {
			c.childIdx = int32(len(kids))
			kids = append(kids, c)
		}
	}
	clear(n.children[len(kids):])
	n.children = kids
}
