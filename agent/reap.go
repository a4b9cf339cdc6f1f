package agent

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/mcptrace/mcptrace/enforcer"
	"github.com/mcptrace/mcptrace/lineage"
	"github.com/mcptrace/mcptrace/sessions"
	"github.com/mcptrace/mcptrace/state"
)

// ReasonSuperseded is the reason of the endings that reap a superseded
// server: its host started the same server again, and this older
// instance did no I/O for Options.ReapSupersededAfter.
const ReasonSuperseded = "superseded"

// serverSeen is one live server of an active session in a sample.
type serverSeen struct {
	session sessions.Session
	name    string
	// command hashes the server's program and argv: an instance is
	// superseded only by one started with the very same command, never
	// by another server that happens to have the same name.
	command uint64
	id      lineage.ID
	idleFor time.Duration
}

// reapSuperseded ends, through the enforcer, every server of servers that
// a newer instance of the same server under the same session supersedes
// and that was idle for at least after. Each ending covers the server and
// what it started (its wrappers exit when it does), under the session
// owner's authority, and is journaled and counted like any other
// (enforcer reason "superseded"). Called with the sampler's lock held.
func (a *Agent) reapSuperseded(servers []serverSeen, after time.Duration) {
	if after <= 0 {
		return
	}
	// A server is reaped once (in audit mode it stays, recorded once);
	// it is forgotten when it is no longer a live server.
	live := make(map[lineage.ID]bool, len(servers))
	for _, s := range servers {
		live[s.id] = true
	}
	for id := range a.sampler.reaping {
		if !live[id] {
			delete(a.sampler.reaping, id)
		}
	}
	slices.SortFunc(servers, func(x, y serverSeen) int {
		return cmp.Or(cmp.Compare(x.session.Owner, y.session.Owner), cmp.Compare(x.session.ID, y.session.ID),
			cmp.Compare(x.name, y.name), cmp.Compare(x.command, y.command), cmp.Compare(y.id.Start, x.id.Start), cmp.Compare(y.id.PID, x.id.PID))
	})
	for i, s := range servers {
		prev := serverSeen{}
		if i > 0 {
			prev = servers[i-1]
		}
		newer := i > 0 && prev.session.Ref() == s.session.Ref() && prev.session.Began == s.session.Began &&
			prev.name == s.name && prev.command == s.command
		if !newer || s.idleFor < after || a.sampler.reaping[s.id] {
			continue
		}
		a.reap(s)
	}
}

// reap ends one superseded server.
func (a *Agent) reap(s serverSeen) {
	key := fmt.Sprintf("%s/%s@%d/superseded/%d-%d", fmt.Sprint(s.session.Owner), s.session.ID, s.session.Began, s.id.PID, s.id.Start)
	a.mu.Lock()
	if a.stopping {
		a.mu.Unlock()
		return
	}
	a.ending.Add(1)
	a.mu.Unlock()
	if a.sampler.reaping == nil {
		a.sampler.reaping = map[lineage.ID]bool{}
	}
	a.sampler.reaping[s.id] = true
	// Per owner and session, within the tracker's log limit.
	a.limitSessionLogs(a.log).Info("reaping a superseded server", "session", s.session.ID, "owner_uid", s.session.Owner, "server", s.name,
		"pid", s.id.PID, "idle_for", s.idleFor.Round(time.Second))
	// What ends is what the tracker proves a member of the session, in
	// the server's subtree, while the session is active: once it ended,
	// its own ending takes over.
	en := enforcer.Ending{Session: s.session.ID, Generation: s.session.Generation, Reason: ReasonSuperseded, Owner: s.session.Owner,
		Members: func() []lineage.Process {
			var out []lineage.Process
			for _, p := range a.tracker.MembersBelow(s.session, s.id) {
				// With its images: spare rules and records read them.
				if full, ok := a.graph.Get(p.ID); ok {
					out = append(out, full)
				}
			}
			return out
		}}
	go func() {
		defer a.ending.Done()
		rep := a.enf.End(a.endCtx, en)
		a.mu.Lock()
		if !rep.Interrupted {
			records := rep.Records
			rep.Records = nil
			a.keepReportLocked(key, rep)
			a.journal([]state.Record{jsonRecord(recReport, reportRecord{Key: key, Report: rep, Records: records})})
		}
		a.mu.Unlock()
	}()
}
