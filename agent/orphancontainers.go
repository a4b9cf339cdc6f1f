package agent

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"time"

	"github.com/mcptrace/mcptrace/containers"
	"github.com/mcptrace/mcptrace/enforcer"
	"github.com/mcptrace/mcptrace/lineage"
	"github.com/mcptrace/mcptrace/orphans"
	"github.com/mcptrace/mcptrace/procfs"
	"github.com/mcptrace/mcptrace/sessions"
)

// Orphaned containers: a running container no session claims, created to
// read its client's stdin once (docker run -i), whose client the kernel
// saw start it and then exit; package orphans decides. A closed stdin is
// not a gone client: the engine closes the container's stdin when the
// client's own stdin reaches EOF, while the client still runs and waits
// for the output. Here the agent asks the engine which containers run
// and how they were created, reads their first processes' stdin, and
// tells orphans.Find what the kernel saw of their start (sessions.Start):
// which client started this very instance, and whether that process
// exited (the graph saw its exit, or /proc no longer has it).

// maxInspectsPerLook bounds the engine inspections of one look: each
// running container is inspected once while its first process lives, so
// a node with thousands is read over several looks, and the list says
// how many were not checked yet.
const maxInspectsPerLook = 256

// containerLookTimeout bounds what one look asks of the engine.
const containerLookTimeout = 10 * time.Second

// seenContainer is what the engine said about a running container, kept
// from look to look while its first process lives.
type seenContainer struct {
	image, name string
	attached    bool
	init        lineage.ID
}

// lookContainers reads the running containers no session claims for
// orphans.Find, and how many it could not check and why; o.mu is held.
// seen collects the first processes whose stdin is cut off now.
func (a *Agent) lookContainers(now time.Time, seen map[lineage.ID]bool) (out []orphans.Container, unchecked int, why string) {
	cs := a.containers
	if cs.engine == nil {
		return nil, 0, ""
	}
	cs.mu.Lock()
	up, off := cs.up, cs.off
	cs.mu.Unlock()
	if !up {
		if _, err := os.Stat(cs.socket); errors.Is(err, fs.ErrNotExist) {
			return nil, 0, "" // no engine on this node: no container to look at
		}
		// Known down (checkContainers asks every second): not asked again
		// here, where every caller would wait for it.
		return nil, 0, "the running containers were not looked at: " + cmp.Or(off, "the container engine was not reached yet")
	}
	e := cs.engine
	o := &a.orphans
	ctx, cancel := context.WithTimeout(context.Background(), containerLookTimeout)
	defer cancel()
	list, err := e.List(ctx)
	if err != nil {
		return nil, 0, fmt.Sprintf("the running containers were not looked at: %v", err)
	}
	running := make(map[string]bool, len(list))
	for _, x := range list {
		running[x.ID] = true
	}
	a.pruneStarts(running)
	// A container a session's start started is that session's: it ends
	// with it. One no claim's start started (a start of what already ran)
	// is no session's, nor is one two sessions' starts may have started.
	claimed := map[string]bool{}
	all := a.tracker.Containers()
	at := a.attribution(all)
	for _, c := range all {
		if why, _ := at.decide(c, nil); why == "" {
			claimed[at.verdicts[c.Key()].ID] = true
		}
	}
	if o.containers == nil {
		o.containers = map[string]seenContainer{}
	}
	kept := map[string]bool{}
	inspects, over, failed, firstErr := 0, 0, 0, ""
	defer func() {
		unchecked = over + failed
		switch {
		case failed > 0:
			why = fmt.Sprintf("%d could not be inspected (%s)", failed, firstErr)
		case over > 0:
			why = fmt.Sprintf("more than %d to inspect at one look: run mcptrace orphans again", maxInspectsPerLook)
		}
	}()
	for _, x := range list {
		if claimed[x.ID] {
			continue // a session's: it ends with its session
		}
		sc, ok := o.containers[x.ID]
		if ok && !sc.init.IsZero() {
			if cur := a.initOf(sc.init.PID); cur.IsZero() || cur.Tick() != sc.init.Tick() {
				ok = false // restarted, or stopped since: asked again
			}
		}
		if !ok {
			if inspects == maxInspectsPerLook || ctx.Err() != nil {
				over++
				continue
			}
			inspects++
			c, err := e.Inspect(ctx, x.ID)
			switch {
			case errors.Is(err, containers.ErrNotFound):
				continue // removed since it was listed
			case err != nil:
				failed++
				firstErr = cmp.Or(firstErr, fmt.Sprintf("container %s: %v", x.ID[:12], err))
				continue
			}
			sc = seenContainer{image: c.Image, name: c.Name, attached: c.AttachedStdin}
			if c.Running && c.Pid > 0 {
				sc.init = a.initOf(uint32(c.Pid))
			}
			o.containers[x.ID] = sc
		}
		kept[x.ID] = true
		if !sc.attached || sc.init.IsZero() {
			continue // not started by a docker run -i client: never an orphan
		}
		oc := a.orphanContainer(x.ID, sc, now, seen)
		if len(at.started[x.ID]) > 0 && !oc.Client.IsZero() {
			// A session's start may have started it too (the claim and
			// a start from no session, both in the window: decide made
			// it no one's): no one client is known to have.
			oc.Client, oc.ClientUID, oc.ClientExited, oc.Contested = lineage.ID{}, 0, false, true
		}
		out = append(out, oc)
	}
	for id := range o.containers {
		if !kept[id] {
			delete(o.containers, id)
		}
	}
	return out, 0, "" // the deferred count
}

// orphanContainer is what orphans.Find needs of one running container
// created with its client's stdin attached; o.mu is held.
func (a *Agent) orphanContainer(id string, sc seenContainer, now time.Time, seen map[lineage.ID]bool) orphans.Container {
	o := &a.orphans
	c := orphans.Container{ID: id, Name: sc.name, Image: sc.image, AttachedStdin: true, Init: lineage.Process{ID: sc.init}}
	if p, ok := a.graph.Get(sc.init); ok {
		c.Init = p
	}
	c.CutFor = a.cutFor(sc.init, now, seen)
	// Its client: the one whose start, as the kernel saw it, can have
	// started this very instance (sent before its first process began),
	// when exactly one client's can.
	var verified []sessions.Start
	for _, s := range a.tracker.StartsOf(id) {
		if !a.gone(s.Client) {
			c.ClientsAlive++
		}
		// Within verifyWindow only: lateStart's proof is for claims.
		if startedBy(sc.init, s.Client, s.At, "no start from no session counts later") == "" && !slices.ContainsFunc(verified, func(v sessions.Start) bool { return v.Client == s.Client }) {
			verified = append(verified, s)
		}
	}
	switch len(verified) {
	case 0:
	case 1:
		s := verified[0]
		c.Client, c.ClientUID, c.ClientExited = s.Client, s.ClientUID, a.gone(s.Client)
	default:
		c.Contested = true
	}
	procs := a.graph.Descendants(sc.init) // the first process, then what it created
	if len(procs) == 0 {
		procs = []lineage.Process{c.Init}
	}
	for _, p := range procs {
		if p.Exited {
			continue
		}
		if u, err := o.rd.Read(p.ID); err == nil {
			c.Processes++
			c.RSSBytes += u.RSSBytes
			c.CPUSeconds += u.CPUSeconds()
		}
	}
	return c
}

// pruneStarts forgets the kernel's record of the starts of containers
// that no longer run, but those sent a moment ago (the engine may not
// list their container yet) and those of containers a session's claim
// names: a start from no session that waits with a claim's start for a
// slow engine is what makes that claim's late start unproven
// (lateStart).
func (a *Agent) pruneStarts(running map[string]bool) {
	boot := procfs.BootTimeNow()
	claimed := map[string]bool{}
	claims := a.tracker.Containers()
	cs := a.containers
	cs.mu.Lock()
	for _, c := range claims {
		claimed[c.ID] = true
		claimed[cs.verdicts[c.Key()].ID] = true
	}
	cs.mu.Unlock()
	a.tracker.PruneStarts(func(id string, latest uint64) bool {
		return running[id] || claimed[id] || latest+uint64(verifyWindow) > boot
	})
}

// gone reports whether process id has exited: the kernel said so, or
// /proc no longer has it (or has another process, or a zombie, at its
// PID).
func (a *Agent) gone(id lineage.ID) bool {
	if p, ok := a.graph.Get(id); ok && p.Exited {
		return true
	}
	st, err := procfs.ReadStat(a.opts.ProcRoot, id.PID)
	if errors.Is(err, fs.ErrNotExist) {
		return true
	}
	return err == nil && (st.StartTicks != id.Tick() || st.State == 'Z')
}

// orphanContainers is what ending the container orphans of list stops,
// each asked of the engine again within ctx (the ending's bound): one
// that restarted since it was listed (another first process) is recorded
// refused, never stopped, and once the engine does not answer the rest
// are refused without asking.
func (a *Agent) orphanContainers(ctx context.Context, list []orphans.Orphan) []enforcer.Container {
	var out []enforcer.Container
	var unreachable error
	e := a.containers.engine
	for _, x := range list {
		if x.Container == "" {
			continue
		}
		ec := enforcer.Container{ID: x.Container, Image: x.Name, Init: x.Server, UID: x.UID}
		if e == nil {
			ec.Unattributed = "no container engine is configured"
			out = append(out, ec)
			continue
		}
		if unreachable != nil {
			ec.Unattributed = "the engine could not confirm it: " + unreachable.Error()
			out = append(out, ec)
			continue
		}
		ictx, cancel := context.WithTimeout(ctx, 2*time.Second)
		c, err := e.Inspect(ictx, x.Container)
		cancel()
		switch {
		case errors.Is(err, containers.ErrNotFound):
			continue // removed since: nothing to end
		case err != nil:
			if errors.Is(err, containers.ErrUnreachable) || ctx.Err() != nil {
				unreachable = err // the rest are not asked: each would wait as long
			}
			ec.Unattributed = "the engine could not confirm it: " + err.Error()
		case !c.Running:
			continue
		default:
			if cur := a.initOf(uint32(c.Pid)); cur.IsZero() || cur.Tick() != x.Server.Tick() || cur.PID != x.Server.PID {
				ec.Unattributed = "it restarted since it was listed"
			}
		}
		out = append(out, ec)
	}
	return out
}
