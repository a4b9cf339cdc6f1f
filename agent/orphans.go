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
// a look walks every unowned wrapper and what they started, and reads
// /proc for the servers among them, and anyone may ask, so no one can
// make the agent look more than twice a second.
const orphanLookGap = 500 * time.Millisecond

// orphanEndTimeout bounds one ending of orphans: the API answers within
// its write timeout, and what survives is reported, not waited for.
const orphanEndTimeout = 25 * time.Second

// orphanState is what the agent remembers of its looks for orphans.
type orphanState struct {
	mu sync.Mutex // one look at a time; guards what follows
	// io remembers I/O counters from look to look (idleness); cut when
	// each stdin was first seen cut off (a cut-off must last).
	io     ioWatch
	cut    map[lineage.ID]time.Time
	outCut map[lineage.ID]time.Time
	rd     procfs.UsageReader
	// containers is what the engine said of each running container,
	// kept while its first process lives (lookContainers).
	containers map[string]seenContainer
	// last is the last look (every uid's), reused for orphanLookGap;
	// listed what it read of each process an ending of it would end.
	last     orphans.Found
	listed   listing
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
	found, _ := a.orphansListed(uid, root)
	return found, nil
}

// orphansListed is Orphans with what the same look read of the
// processes an ending of them would end.
func (a *Agent) orphansListed(uid uint32, root bool) (orphans.Found, listing) {
	o := &a.orphans
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.lastLook.IsZero() || time.Since(o.lastLook) >= orphanLookGap {
		prev := o.last.Orphans
		o.last, o.listed = a.look()
		o.lastLook = time.Now()
		a.emitOrphans(prev, o.last.Orphans)
	}
	return forCaller(o.last, uid, root), o.listed
}

// For is what caller uid (root: every uid's) may see of found.
func forCaller(found orphans.Found, uid uint32, root bool) orphans.Found {
	if root {
		found.Orphans = slices.Clone(found.Orphans)
		found.Candidates = slices.Clone(found.Candidates)
		return found
	}
	// What was not checked is every user's containers, and what is
	// pending every user's servers: root's to know.
	var mine orphans.Found
	for _, x := range found.Orphans {
		if x.UID == uid {
			mine.Orphans = append(mine.Orphans, x)
		}
	}
	for _, x := range found.Candidates {
		if x.UID == uid {
			mine.Candidates = append(mine.Candidates, x)
		}
	}
	return mine
}

// listing is what a look read of every process an ending of what it
// listed would end, by identity: an ending signals none that changed
// since (EndOrphans).
type listing struct {
	// at is when the look began (CLOCK_BOOTTIME ns): a process started
	// later was created since, by a listed one or not at all.
	at    uint64
	procs map[lineage.ID]listed
}

// listed is one process as a look read it.
type listed struct {
	uid      uint32 // real, effective and saved
	exe      string // /proc/PID/exe
	execTime uint64 // its current image's exec time, as the graph had it
	execs    int    // its images, as the graph had them
}

// look hands package orphans every unowned wrapper, what a wrapper
// started and every server that names its package, reads /proc for
// those Find asks for (orphans.Input.Read), and finds the orphans, with
// what it read of every process an ending of them would end; o.mu is
// held.
func (a *Agent) look() (orphans.Found, listing) {
	lst := listing{at: procfs.BootTimeNow(), procs: map[lineage.ID]listed{}}
	o := &a.orphans
	in := orphans.Input{
		Ancestors: a.graph.Ancestors,
		Spared:    a.enf.Spares,
		HostKind: func(p lineage.Process) string {
			img := p.Current()
			name, _ := a.tracker.MatchRule(sessions.Image{Filename: img.Filename, Comm: p.Comm, Argv: img.Argv})
			return name
		},
		HoldsStdio:   a.holdsStdio,
		IdleAfter:    a.opts.IdleAfter,
		ConfirmAfter: a.opts.OrphansConfirmAfter,
	}
	o.io.begin()
	if o.cut == nil {
		o.cut, o.outCut = map[lineage.ID]time.Time{}, map[lineage.ID]time.Time{}
	}
	o.rd.Root = a.opts.ProcRoot
	now := time.Now()
	seen := map[lineage.ID]bool{}
	// Only a wrapper, what a wrapper started, or a server that names its
	// package can be listed or lead to a listing; of those, Find has
	// /proc read for the ones its listings can use (Read). Counted first,
	// so that in.Procs (376 bytes a process) is made once at its size:
	// a look over 10,000 a wrapper started held twice that while it grew.
	unowned := a.tracker.Unowned(nil)
	wraps := map[lineage.ID]bool{}
	may := make([]bool, len(unowned))
	n := 0
	for i, p := range unowned {
		if may[i] = a.mayLeak(p, wraps); may[i] {
			n++
		}
	}
	in.Procs = make([]orphans.Proc, 0, n)
	for i, p := range unowned {
		if may[i] {
			in.Procs = append(in.Procs, orphans.Proc{Process: p})
		}
	}
	in.Read = func(pr *orphans.Proc) {
		id := pr.ID
		f, ferr := procfs.ReadFacts(a.opts.ProcRoot, id)
		if ferr == nil {
			pr.Facts, pr.FactsOK, pr.PPID = f, true, f.Stat.PPID
		}
		if pr.FactsOK && (stdio(f.Stdin) || stdio(f.Stdout)) {
			if st, err := procfs.ReadStdio(a.opts.ProcRoot, id); err == nil {
				pr.Stdio = st
				pr.CutFor = cutFor(o.cut, id, st.InCut, now, seen)
				pr.OutCutFor = cutFor(o.outCut, id, st.OutCut, now, seen)
			}
		}
		if u, err := o.rd.Read(id); err == nil {
			pr.Usage, pr.IdleFor = u, o.io.idleFor(id, u.IOBytes, now)
		}
	}
	var unchecked int
	var why string
	in.Containers, unchecked, why = a.lookContainers(now, seen)
	found := orphans.Find(in)
	// What this look did not read is forgotten: a cut-off or an idleness
	// counts from the look that reads it again.
	o.io.forgetUnseen()
	for _, m := range []map[lineage.ID]time.Time{o.cut, o.outCut} {
		for id := range m {
			if !seen[id] {
				delete(m, id)
			}
		}
	}
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
			if f, err := procfs.ReadFacts(a.opts.ProcRoot, m.ID); err == nil {
				lst.procs[m.ID] = listed{uid: x.UID, exe: f.Exe, execTime: m.Current().Time, execs: len(m.Images)}
			}
		}
	}
	return found, lst
}

// stdio: a pipe or a socket, what a host's stdio is.
func stdio(k procfs.StdinKind) bool { return k == procfs.StdinPipe || k == procfs.StdinSocket }

// holdsStdio reports whether holder holds the other end of both p's
// stdin and stdout (orphans.Input.HoldsStdio): for a unix socket, holder
// made its peer (a socketpair: the host that spawned the chain); for a
// pipe, holder has it open.
func (a *Agent) holdsStdio(holder lineage.Process, p *orphans.Proc) bool {
	if holder.Exited {
		return false
	}
	var pipes []uint64
	for _, end := range []struct {
		kind procfs.StdinKind
		ino  uint64
		peer uint32
	}{{p.Facts.Stdin, p.Facts.StdinInode, p.Stdio.InPeer}, {p.Facts.Stdout, p.Facts.StdoutInode, p.Stdio.OutPeer}} {
		switch {
		case end.kind == procfs.StdinPipe:
			pipes = append(pipes, end.ino)
		case end.kind == procfs.StdinSocket && end.peer != 0:
			if end.peer != holder.ID.PID {
				return false
			}
		default:
			return false
		}
	}
	if len(pipes) == 0 {
		// Both are sockets made by a process of holder's PID: holder, if
		// it lives (it cannot share its PID with another live process).
		st, err := procfs.Read(a.opts.ProcRoot, holder.ID.PID)
		return err == nil && st.ID.SameTick(holder.ID)
	}
	held, err := procfs.HoldsPipes(a.opts.ProcRoot, holder.ID, pipes...)
	return err == nil && held
}

// cutFor (the method) is cutFor of id's stdin alone (a container's first
// process). o.mu is held.
func (a *Agent) cutFor(id lineage.ID, now time.Time, seen map[lineage.ID]bool) time.Duration {
	cut, err := procfs.StdinCutOff(a.opts.ProcRoot, id)
	return cutFor(a.orphans.cut, id, err == nil && cut, now, seen)
}

// cutFor is how long an fd of id has been seen cut off (cut now),
// across looks, by first (when each was first seen so): 0 when it is not
// cut off now, counted from before this look so that a cut-off seen now
// for the first time is not yet evidence; seen collects id. o.mu is
// held.
func cutFor(first map[lineage.ID]time.Time, id lineage.ID, cut bool, now time.Time, seen map[lineage.ID]bool) time.Duration {
	if !cut {
		delete(first, id)
		return 0
	}
	at, ok := first[id]
	if !ok {
		at = now
		first[id] = now
	}
	seen[id] = true
	return max(now.Sub(at), time.Nanosecond)
}

// mayLeak: p is a wrapper, was started by one, or names its package.
// wraps holds the verdict on each creator asked about (is it a wrapper),
// so that a look reads a creator of many once, not a copy of it each.
func (a *Agent) mayLeak(p lineage.Process, wraps map[lineage.ID]bool) bool {
	p = orphans.Untitled(p)
	if _, wrapper := roles.Identity(p.Current()); wrapper || roles.Packaged(p) {
		return true
	}
	w, ok := wraps[p.Creator]
	if !ok {
		if c, found := a.graph.Get(p.Creator); found {
			_, w = roles.Identity(c.Current())
		}
		wraps[p.Creator] = w
	}
	return w
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
		if p.Exited {
			return 0, false
		}
		if _, owned := a.tracker.SessionOf(p.ID); owned {
			return 0, false
		}
		// Its uids as /proc says now, not the graph's of its last exec.
		f, err := procfs.ReadFacts(a.opts.ProcRoot, p.ID)
		u := f.UIDs
		return f.Stat.Session, err == nil && !orphans.Daemon(f.Cgroup) && u.Real == x.UID && u.Effective == x.UID && u.Saved == x.UID
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

// EndOrphans ends what Orphans lists now for the caller (the certain
// ones, and the likely ones too with includeLikely), each what
// orphanMembers says, through the enforcer with the caller's own
// authority: root ends any uid's, anyone else only what they could
// signal themselves, whatever enforcer.cross-uid says
// (Ending.OwnerOnly). Before it is admitted and before every signal,
// each process is read again through its pidfd and refused when it is
// not what the look listed (verifyListed). With dryRun an enforcer in
// audit mode runs the same checks and ends nothing. The members are read
// again at every sweep round. One ending of orphans runs at a time.
func (a *Agent) EndOrphans(ctx context.Context, uid uint32, root, includeLikely, dryRun bool) ([]orphans.Orphan, enforcer.Report, error) {
	o := &a.orphans
	o.endMu.Lock()
	defer o.endMu.Unlock()
	found, lst := a.orphansListed(uid, root)
	list := found.Orphans
	if !includeLikely {
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
	}, Verify: verifyListed(lst)}
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
	// What a caller asks for as often as they like logs within their
	// uid's bound, shared with every endpoint (issue 31: 8 connections of
	// one user asking for dry runs wrote 72,097 lines in 10 s); root's
	// all go out.
	lg := a.log
	if srv := a.apiServer(); srv != nil {
		lg = srv.CallerLog(uid)
	}
	if len(list) == 0 {
		lg.Debug("ending orphans: none to end", "caller_uid", uid, "include_likely", includeLikely, "dry_run", dryRun)
		return list, enforcer.Report{}, nil
	}
	e := a.enf
	if dryRun {
		cfg := e.Config()
		cfg.Mode = enforcer.ModeAudit
		e = enforcer.New(cfg, nil, lg.With("dry_run", true))
	}
	var cancel context.CancelFunc
	ectx, cancel = context.WithTimeout(ctx, orphanEndTimeout)
	defer cancel()
	lg.Info("ending orphans", "caller_uid", uid, "orphans", len(list), "include_likely", includeLikely, "dry_run", dryRun)
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

// verifyListed is the check an ending of orphans makes of each process
// before it is admitted and before every signal (enforcer.Ending.Verify):
// it must be what the look listed, as its pidfd shows it now: the same
// uid (real, effective and saved: a process that became root since is
// never ended as its old uid's), the same program (/proc/PID/exe), and
// no exec since (the graph's current image). A process the look did not
// read must have been created since the look by one it listed (or one
// so accepted), and run as that one's uid: a server's worker forked
// during the grace.
func verifyListed(lst listing) func(lineage.Process, lineage.Snapshot, procfs.UIDs) string {
	var mu sync.Mutex
	accepted := map[lineage.ID]uint32{}
	return func(p lineage.Process, now lineage.Snapshot, u procfs.UIDs) string {
		mu.Lock()
		defer mu.Unlock()
		want, ok := lst.procs[p.ID]
		if !ok {
			uid, byListed := accepted[p.Creator]
			if c, ok := lst.procs[p.Creator]; ok {
				uid, byListed = c.uid, true
			}
			switch {
			case !byListed || p.ID.Start <= lst.at:
				return "changed since it was listed: not a process the listing read, nor one a listed process created since"
			case u.Real != uid || u.Effective != uid || u.Saved != uid:
				return fmt.Sprintf("changed since it was listed: its uids (real %d, effective %d, saved %d) are not its creator's, %d", u.Real, u.Effective, u.Saved, uid)
			}
			accepted[p.ID] = uid
			return ""
		}
		switch {
		case u.Real != want.uid || u.Effective != want.uid || u.Saved != want.uid:
			return fmt.Sprintf("changed since it was listed: its uids are now real %d, effective %d, saved %d, not %d", u.Real, u.Effective, u.Saved, want.uid)
		case now.Filename != want.exe:
			return "changed since it was listed: it runs another program (an exec)"
		case len(p.Images) != want.execs || p.Current().Time != want.execTime:
			return "changed since it was listed: it executed a program since"
		}
		return ""
	}
}
