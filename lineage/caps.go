package lineage

import (
	"cmp"
	"slices"
)

// Caps: how the graph stays bounded whatever a local user makes processes
// do (Config.MaxImages, Config.MaxNodes).

// capImages keeps the first and the latest maxImages-1 images of n and
// counts the others as dropped.
func (g *Graph) capImages(n *node) {
	ims := n.p.Images
	over := len(ims) - g.maxImages
	if over <= 0 {
		return
	}
	copy(ims[1:], ims[1+over:])
	clear(ims[len(ims)-over:])
	n.p.Images = ims[:len(ims)-over]
	n.p.ImagesDropped += uint64(over)
	g.stats.imagesDropped += uint64(over)
}

// account brings n's share of imageBytes up to date after its images
// changed.
func (g *Graph) account(n *node) {
	b := n.p.ImageBytes()
	g.imageBytes += b - n.bytes
	n.bytes = b
}

// evictSlack and bytesSlack are how far under the caps an eviction goes,
// so that a full graph pays for one walk every evictSlack new processes
// (or bytesSlack new bytes), not for each.
func (g *Graph) evictSlack() int { return max(g.maxNodes/64, 1) }
func (g *Graph) bytesSlack() int { return max(g.maxBytes/64, 1) }

// overCaps reports whether the graph is at or past one of its caps.
func (g *Graph) overCaps() bool { return len(g.byID) >= g.maxNodes || g.imageBytes >= g.maxBytes }

// blocked reports whether the last eviction could not meet the caps and
// it is not yet time to look again.
func (g *Graph) blocked() bool {
	return g.nextEvictAt > 0 && len(g.byID) < g.nextEvictAt && g.imageBytes < g.nextEvictBytes
}

// enforceCap evicts the oldest entirely dead branches while the graph holds
// maxNodes nodes or maxBytes image bytes or more, down to evictSlack nodes
// and bytesSlack bytes under them; when that is not enough, it folds every
// foldable node out of its creator chain (fold.go). Call it at the end of
// every mutation, when no pointer into the graph is held: eviction and
// folding remove nodes.
func (g *Graph) enforceCap() { g.enforce(true) }

// evict is enforceCap without folding.
func (g *Graph) evict() { g.enforce(false) }

func (g *Graph) enforce(fold bool) {
	if !g.overCaps() {
		g.nextEvictAt, g.nextEvictBytes = 0, 0
		return
	}
	if g.blocked() {
		return
	}
	nodeTarget := g.maxNodes - g.evictSlack()
	bytesTarget := g.maxBytes - g.bytesSlack()

	// Every node whose whole creation subtree is dead is a candidate,
	// with the newest exit in that subtree. Sorting by that time, deeper
	// first on a tie, evicts a node only after everything it created.
	type cand struct {
		n     *node
		last  uint64
		depth int
	}
	var cands []cand
	roots := g.roots()
	walkSubtrees(roots, func(n *node, dead bool, last uint64, depth int) {
		if dead {
			cands = append(cands, cand{n, last, depth})
		}
	})
	slices.SortFunc(cands, func(a, b cand) int {
		if c := cmp.Compare(a.last, b.last); c != 0 {
			return c
		}
		return cmp.Compare(b.depth, a.depth)
	})
	creators := map[*node]bool{}
	evicted := 0
	for _, c := range cands {
		if len(g.byID) <= nodeTarget && g.imageBytes <= bytesTarget {
			break
		}
		if cr := c.n.creator; cr != nil {
			creators[cr] = true
		}
		g.remove(c.n)
		evicted++
	}
	for cr := range creators {
		if cr.retired {
			continue
		}
		cr.dropRetiredChildren()
	}
	g.stats.evicted += uint64(evicted)
	if fold && (len(g.byID) > nodeTarget || g.imageBytes > bytesTarget) {
		g.fold(1)
	}
	g.nextEvictAt, g.nextEvictBytes = 0, 0
	if g.overCaps() {
		// Only live processes and their dead ancestors are left: admit
		// what comes (counted in create) and look again later.
		g.nextEvictAt = len(g.byID) + g.evictSlack()
		g.nextEvictBytes = g.imageBytes + g.bytesSlack()
	}
}
