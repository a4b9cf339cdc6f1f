package lineage

import "slices"

// Queries. Each takes the read lock, resolves the ID it is given and returns
// deep copies.
//
// An ID resolves to the node with exactly that identity; a node whose start
// is still coarse (seeded from /proc) also answers to any ID of its PID
// started in the same tick; and an ID whose Start is a whole number of ticks
// (the form of a coarse ID) still finds its node after a kernel event made
// the start exact, so IDs handed out early keep working.

// Get returns the process with identity id.
func (g *Graph) Get(id ID) (Process, bool) {
	g.mu.RLock()
	defer g.mu.RUnlock()
	n := g.findQuery(id)
	if n == nil {
		return Process{}, false
	}
	return n.export(), true
}

// Lookup returns the newest process with this PID, preferring one alive.
func (g *Graph) Lookup(pid uint32) (Process, bool) {
	g.mu.RLock()
	defer g.mu.RUnlock()
	n := g.lookupPID(pid)
	if n == nil {
		return Process{}, false
	}
	return n.export(), true
}

// Descendants returns id's process first, then every process it created at
// any depth, alive or dead, in pre-order with siblings sorted by (start,
// PID). Creation, not the current parent, defines the tree: processes
// reparented away and children of exited wrappers are included. Nil when
// id is unknown.
func (g *Graph) Descendants(id ID) []Process {
	var out []Process
	g.walkDescendants(id, func(n *node) bool { out = append(out, n.export()); return true })
	return out
}

// WalkDescendants calls visit with each process Descendants would return,
// in the same order, but without its Images (nil), so a caller that only
// counts or filters copies no command line; visit returns false to skip
// what the process created. It holds the graph's read lock while visit
// runs; visit must not call the Graph.
func (g *Graph) WalkDescendants(id ID, visit func(Process) (descend bool)) {
	g.walkDescendants(id, func(n *node) bool { return visit(n.brief()) })
}

// walkDescendants visits id's node and every node below it by creation in
// pre-order, siblings sorted by (start, PID), skipping what a node created
// when visit returns false for it.
func (g *Graph) walkDescendants(id ID, visit func(*node) bool) {
	g.mu.RLock()
	defer g.mu.RUnlock()
	n := g.findQuery(id)
	if n == nil {
		return
	}
	stack := []*node{n}
	for len(stack) > 0 {
		n := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if !visit(n) {
			continue
		}
		kids := sortedChildren(n)
		for i := len(kids) - 1; i >= 0; i-- {
			stack = append(stack, kids[i])
		}
	}
}

// Children returns the processes id created, sorted by (start, PID).
func (g *Graph) Children(id ID) []Process {
	g.mu.RLock()
	defer g.mu.RUnlock()
	n := g.findQuery(id)
	if n == nil {
		return nil
	}
	return exportAll(sortedChildren(n))
}

// Ancestors returns id's process first, then its creator, its creator's
// creator and so on up to the topmost known node: PID 1, kthreadd, or a
// process whose creator is unknown or retired. Nil when id is unknown.
func (g *Graph) Ancestors(id ID) []Process {
	g.mu.RLock()
	defer g.mu.RUnlock()
	var out []Process
	for n := g.findQuery(id); n != nil && !n.retired; n = n.creator {
		out = append(out, n.export())
	}
	return out
}

// CreatorChain returns the identities of id's process and of the
// processes that created it, innermost first, as far as the graph proves
// them: it stops after a process flagged GapUnknownCreator (its creator is
// only stood in for). It copies no process: O(depth). Nil when id is
// unknown.
func (g *Graph) CreatorChain(id ID) []ID {
	g.mu.RLock()
	defer g.mu.RUnlock()
	var out []ID
	for n := g.findQuery(id); n != nil && !n.retired; n = n.creator {
		out = append(out, n.p.ID)
		if n.p.Gaps&GapUnknownCreator != 0 {
			break
		}
	}
	return out
}

// InCreatorChain reports whether x is y or one of the processes that
// created y, at any depth, as far as the graph proves it (CreatorChain).
// It copies nothing: O(depth).
func (g *Graph) InCreatorChain(x, y ID) bool {
	g.mu.RLock()
	defer g.mu.RUnlock()
	nx := g.findQuery(x)
	if nx == nil {
		return false
	}
	for n := g.findQuery(y); n != nil && !n.retired; n = n.creator {
		if n == nx {
			return true
		}
		if n.p.Gaps&GapUnknownCreator != 0 {
			return false
		}
	}
	return false
}

// Processes returns every process in the graph sorted by (start, PID).
func (g *Graph) Processes() []Process {
	return g.ProcessesWhere(func(Process) bool { return true })
}

// ProcessesWhere returns the processes keep accepts, sorted by (start,
// PID). keep sees each process without its Images (nil) and runs with the
// graph's read lock held (it must not call the Graph); only what it keeps
// is copied whole.
func (g *Graph) ProcessesWhere(keep func(Process) bool) []Process {
	g.mu.RLock()
	defer g.mu.RUnlock()
	var nodes []*node
	for _, n := range g.byID {
		if keep(n.brief()) {
			nodes = append(nodes, n)
		}
	}
	slices.SortFunc(nodes, cmpNodes)
	return exportAll(nodes)
}

// Roots returns the tops of the creation forest — processes whose creator
// is unknown — sorted by (start, PID).
func (g *Graph) Roots() []ID {
	g.mu.RLock()
	defer g.mu.RUnlock()
	var nodes []*node
	for _, n := range g.byID {
		if n.creator == nil {
			nodes = append(nodes, n)
		}
	}
	slices.SortFunc(nodes, cmpNodes)
	out := make([]ID, len(nodes))
	for i, n := range nodes {
		out[i] = n.p.ID
	}
	return out
}

func sortedChildren(n *node) []*node {
	kids := slices.Clone(n.children)
	slices.SortFunc(kids, cmpNodes)
	return kids
}

func exportAll(nodes []*node) []Process {
	out := make([]Process, len(nodes))
	for i, n := range nodes {
		out[i] = n.export()
	}
	return out
}
