package agent

import (
	"cmp"

	"github.com/mcptrace/mcptrace/enforcer"
	"github.com/mcptrace/mcptrace/internal/quota"
	"github.com/mcptrace/mcptrace/lineage"
	"github.com/mcptrace/mcptrace/sessions"
	"github.com/mcptrace/mcptrace/state"
)

// Endings: what the tracker decided to end goes to the enforcer. An
// ending is pending from the moment the tracker decides it (the event or
// operation that decided it is journaled, and replaying the journal
// decides it again) until its report is journaled, so an ending
// interrupted by a stop or a crash resumes at the next start. Endings are
// keyed by sessions.Action.Key: one session instance (an ID may be taken
// again once its session ended) and, for a marker, one generation.

// markPending records the endings of acts as pending; a.mu is held. It
// returns the actions to hand to the enforcer (startAll) once what decided
// them is journaled.
func (a *Agent) markPending(acts []sessions.Action) []sessions.Action {
	a.emitActions(acts)
	starts := uncovered(acts)
	for _, act := range starts {
		a.pending[act.Key()] = act
	}
	return starts
}

// uncovered leaves out the actions of sessions that ended because an
// ending in the same batch ended them (sessions.Action.Within): that
// ending's members include theirs.
func uncovered(acts []sessions.Action) []sessions.Action {
	keys := map[string]bool{}
	for _, act := range acts {
		keys[act.Key()] = true
	}
	var out []sessions.Action
	for _, act := range acts {
		if act.Within == "" || !keys[act.Within] {
			out = append(out, act)
		}
	}
	return out
}

// startAll hands actions to the enforcer, each in its own goroutine. Call
// it with what markPending returned, once journaled, without a.mu.
func (a *Agent) startAll(acts []sessions.Action) {
	for _, act := range acts {
		a.start(act)
	}
}

// start runs the enforcer for one action; its report is journaled and the
// action leaves pending unless the agent stopped first. Once the agent is
// stopping, nothing starts: the action stays pending for the next start.
func (a *Agent) start(act sessions.Action) {
	key := act.Key()
	a.mu.Lock()
	if a.running[key] || a.stopping {
		a.mu.Unlock()
		return // resumed and started again by a scan: one enforcement is enough
	}
	a.running[key] = true
	a.ending.Add(1)
	a.mu.Unlock()
	s := act.End
	en := enforcer.Ending{Session: s.ID, Generation: act.Generation, EndedAt: s.EndedAt, Reason: s.EndReason, Owner: s.Owner}
	if act.Generation != 0 {
		cutoff := act.Cutoff
		en.EndedAt, en.Reason = cutoff, "marker"
		en.Members = func() []lineage.Process { return a.tracker.MembersBefore(s, cutoff) }
		en.Containers = func() []enforcer.Container {
			return a.endingContainers(a.endCtx, a.tracker.ContainersBefore(s, cutoff))
		}
	} else {
		en.Members = func() []lineage.Process { return a.tracker.MembersOf(s) }
		en.Containers = func() []enforcer.Container { return a.endingContainers(a.endCtx, a.tracker.ContainersOf(s)) }
	}
	if !act.Sender.IsZero() {
		en.Last = []lineage.ID{act.Sender}
	}
	go func() {
		defer a.ending.Done()
		rep := a.enf.End(a.endCtx, en)
		// The history's record while the containers this ending stopped
		// are still the session's; the one with its report follows.
		a.recordSession(s)
		defer a.kickHistory()
		a.mu.Lock()
		defer a.mu.Unlock()
		delete(a.running, key)
		if rep.Interrupted {
			a.log.Info("ending interrupted; it resumes at the next start", "session", rep.Session, "generation", rep.Generation)
			return
		}
		records := rep.Records
		rep.Records = nil
		a.emitRecords(&s, records)
		// A container this ending stopped is not the session's any more:
		// started again, it is whoever starts it's.
		for _, r := range records {
			if r.Container != "" && (r.Result == enforcer.ResultKilled || r.Result == enforcer.ResultExitedBeforeSignal) {
				a.tracker.ForgetContainer(r.Container)
			}
		}
		a.keepReportLocked(key, rep)
		delete(a.pending, key)
		a.journal([]state.Record{jsonRecord(recReport, reportRecord{Key: key, Report: rep, Records: records})})
	}()
}

// resumePending starts again the endings a previous agent did not finish.
func (a *Agent) resumePending() {
	a.mu.Lock()
	var acts []sessions.Action
	for _, act := range a.pending {
		acts = append(acts, act)
	}
	a.mu.Unlock()
	for _, act := range acts {
		a.log.Info("resuming an ending the previous agent did not finish", "ending", act.Key())
		a.start(act)
	}
	a.boot.resumed = len(acts)
}

func (a *Agent) pendingCount() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.pending)
}

// newReports returns the store of finished reports (without records; the
// enforcer bounds those). Each session owner keeps as many as the tracker
// keeps ended sessions on the node (sessions.Config.MaxEnded), all owners
// together eight times that, as the enforcer's records: one user's churn
// evicts its own oldest reports, never another user's while it holds
// more than they do. O(1) per report kept.
func newReports(cfg sessions.Config) *quota.FIFO[string, enforcer.Report] {
	perOwner := cmp.Or(cfg.MaxEnded, sessions.DefaultMaxEnded)
	return quota.New[string, enforcer.Report](perOwner, 8*perOwner)
}

// keepReportLocked keeps a finished report (without records) under its
// ending's key; a.mu is held.
func (a *Agent) keepReportLocked(key string, rep enforcer.Report) {
	rep.Records = nil
	a.reports.Put(rep.Owner, key, rep)
}

// Report returns the enforcer's report of an ending once it finished, by
// its key (sessions.EndingKey).
func (a *Agent) Report(key string) (enforcer.Report, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.reports.Get(key)
}

// SessionReport returns the report of the end of session id (gen 0) or of
// its generation gen, for the session that has this ID now when one owner
// has one (sessions.Tracker.Find).
func (a *Agent) SessionReport(id string, gen uint32) (enforcer.Report, bool) {
	s, ok := a.tracker.Find(id)
	if !ok {
		return enforcer.Report{}, false
	}
	return a.Report(sessions.EndingKey(s, gen))
}

// do applies a tracker operation from the API: journaled with its time,
// then what it ends handed to the enforcer.
func (a *Agent) do(op sessions.Op) (sessions.Result, error) {
	a.mu.Lock()
	op, res, err := a.tracker.Do(op)
	var starts []sessions.Action
	if !res.Duplicate {
		starts = a.markPending(res.Actions)
	}
	a.journal([]state.Record{jsonRecord(recOp, op)})
	a.mu.Unlock()
	a.startAll(starts)
	return res, err
}
