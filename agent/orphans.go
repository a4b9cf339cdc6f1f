package agent

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/mcptrace/mcptrace/enforcer"
	"github.com/mcptrace/mcptrace/exporter"
	"github.com/mcptrace/mcptrace/lineage"
	"github.com/mcptrace/mcptrace/orphans"
	"github.com/mcptrace/mcptrace/procfs"
	"github.com/mcptrace/mcptrace/roles"
	"github.com/mcptrace/mcptrace/sessions"
	"github.com/mcptrace/mcptrace/state"
)

// ReasonOrphan is the reason of the endings `mcptrace orphans --end`
// asks for.
const ReasonOrphan = "orphan"

// OrphansSession names the endings of orphans in kill records: not a
// valid session ID, so no session's records mix with them.
const OrphansSession = "(orphans)"

// orphanLookGap is how long one look for orphans answers every caller:
// a look reads /proc for every unowned wrapper and server, and anyone may
// ask, so no one can make the agent look more than twice a second.
const orphanLookGap = 500 * time.Millisecond

// orphanEndTimeout bounds one ending of orphans: the API answers within
// its write timeout, and what survives is reported, not waited for.
const orphanEndTimeout = 25 * time.Second

// orphanState is what the agent remembers of its looks for orphans.
type orphanState struct {
	mu sync.Mutex // one look at a time; guards what follows
	// io remembers I/O counters from look to look (idleness); cut when
	// each stdin was first seen cut off (a cut-off must last).
	io  ioWatch
	cut map[lineage.ID]time.Time
	rd  procfs.UsageReader
	// containers is what the engine said of each running container,
	// kept while its first process lives (lookContainers).
	containers map[string]seenContainer
	// last is the last look (every uid's), reused for orphanLookGap.
	last     orphans.Found
	lastLook time.Time
	// looked and picture are the metrics' last look and what it found.
	looked  time.Time
	picture map[exporter.UnownedKey]exporter.UnownedStats

	// endMu lets one ending of orphans run at a time.
	endMu sync.Mutex
}

// unownedPicture is the metrics' view of the orphans: from a new look
// when the last is Options.OrphansEvery old, else the last one's. Called
// by the sampler.
func (a *Agent) unownedPicture(now time.Time) map[exporter.UnownedKey]exporter.UnownedStats {
	o := &a.orphans
	o.mu.Lock()
	due := o.picture == nil || now.Sub(o.looked) >= a.opts.OrphansEvery
	last := o.picture
	o.mu.Unlock()
	if !due {
		return last
	}
	found, err := a.Orphans(0, true)
	if err != nil {
		a.log.Warn("looking for orphans for the metrics failed", "err", err)
		return last
	}
	pic := map[exporter.UnownedKey]exporter.UnownedStats{}
	for _, x := range found.Orphans {
		k := exporter.UnownedKey{HostKind: x.HostKind, Kind: string(x.Kind), Confidence: string(x.Confidence)}
		st := pic[k]
		st.Servers++
		st.Processes += x.Processes
		st.RSSBytes += x.RSSBytes
		pic[k] = st
	}
	o.mu.Lock()
	o.looked, o.picture = now, pic
	o.mu.Unlock()
	return pic
}

// Orphans lists the leaked servers (package orphans) among the live
// processes no session owns, within the agent's scope: every uid's for
// root, a caller's own (by real uid) for anyone else. Every caller is
// answered from one look, taken again when the last is orphanLookGap old.
func (a *Agent) Orphans(uid uint32, root bool) (orphans.Found, error) {
	o := &a.orphans
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.lastLook.IsZero() || time.Since(o.lastLook) >= orphanLookGap {
		prev := o.last.Orphans
		o.last = a.look()
		o.lastLook = time.Now()
		a.emitOrphans(prev, o.last.Orphans)
	}
	if root {
		found := o.last
		found.Orphans = slices.Clone(found.Orphans)
		return found, nil
	}
	// What was not checked is every user's containers: root's to know.
	var mine orphans.Found
	for _, x := range o.last.Orphans {
		if x.UID == uid {
			mine.Orphans = append(mine.Orphans, x)
		}
	}
	return mine, nil
}

// look reads what package orphans needs of every unowned wrapper and
// server and finds the orphans; o.mu is held.
func (a *Agent) look() orphans.Found {
	o := &a.orphans
	in := orphans.Input{
		Ancestors: a.graph.Ancestors,
		Spared:    a.enf.Spares,
		HostKind: func(p lineage.Process) string {
			img := p.Current()
			name, _ := a.tracker.MatchRule(sessions.Image{Filename: img.Filename, Comm: p.Comm, Argv: img.Argv})
			return name
		},
		IdleAfter:    a.opts.IdleAfter,
		ConfirmAfter: a.opts.OrphansConfirmAfter,
	}
	o.io.begin()
	if o.cut == nil {
		o.cut = map[lineage.ID]time.Time{}
	}
	o.rd.Root = a.opts.ProcRoot
	now := time.Now()
	seen := map[lineage.ID]bool{}
	for _, p := range a.tracker.Unowned(nil) {
		// Only a wrapper, what a wrapper started, or a server that names
		// its package can be listed or lead to a listing: /proc is read
		// for those alone.
		if !a.mayLeak(p) {
			continue
		}
		pr := orphans.Proc{Process: p}
		f, ferr := procfs.ReadFacts(a.opts.ProcRoot, p.ID)
		if ferr == nil {
			pr.Facts, pr.FactsOK, pr.PPID = f, true, f.Stat.PPID
		}
		if pr.FactsOK && (f.Stdin == procfs.StdinPipe || f.Stdin == procfs.StdinSocket) {
			pr.CutFor = a.cutFor(p.ID, now, seen)
		}
		if u, err := o.rd.Read(p.ID); err == nil {
			pr.Usage, pr.IdleFor = u, o.io.idleFor(p.ID, u.IOBytes, now)
		}
		in.Procs = append(in.Procs, pr)
	}
	var unchecked int
	var why string
	in.Containers, unchecked, why = a.lookContainers(now, seen)
	o.io.forgetUnseen()
	for id := range o.cut {
		if !seen[id] {
			delete(o.cut, id)
		}
	}
	found := orphans.Find(in)
	found.ContainersUnchecked, found.ContainersWhy = unchecked, why
	// What ending an orphan would end, counted as the ending will.
	for i := range found.Orphans {
		x := &found.Orphans[i]
		if x.Container != "" {
			continue // counted from the container's processes
		}
		ms := a.orphanMembers(*x)
		x.Processes, x.RSSBytes, x.CPUSeconds = len(ms), 0, 0
		for _, m := range ms {
			if u, err := o.rd.Read(m.ID); err == nil {
				x.RSSBytes += u.RSSBytes
				x.CPUSeconds += u.CPUSeconds()
			}
		}
	}
	return found
}

// cutFor is how long id's stdin has been seen cut off, across looks (0:
// not cut off now, or it could not be told), counted from before this
// look, so that a cut-off seen now for the first time is not yet
// evidence; seen collects it. o.mu is held.
func (a *Agent) cutFor(id lineage.ID, now time.Time, seen map[lineage.ID]bool) time.Duration {
	cut, err := procfs.StdinCutOff(a.opts.ProcRoot, id)
	if err != nil || !cut {
		return 0
	}
	o := &a.orphans
	first, ok := o.cut[id]
	if !ok {
		first = now
		o.cut[id] = now
	}
	seen[id] = true
	return max(now.Sub(first), time.Nanosecond)
}

// mayLeak: p is a wrapper, was started by one, or names its package.
func (a *Agent) mayLeak(p lineage.Process) bool {
	if _, wrapper := roles.Identity(p.Current()); wrapper || roles.Packaged(p) {
		return true
	}
	c, ok := a.graph.Get(p.Creator)
	if !ok {
		return false
	}
	_, wrapper := roles.Identity(c.Current())
	return wrapper
}

// orphanMembers is what ending x ends, as it is now: the chain from
// x.Top down to the server, the server, and what the server created
// that stayed in its session (setsid(2)): a daemon it detached (tmux,
// nohup'd into its own session, a systemd scope) is the user's, not the
// leak's. Every one alive, owned by no active session, of x's uid, and
// in no daemon's or container's cgroup; with its images (spare rules and
// records read them).
func (a *Agent) orphanMembers(x orphans.Orphan) []lineage.Process {
	// keep reads p (by identity) and says whether it may be ended, and
	// its session ID.
	keep := func(p lineage.Process) (uint32, bool) {
		if p.Exited || p.UID != x.UID {
			return 0, false
		}
		if _, owned := a.tracker.SessionOf(p.ID); owned {
			return 0, false
		}
		f, err := procfs.ReadFacts(a.opts.ProcRoot, p.ID)
		return f.Stat.Session, err == nil && !orphans.Daemon(f.Cgroup)
	}
	var out []lineage.Process
	// The chain, server first, up to Top.
	chain := a.graph.Ancestors(x.Server)
	topAt := slices.IndexFunc(chain, func(p lineage.Process) bool { return p.ID == x.Top })
	if topAt < 0 {
		return nil // the server is no longer below Top: nothing is proven
	}
	for _, p := range chain[1 : topAt+1] {
		if _, ok := keep(p); ok {
			out = append(out, p)
		}
	}
	server, ok := a.graph.Get(x.Server)
	if !ok {
		return out
	}
	sid, ok := keep(server)
	if !ok {
		return out
	}
	out = append(out, server)
	for _, p := range a.graph.Descendants(x.Server) {
		if s, ok := keep(p); ok && s == sid && p.ID != x.Server {
			out = append(out, p)
		}
	}
	return out
}

// EndOrphans ends what Orphans lists now for the caller (only the
// certain ones with certainOnly), each what orphanMembers says, through
// the enforcer with the caller's own authority: root ends any uid's,
// anyone else only what they could signal themselves, whatever
// enforcer.cross-uid says (Ending.OwnerOnly). With dryRun an enforcer in
// audit mode runs the same checks and ends nothing. The members are read
// again at every sweep round. One ending of orphans runs at a time.
func (a *Agent) EndOrphans(ctx context.Context, uid uint32, root, certainOnly, dryRun bool) ([]orphans.Orphan, enforcer.Report, error) {
	o := &a.orphans
	o.endMu.Lock()
	defer o.endMu.Unlock()
	found, err := a.Orphans(uid, root)
	if err != nil {
		return nil, enforcer.Report{}, err
	}
	list := found.Orphans
	if certainOnly {
		list = slices.DeleteFunc(list, func(x orphans.Orphan) bool { return x.Confidence != orphans.Certain })
	}
	owner := uid
	if root {
		owner = 0
	}
	en := enforcer.Ending{Session: OrphansSession, Reason: ReasonOrphan, Owner: owner, OwnerOnly: true, Members: func() []lineage.Process {
		var out []lineage.Process
		seen := map[lineage.ID]bool{}
		for _, x := range list {
			if x.Container != "" {
				continue // the engine stops it (Containers below)
			}
			for _, p := range a.orphanMembers(x) {
				if !seen[p.ID] {
					seen[p.ID] = true
					out = append(out, p)
				}
			}
		}
		return out
	}}
	// Containers are confirmed once, within the ending's bound, before
	// the first sweep: the engine stops each with its own grace.
	var stop []enforcer.Container
	var ectx context.Context
	en.Containers = func() []enforcer.Container {
		if stop == nil {
			stop = a.orphanContainers(ectx, list)
		}
		return stop
	}
	a.mu.Lock()
	if a.stopping {
		a.mu.Unlock()
		return list, enforcer.Report{}, fmt.Errorf("the agent is stopping")
	}
	a.ending.Add(1)
	a.mu.Unlock()
	defer a.ending.Done()
	e := a.enf
	if dryRun {
		cfg := e.Config()
		cfg.Mode = enforcer.ModeAudit
		e = enforcer.New(cfg, nil, a.log.With("dry_run", true))
	}
	var cancel context.CancelFunc
	ectx, cancel = context.WithTimeout(ctx, orphanEndTimeout)
	defer cancel()
	a.log.Info("ending orphans", "caller_uid", uid, "orphans", len(list), "certain_only", certainOnly, "dry_run", dryRun)
	rep := e.End(ectx, en)
	if !dryRun && len(rep.Records) > 0 {
		key := fmt.Sprintf("%d/%s@%d", owner, OrphansSession, time.Now().UnixNano())
		records := rep.Records
		a.mu.Lock()
		kept := rep
		kept.Records = nil
		a.keepReportLocked(key, kept)
		a.emitRecords(nil, records)
		a.journal([]state.Record{jsonRecord(recReport, reportRecord{Key: key, Report: kept, Records: records})})
		a.mu.Unlock()
	}
	// The next look must not answer from before the ending.
	o.mu.Lock()
	o.lastLook = time.Time{}
	o.mu.Unlock()
	return list, rep, nil
}
