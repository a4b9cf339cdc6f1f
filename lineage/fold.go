package lineage

// Folding: how chains of exited creators stay bounded.
//
// Retention and the node cap never drop a dead process with a live
// descendant: the chain from a session's root down to a live member is what
// an enforcer acts on. So a process that forks a child and exits, in a loop
// (each child doing the same), pins one dead node per iteration for as
// long as the last child lives: thousands a second, without bound, and
// every walk up such a chain costs its length.
//
// A dead node that created exactly one process, and whose creator is dead
// too, connects nothing but its creator and its child. Folding it out
// attaches its child to its creator and counts it on the child
// (Process.CreatorsElided): every "created by, at any depth" answer stays
// what it was, so session membership, generations (decided by the root's
// direct child, whose creator is the root: never folded while the root
// lives) and authorization do not change; only the exited middle of the
// chain is no longer shown. Retire folds such runs longer than foldRun
// (no real wrapper chain is that deep), and a graph over its caps, with no
// dead branch left to evict, folds every such node.
//
// A node is never folded while it is pinned (Graph.Pin: a session's root,
// which its session is walked from), while its exit is only inferred,
// while its creator edge or its child's is still a guess that a fork
// event may correct (a /proc seed), or while it stands in for a creator
// the graph never saw.
//
// What a fold gives up: the events of a folded process delivered a second
// time (after a crash, the kernel hands the consumer the batch it had not
// committed) find no node, and make one as for any process the graph
// never saw: a fork creates it under its creator until the batch's own
// exit follows, a child's fork names it as a stand-in creator, which
// links nothing (a creator is written once) and is counted as a gap.

// foldRun is how many exited single-child creators in a row Retire keeps
// above a process.
const foldRun = 64

// Pin keeps the process id from being folded out of a creator chain until
// as many Unpin calls: the owner of a session pins its root, which it
// walks the session from. Pins are not part of a State; whoever pinned
// before a Dump pins again after Restore. It reports whether id is in the
// graph.
func (g *Graph) Pin(id ID) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := g.findQuery(id)
	if n == nil {
		return false
	}
	n.pins++
	return true
}

// Unpin undoes one Pin of id (nothing when id is not pinned or no longer
// in the graph).
func (g *Graph) Unpin(id ID) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if n := g.findQuery(id); n != nil && n.pins > 0 {
		n.pins--
	}
}

// foldable reports whether n may connect its creator to its only child
// without being shown: its exit came from the kernel, it created exactly
// one process the graph holds, it is not pinned, and neither its own
// creator edge nor its child's is a guess or a stand-in.
//
// The exit must be the kernel's own: a process's exit event is the last
// of its events in the ring, so no fork of it can come later. An exit the
// graph inferred (Repair, a reused PID) may still be followed by a fork
// event the ring held, which would find no node to attach its child to.
func (n *node) foldable() bool {
	const guessed = GapNoFork | GapUnknownCreator
	if !n.p.Exited || !n.exitFromEvent || len(n.children) != 1 || n.pins > 0 || n.claims > 0 || n.creatorFromSnap || n.p.Gaps&guessed != 0 {
		return false
	}
	c := n.children[0]
	return !c.creatorFromSnap && c.p.Gaps&guessed == 0
}

// fold folds out every foldable node that has at least minRun (1 or
// more) foldable creators in a row directly above it, and returns how
// many it folded. O(nodes).
func (g *Graph) fold(minRun int) int {
	minRun = max(minRun, 1) // a node whose creator lives is never folded
	type item struct {
		n   *node
		run int // foldable creators in a row directly above n
	}
	var stack []item
	for _, r := range g.roots() {
		stack = append(stack, item{r, 0})
	}
	folded := 0
	for len(stack) > 0 {
		it := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		n := it.n
		if !n.foldable() {
			for _, c := range n.children {
				stack = append(stack, item{c, 0})
			}
			continue
		}
		c := n.children[0]
		if it.run < minRun {
			stack = append(stack, item{c, it.run + 1})
			continue
		}
		// n's creator is foldable, so dead: c takes n's place below it.
		cr := n.creator
		cr.replaceChild(n, c)
		c.creator = cr
		c.p.CreatorsElided += 1 + n.p.CreatorsElided
		n.children = nil
		g.remove(n)
		folded++
		stack = append(stack, item{c, it.run})
	}
	g.stats.folded += uint64(folded)
	return folded
}
