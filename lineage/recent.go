package lineage

// Recent exits: how churn outside sessions stays out of memory.
//
// Retention keeps a dead branch for minutes, which is what a session's
// record needs. A node that forks short-lived processes in a loop (a build,
// a shell script, a fork storm) leaves thousands of dead leaves a second
// that belong to no session and connect nothing: kept for Retention they
// are millions of nodes. So an exited process that no session holds goes
// as soon as Config.RecentExits processes that exited after it came
// through the same way; until then `tree` still shows it.
//
// A process goes this way only when all of these hold when its turn
// comes: it created nothing the graph still holds (a leaf: a dead node
// with a live descendant stays, it connects the descendant to its
// creators), it is not pinned and no process from it up its creator chain
// is claimed (Graph.Claim: a session's root, whose record and enforcement
// read the session's members, dead ones too), its exit came from the
// kernel (an inferred exit may still be followed by a fork of it in the
// ring), and neither it nor a creator up its chain is a stand-in for a
// process the graph never saw whose creator /proc did not give either
// (GapNoFork, GapUnknownCreator: it may yet turn out to be inside a
// session). When its creator is then a dead leaf that passes the same
// test, it goes too, and so on up. Anything else stays for Retention.
//
// What it does not do: it decides on the edges the graph holds at that
// moment. A creator guessed from a /proc snapshot's PPID that a fork event
// corrects later (a process forked while the agent started) can put under
// a session a process already gone; only an exited one, so no kill
// depends on it. A session that begins above a process that already went
// (a host declared with `session begin` after it ran things) does not
// list it. Recent exits are not part of a State: after Restore the exited
// processes the State held stay for Retention.

// maxClaimWalk bounds the creator chain a drop walks to prove no session
// holds a process; a longer chain keeps the process for Retention.
const maxClaimWalk = 1024

// Claim marks the process id as holding a session: it and every process
// below it (by creator edge) stay after they exit for Retention, and it is
// never folded out of a creator chain (as Pin). The owner of a session
// claims its root while it keeps the session. Claims are not part of a
// State; whoever claimed before a Dump claims again after Restore. It
// reports whether id is in the graph.
func (g *Graph) Claim(id ID) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := g.findQuery(id)
	if n == nil {
		return false
	}
	n.claims++
	return true
}

// Unclaim undoes one Claim of id (nothing when id is not claimed or no
// longer in the graph). The exited processes below it then stay for
// Retention, as they would have.
func (g *Graph) Unclaim(id ID) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if n := g.findQuery(id); n != nil && n.claims > 0 {
		n.claims--
	}
}

// droppable reports whether n, by itself, may go as a recent exit: an
// exit from the kernel, no children, not pinned or claimed, and not a
// stand-in.
func (n *node) droppable() bool {
	return !n.retired && n.p.Exited && n.exitFromEvent && len(n.children) == 0 &&
		n.pins == 0 && n.claims == 0 && !n.standIn()
}

// standIn reports whether the graph does not know where n comes from: it
// stands in for a process whose fork it never saw and /proc did not give
// it a creator either (GapNoFork), or it has no creator and should
// (GapUnknownCreator). A process that forked while the agent started is
// first a stand-in for its children's fork events, then the seed gives it
// its PPID as creator: from then on it is known like any seeded process.
func (n *node) standIn() bool {
	return (n.p.Gaps&GapNoFork != 0 && !n.creatorFromSnap) ||
		(n.creator == nil && n.p.Gaps&GapUnknownCreator != 0)
}

// unclaimed reports whether no creator of n up its chain is claimed or a
// stand-in (see droppable). A chain longer than maxClaimWalk counts as
// claimed.
func (n *node) unclaimed() bool {
	steps := 0
	for a := n.creator; a != nil; a = a.creator {
		if a.claims > 0 || a.standIn() {
			return false
		}
		if steps++; steps > maxClaimWalk {
			return false
		}
	}
	return true
}

// noteExit queues n, just marked exited by its exit event, among the
// recent exits when it may go that way, and lets the oldest recent exits
// beyond Config.RecentExits go.
func (g *Graph) noteExit(n *node) {
	if !n.droppable() || n.recent {
		return
	}
	n.recent = true
	g.recent = append(g.recent, n)
	g.recentLive++
	// Only the queued processes still in the graph count: a State lists
	// those only, so a restored graph lets the same ones go at the same
	// exits (FuzzDumpRestore). Retired ones are skipped when they come up.
	for g.recentLive > g.maxRecent {
		old := g.recent[g.recentHead]
		g.recent[g.recentHead] = nil
		g.recentHead++
		if !old.recent {
			continue // removed from the graph while queued (unqueue)
		}
		old.recent = false
		g.recentLive--
		g.dropExited(old)
	}
	queued := g.recent[g.recentHead:]
	switch {
	case len(queued) > 2*g.recentLive+64:
		// Mostly processes removed while queued: keep the queue's array
		// bounded by what is live in it.
		k := 0
		for _, x := range queued {
			if x.recent {
				g.recent[k] = x
				k++
			}
		}
		clear(g.recent[k:])
		g.recent, g.recentHead = g.recent[:k], 0
	case g.recentHead > 0 && g.recentHead >= len(queued):
		// Reuse the queue's array once its dead front is as long as the rest.
		k := copy(g.recent, queued)
		clear(g.recent[k:])
		g.recent = g.recent[:k]
		g.recentHead = 0
	}
}

// unqueue takes n, being removed from the graph, out of the count of
// recent exits; its slot in the queue is skipped when it comes up.
func (g *Graph) unqueue(n *node) {
	if n.recent {
		n.recent = false
		g.recentLive--
	}
}

// dropExited removes n when it still may go (droppable and unclaimed),
// then its creators that became dead leaves that may go, and counts them
// (Stats.Dropped).
func (g *Graph) dropExited(n *node) {
	if !n.droppable() || !n.unclaimed() {
		return // a session began above it, it has a child again, or it is gone
	}
	for n != nil && n.droppable() {
		cr := n.creator
		if cr != nil {
			cr.removeChild(n)
		}
		g.remove(n)
		g.stats.dropped++
		n = cr
	}
}
