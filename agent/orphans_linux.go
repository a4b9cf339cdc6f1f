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

// orphanLookGap spaces looks for orphans: at most two a second, however
// many callers ask.
const orphanLookGap = 500 * time.Millisecond

// orphanEndTimeout bounds one ending of orphans: the API answers within
// its write timeout, and what survives is reported, not waited for.
const orphanEndTimeout = 25 * time.Second

// orphanState remembers the I/O counters of processes no session owns
// between two looks, so that idleness is evidence: a server whose
// counters stood still since an earlier look has been idle that long.
type orphanState struct {
	mu sync.Mutex
	io ioWatch
	rd procfs.UsageReader
	// lastLook is when the last look began.
	lastLook time.Time
	// looked is when the sampler last looked; picture what it found.
	looked  time.Time
	picture map[exporter.UnownedKey]exporter.UnownedStats
}

// unownedPicture is the metrics' view of the orphans: from a new look
// when the last is Options.OrphansEvery old, else the last one's.
// Called by the sampler.
func (a *Agent) unownedPicture(now time.Time) map[exporter.UnownedKey]exporter.UnownedStats {
	o := &a.orphans
	o.mu.Lock()
	due := o.picture == nil || now.Sub(o.looked) >= a.opts.OrphansEvery
	last := o.picture
	o.mu.Unlock()
	if !due {
		return last
	}
	list, err := a.Orphans(0, true)
	if err != nil {
		a.log.Warn("looking for orphans for the metrics failed", "err", err)
		return last
	}
	pic := map[exporter.UnownedKey]exporter.UnownedStats{}
	for _, x := range list {
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
// processes no session owns, within the agent's scope: all of them for
// root, a caller's own (by real uid) for anyone else.
func (a *Agent) Orphans(uid uint32, root bool) ([]orphans.Orphan, error) {
	procs := a.tracker.Unowned(func(p lineage.Process) bool { return root || p.UID == uid })
	in := orphans.Input{
		Ancestors: a.graph.Ancestors,
		Spared:    a.enf.Spares,
		HostKind: func(p lineage.Process) string {
			img := p.Current()
			name, _ := a.tracker.MatchRule(sessions.Image{Filename: img.Filename, Comm: p.Comm, Argv: img.Argv})
			return name
		},
		IdleAfter: a.opts.IdleAfter,
	}
	o := &a.orphans
	o.mu.Lock()
	defer o.mu.Unlock()
	// A look may scan every process's descriptors: any caller can ask
	// for one, so looks are spaced, whoever asks.
	if wait := orphanLookGap - time.Since(o.lastLook); wait > 0 {
		time.Sleep(wait)
	}
	o.lastLook = time.Now()
	o.io.begin()
	o.rd.Root = a.opts.ProcRoot
	now := time.Now()
	pipes := map[uint64]bool{}
	for _, p := range procs {
		// Only a wrapper, what a wrapper started, or a server that names
		// its package can be listed or lead to a listing: read /proc for
		// those alone.
		if !a.mayLeak(p) {
			continue
		}
		pr := orphans.Proc{Process: p, StdinWriters: -1}
		f, ferr := procfs.ReadFacts(a.opts.ProcRoot, p.ID)
		st, serr := procfs.ReadStat(a.opts.ProcRoot, p.ID.PID)
		same := serr == nil && (lineage.ID{PID: p.ID.PID, Start: st.StartTicks * lineage.TickNS}).SameTick(p.ID)
		if ferr == nil && same {
			pr.Facts, pr.FactsOK, pr.PPID = f, true, st.PPID
			if f.Stdin == procfs.StdinPipe {
				pipes[f.StdinPipe] = true
			}
		}
		if u, err := o.rd.Read(p.ID); err == nil {
			pr.Usage, pr.IdleFor = u, o.io.idleFor(p.ID, u.IOBytes, now)
		}
		in.Procs = append(in.Procs, pr)
	}
	// Forget the counters of what is gone, or owned by a session now. A
	// caller's look sees only that caller's processes: it forgets only
	// what has exited.
	if root {
		o.io.forgetUnseen()
	} else {
		for id := range o.io.io {
			if p, ok := a.graph.Get(id); !ok || p.Exited {
				delete(o.io.io, id)
			}
		}
	}
	for i := range in.Procs {
		pr := &in.Procs[i]
		if !pr.FactsOK || pr.Facts.Stdin != procfs.StdinSocket {
			continue
		}
		switch closed, err := procfs.UnixPeerClosed(pr.Facts.StdinSocket); {
		case err != nil:
			// Not a unix socket, or sock_diag is missing: not told.
		case closed:
			pr.StdinWriters = 0
		default:
			pr.StdinWriters = 1
		}
	}
	if len(pipes) > 0 {
		writers, unseen, err := procfs.PipeWriters(a.opts.ProcRoot, pipes)
		switch {
		case err != nil:
			a.log.Warn("reading who writes the stdin pipes of unowned processes failed: none is listed as cut off", "err", err)
		case unseen > 0:
			a.log.Warn("some processes' descriptors could not be read: no stdin pipe is proven cut off", "unreadable", unseen)
		default:
			for i := range in.Procs {
				if f := in.Procs[i].Facts; in.Procs[i].FactsOK && f.Stdin == procfs.StdinPipe {
					in.Procs[i].StdinWriters = len(writers[f.StdinPipe])
				}
			}
		}
	}
	return orphans.Find(in), nil
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

// EndOrphans ends what Orphans lists now for the caller (only the
// certain ones with certainOnly), each from its Top down, through the
// enforcer with the caller's authority: root ends any uid's, anyone else
// only what they could signal themselves (Ending.Owner). With dryRun an
// enforcer in audit mode runs the same checks and ends nothing. What ends
// is re-read at every sweep round: a process a session owns by then, or
// outside the scope, is left alone.
func (a *Agent) EndOrphans(ctx context.Context, uid uint32, root, certainOnly, dryRun bool) ([]orphans.Orphan, enforcer.Report, error) {
	list, err := a.Orphans(uid, root)
	if err != nil {
		return nil, enforcer.Report{}, err
	}
	if certainOnly {
		list = slices.DeleteFunc(list, func(o orphans.Orphan) bool { return o.Confidence != orphans.Certain })
	}
	owner := uid
	if root {
		owner = 0
	}
	tops := make([]lineage.ID, 0, len(list))
	for _, o := range list {
		tops = append(tops, o.Top)
	}
	en := enforcer.Ending{Session: OrphansSession, Reason: ReasonOrphan, Owner: owner, Members: func() []lineage.Process {
		unowned := map[lineage.ID]bool{}
		for _, p := range a.tracker.Unowned(func(p lineage.Process) bool { return root || p.UID == uid }) {
			unowned[p.ID] = true
		}
		var out []lineage.Process
		for _, t := range tops {
			for _, p := range a.graph.Descendants(t) {
				if !p.Exited && unowned[p.ID] {
					out = append(out, p)
				}
			}
		}
		return out
	}}
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
	ectx, cancel := context.WithTimeout(ctx, orphanEndTimeout)
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
		a.journal([]state.Record{jsonRecord(recReport, reportRecord{Key: key, Report: kept, Records: records})})
		a.mu.Unlock()
	}
	return list, rep, nil
}
