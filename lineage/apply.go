package lineage

import (
	"slices"
	"strings"
)

// Apply records one kernel event. Events may arrive out of order, twice, or
// for processes the graph never saw; Apply fills what it must (see Gap) and
// never drops an event that names a process. An event whose Proc has PID 0
// or whose Kind is unknown names no process and is only counted
// (Stats.Ignored).
func (g *Graph) Apply(ev Event) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if ev.Proc.PID == 0 {
		g.stats.ignored++
		return
	}
	switch ev.Kind {
	case KindFork:
		g.applyFork(&ev)
	case KindExec:
		g.applyExec(&ev)
	case KindExit:
		g.applyExit(&ev)
	case KindRequest:
		return // not a change of the graph
	default:
		g.stats.ignored++
		return
	}
	g.clock = max(g.clock, ev.Time)
	g.enforceCap()
}

// applyFork records that ev.Creator created ev.Proc.
func (g *Graph) applyFork(ev *Event) {
	n := g.findEvent(ev.Proc)
	if n != nil {
		g.upgrade(n, ev.Proc)
	}

	var creator *node
	placeholder := false
	if ev.Creator.PID != 0 {
		creator = g.findEvent(ev.Creator)
		switch {
		case creator != nil && creator == n:
			creator = nil // a process cannot create itself
		case creator != nil:
			g.upgrade(creator, ev.Creator)
		case ev.Creator != ev.Proc:
			// Never drop the child: stand in for the creator we never saw.
			creator = g.create(ev.Creator, false)
			g.addGap(creator, GapNoFork)
			g.inferReuse(creator)
			placeholder = true
		}
	}

	if n == nil {
		g.newFork(ev, creator, placeholder)
		return
	}
	g.lateFork(n, ev, creator, placeholder)
}

// newFork creates the node of a fork seen in order.
func (g *Graph) newFork(ev *Event, creator *node, placeholder bool) {
	n := g.create(ev.Proc, false)
	setFields(n, ev)
	if creator != nil && g.link(n, creator) {
		n.p.Kernel = creator.p.Kernel
		if n.p.Comm == "" {
			n.p.Comm = creator.p.Comm
		}
		if n.p.CgroupID == 0 {
			n.p.CgroupID = creator.p.CgroupID
		}
		if img, ok := inheritedImage(creator, ev.Time); ok {
			// Room for the exec that usually follows.
			n.p.Images = append(make([]Image, 0, 2), img)
			g.account(n)
		}
	} else {
		placeholder = true
	}
	if placeholder {
		g.addGap(n, GapUnknownCreator)
	}
	switch {
	case !ev.Parent.IsZero():
		g.setParentFromEvent(n, ev.Parent, ev.Time)
	case n.creator != nil:
		n.setParent(n.creator, ID{}, ev.Time)
	}
	g.inferReuse(n)
}

// lateFork completes a node that exists already: its exec or exit arrived
// first, a snapshot seeded it, it stands in for an unseen creator, or the
// fork is a duplicate.
func (g *Graph) lateFork(n *node, ev *Event, creator *node, placeholder bool) {
	if n.p.Gaps&GapNoFork != 0 {
		// The fork is seen now: the node is no longer a stand-in, and the
		// children it stood in for have a creator the graph knows.
		n.p.Gaps &^= GapNoFork
		for _, c := range n.children {
			c.p.Gaps &^= GapUnknownCreator
		}
	}
	// The creator is written once. The one exception: a creator guessed
	// from a snapshot's PPID yields to the one the fork itself names.
	if creator != nil && (n.creator == nil || n.creatorFromSnap) && g.link(n, creator) {
		n.creatorFromSnap = false
		if img, ok := inheritedImage(creator, ev.Time); ok {
			ims := n.p.Images
			// Prepend the creator's image when the node has none yet or
			// only kernel execs after the fork (exec arrived first). An
			// image read from /proc already shows what the process runs.
			if len(ims) == 0 || (ims[0].Source == SourceKernel && ims[0].Time >= ev.Time) {
				n.p.Images = append([]Image{img}, ims...)
				g.capImages(n)
				g.account(n)
			}
		}
		if !n.procRead && !hasKernelImage(n) {
			n.p.Kernel = creator.p.Kernel
		}
		if placeholder {
			g.addGap(n, GapUnknownCreator)
		} else {
			n.p.Gaps &^= GapUnknownCreator
		}
	}
	if n.creator == nil {
		g.addGap(n, GapUnknownCreator)
	}
	g.updateFields(n, ev)
	if !ev.Parent.IsZero() {
		g.setParentFromEvent(n, ev.Parent, ev.Time)
	} else if !n.hasParent() && n.creator != nil {
		n.setParent(n.creator, ID{}, ev.Time)
	}
}

// applyExec records a new image for ev.Proc.
func (g *Graph) applyExec(ev *Event) {
	n, created := g.eventNode(ev)
	img := Image{
		Time:          ev.Time,
		Filename:      ev.Filename,
		Argv:          cloneStrings(ev.Argv),
		ArgvTruncated: ev.ArgvTruncated,
		Source:        SourceKernel,
		UID:           ev.UID,
		Stdio:         ev.Stdio,
	}
	n.p.Images = g.addExecImage(n, img)
	g.capImages(n)
	g.account(n)
	n.p.Kernel = false // an exec makes even a kernel-spawned helper a user process
	g.settle(n, created, ev)
}

// settle finishes a node an exec or exit event named: one the event
// created may be a reused PID's (inferReuse); one that existed takes the
// event's fields and parent.
func (g *Graph) settle(n *node, created bool, ev *Event) {
	if created {
		g.inferReuse(n)
		return
	}
	g.updateFields(n, ev)
	if !ev.Parent.IsZero() {
		g.setParentFromEvent(n, ev.Parent, ev.Time)
	}
}

// applyExit marks ev.Proc exited.
func (g *Graph) applyExit(ev *Event) {
	n, created := g.eventNode(ev)
	if n.p.Exited && n.exitFromEvent {
		g.stats.duplicateExits++ // the kernel can rarely report it twice
		return
	}
	// An exit inferred earlier (PID reuse, missing from /proc) yields to
	// the real one.
	n.p.Gaps &^= GapNoExit
	n.p.Exited = true
	n.exitFromEvent = true
	n.p.ExitTime = ev.Time
	n.p.ExitCode = ev.ExitCode
	n.p.Signal = ev.Signal
	n.markedAt = ev.Time
	if n.markedAt == 0 {
		n.markedAt = g.clock
	}
	g.settle(n, created, ev)
	g.noteExit(n)
}

// eventNode returns the node an exec or exit is about, creating it (flagged
// GapNoFork) when its fork was never seen. The caller calls inferReuse on a
// created node once the event is applied.
func (g *Graph) eventNode(ev *Event) (n *node, created bool) {
	if n = g.findEvent(ev.Proc); n != nil {
		g.upgrade(n, ev.Proc)
		return n, false
	}
	n = g.create(ev.Proc, false)
	setFields(n, ev)
	g.addGap(n, GapNoFork)
	if !ev.Parent.IsZero() {
		g.setParentFromEvent(n, ev.Parent, ev.Time)
	}
	return n, true
}

// updateFields takes Comm, UID and CgroupID from an event when it carries
// them and is not older than what set them (or they are still empty).
// Every kernel event carries the real uid of the process, and 0 is root's,
// not "unknown": the uid is taken whenever the event is not older.
func (g *Graph) updateFields(n *node, ev *Event) {
	if ev.Comm != "" && (ev.Time >= n.commAt || n.p.Comm == "") {
		n.p.Comm, n.commAt = ev.Comm, ev.Time
	}
	if ev.Time >= n.uidAt {
		n.p.UID, n.uidAt = ev.UID, ev.Time
	}
	if ev.CgroupID != 0 && (ev.Time >= n.cgroupAt || n.p.CgroupID == 0) {
		n.p.CgroupID, n.cgroupAt = ev.CgroupID, ev.Time
	}
}

// setFields initialises Comm, UID and CgroupID of a node created from ev.
func setFields(n *node, ev *Event) {
	n.p.Comm, n.p.UID, n.p.CgroupID = ev.Comm, ev.UID, ev.CgroupID
	n.commAt, n.uidAt, n.cgroupAt = ev.Time, ev.Time, ev.Time
}

// setParentFromEvent records the parent an event reports, unless a newer
// report already set it.
func (g *Graph) setParentFromEvent(n *node, id ID, at uint64) {
	if n.hasParent() && at < n.parentAt {
		return
	}
	p := g.findEvent(id)
	if p != nil {
		g.upgrade(p, id)
	}
	n.setParent(p, id, at)
}

// inheritedImage is the image creator ran at time t, as its child's first
// image. Kernel execs of the creator later than t are skipped: they may
// have been applied before this older fork. A zero t means unknown.
func inheritedImage(creator *node, t uint64) (Image, bool) {
	ims := creator.p.Images
	for i := len(ims) - 1; i >= 0; i-- {
		if t != 0 && ims[i].Source == SourceKernel && ims[i].Time > t {
			continue
		}
		img := ims[i] // Argv is shared: images are replaced, never edited
		img.Source = SourceInherited
		return img, true
	}
	return Image{}, false
}

func hasKernelImage(n *node) bool {
	for _, im := range n.p.Images {
		if im.Source == SourceKernel {
			return true
		}
	}
	return false
}

// addExecImage inserts an exec's image in time order among the kernel
// images (it is almost always appended) and returns the new list.
//
// If the image just before it was read from /proc or inherited, shows the
// same argv (the Filename is not compared: /proc/PID/exe is the resolved
// path, /bin/sh → /usr/bin/dash, while the kernel reports the path given to
// execve; a kernel argv cut at the capture limit matches as a prefix), and
// the exec is no later than the /proc read of
// this node, that image already reflected this exec: it is replaced, not
// followed by a duplicate. A repeated exec event (the same kernel time and
// filename: a process execs once per instant) is ignored, also when its
// argv differs from the first copy's by redaction (an event applied from a
// saved journal, argv redacted, and again from the kernel's ring buffer).
func (g *Graph) addExecImage(n *node, img Image) []Image {
	ims := n.p.Images
	for _, im := range ims {
		if im.Source == SourceKernel && im.Time == img.Time && im.Filename == img.Filename {
			return ims
		}
	}
	i := len(ims)
	for i > 0 && ims[i-1].Source == SourceKernel && ims[i-1].Time > img.Time {
		i--
	}
	if i > 0 {
		prev := ims[i-1]
		if (prev.Source == SourceProc || prev.Source == SourceInherited) &&
			n.procRead && img.Time <= n.procReadAt &&
			sameArgv(prev.Argv, img.Argv, img.ArgvTruncated) {
			ims[i-1] = img
			return ims
		}
	}
	return slices.Insert(ims, i, img)
}

// sameArgv reports whether a /proc argv and a kernel argv are the same
// command line; a truncated kernel argv matches as a prefix, its last
// element possibly cut.
func sameArgv(proc, kernel []string, truncated bool) bool {
	if !truncated {
		return equalStrings(proc, kernel)
	}
	if len(kernel) == 0 || len(kernel) > len(proc) {
		return false
	}
	last := len(kernel) - 1
	return equalStrings(proc[:last], kernel[:last]) && strings.HasPrefix(proc[last], kernel[last])
}
