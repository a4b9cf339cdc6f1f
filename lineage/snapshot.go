package lineage

// RepairResult says what a Repair changed.
type RepairResult struct {
	// Added counts processes found in /proc the graph did not know.
	Added int
	// MarkedExited counts processes the graph thought alive that were gone
	// from /proc; their exit event was lost.
	MarkedExited int
}

// Seed adds the processes of an initial /proc scan. readAt is when the scan
// started (CLOCK_BOOTTIME ns); take it before reading the first process so
// that anything started during the scan has a later start than readAt.
//
// Every snapshot the graph does not know yet (by PID and start tick) is
// added alive, flagged GapSeeded, with its /proc image (SourceProc) and its
// creator guessed from its PPID. Snapshots of processes the graph already
// knows from events only fill fields the graph lacks; a process the graph
// already saw exit is not resurrected. Seed may run after events later than
// readAt were applied, or before events buffered earlier are applied: the
// fork of a seeded process, when it arrives, corrects the guessed creator.
func (g *Graph) Seed(snaps []Snapshot, readAt uint64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.absorb(snaps, readAt, GapSeeded, false)
	g.enforceCap()
}

// Repair reconciles the graph with a full /proc scan after the kernel lost
// events. readAt is when the scan started, as for Seed.
//
// Processes in the scan the graph does not know are added as by Seed but
// flagged GapRepaired; known ones get their current parent from the PPID.
// Processes alive in the graph, started before readAt and absent from the
// scan are marked exited, flagged GapNoExit, with an unknown ExitTime
// (retention counts from readAt). So is a process an event names later
// (one the ring buffer still held) that started before readAt and is
// absent from the scan: its exit was among the events lost.
func (g *Graph) Repair(snaps []Snapshot, readAt uint64) RepairResult {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.stats.repairs++
	added, reused, seen := g.absorb(snaps, readAt, GapRepaired, true)
	res := RepairResult{Added: added, MarkedExited: reused}
	g.repairAt = readAt
	g.repaired = make(map[uint32]uint64, len(snaps))
	for _, s := range snaps {
		g.repaired[s.ID.PID] = s.ID.Start
	}
	for _, n := range g.byID {
		if !seen[n] && !n.p.Exited && n.p.ID.Start < readAt {
			if g.markExited(n, GapNoExit, readAt) {
				res.MarkedExited++
			}
		}
	}
	g.enforceCap()
	return res
}

// absorb merges snapshots read at readAt into the graph, flagging new nodes
// with gap. It returns how many nodes it added, how many it marked exited
// because a snapshot showed their PID reused, and every node a snapshot
// matched or created.
func (g *Graph) absorb(snaps []Snapshot, readAt uint64, gap Gap, repair bool) (added, reused int, seen map[*node]bool) {
	g.clock = max(g.clock, readAt)
	seen = make(map[*node]bool, len(snaps))
	// live maps each PID in the scan to its node, to resolve PPIDs against
	// what /proc showed rather than what events did since.
	live := make(map[uint32]*node, len(snaps))
	type pending struct {
		n    *node
		ppid uint32
	}
	todo := make([]pending, 0, len(snaps))

	for i := range snaps {
		s := &snaps[i]
		if s.ID.PID == 0 {
			continue
		}
		n := g.findSnap(s.ID)
		if n != nil {
			seen[n] = true
			live[s.ID.PID] = n
			if n.p.Exited {
				continue // never resurrect: the exit came after the read
			}
			g.fill(n, s, readAt)
			todo = append(todo, pending{n, s.PPID})
			continue
		}
		n = g.create(s.ID, true)
		n.p.UID = s.UID
		n.p.Comm = s.Comm
		n.p.Kernel = s.Kernel
		n.commAt, n.uidAt = readAt, readAt
		g.setProcImage(n, s, readAt)
		g.addGap(n, gap)
		reused += g.inferReuse(n)
		seen[n] = true
		live[s.ID.PID] = n
		todo = append(todo, pending{n, s.PPID})
		added++
	}

	// Second pass: parents may be listed after their children (a child
	// reparented to a younger subreaper).
	for _, t := range todo {
		n := t.n
		var p *node
		if t.ppid != 0 && t.ppid != n.p.ID.PID {
			if p = live[t.ppid]; p == nil {
				p = g.lookupPID(t.ppid)
			}
		}
		if n.creator == nil {
			switch {
			case p != nil && g.link(n, p):
				n.creatorFromSnap = true
				g.addGap(n, gap)
			case t.ppid != 0:
				// The parent vanished between the listing and its read.
				g.addGap(n, GapUnknownCreator)
			}
		}
		switch {
		case p == nil:
		case !n.hasParent():
			n.setParent(p, ID{}, readAt)
		case repair && readAt >= n.parentAt:
			// A newer event's parent wins over this older read.
			n.setParent(p, ID{}, readAt)
		}
	}
	return added, reused, seen
}

// fill completes a known node with what a snapshot knows and it lacks.
func (g *Graph) fill(n *node, s *Snapshot, readAt uint64) {
	if n.p.Comm == "" && s.Comm != "" {
		n.p.Comm, n.commAt = s.Comm, readAt
	}
	if n.p.UID == 0 && s.UID != 0 {
		n.p.UID, n.uidAt = s.UID, readAt
	}
	if s.Kernel {
		n.p.Kernel = true
	}
	if len(n.p.Images) == 0 {
		g.setProcImage(n, s, readAt)
	}
}

// setProcImage gives n the image /proc shows, if it shows one.
func (g *Graph) setProcImage(n *node, s *Snapshot, readAt uint64) {
	if s.Filename == "" && len(s.Argv) == 0 {
		return
	}
	n.p.Images = []Image{{Filename: s.Filename, Argv: cloneStrings(s.Argv), Source: SourceProc, UID: s.UID, Stdio: s.Stdio}}
	g.account(n)
	n.procRead = true
	n.procReadAt = readAt
}

// SetParent records that the live process id now has the process with
// pid ppid as its parent, as /proc showed at time at: the kernel
// reparents the children of an exited process to a reaper and reports no
// event for it, so callers refresh the current parent from /proc (the
// agent does when it answers a query). The creator never changes. It
// reports whether the node was found alive.
func (g *Graph) SetParent(id ID, ppid uint32, at uint64) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := g.findQuery(id)
	if n == nil || n.p.Exited {
		return false
	}
	if n.hasParent() && at < n.parentAt {
		return true
	}
	p := g.lookupPID(ppid)
	if p != nil && p.p.Exited {
		p = nil
	}
	n.setParent(p, ID{PID: ppid}, at)
	return true
}
