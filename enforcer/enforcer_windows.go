package enforcer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/mcptrace/mcptrace/lineage"
	"github.com/mcptrace/mcptrace/windows/owners"
	"github.com/mcptrace/mcptrace/windows/winproc"
)

// Supported reports whether the enforcer can end processes on this OS
// (nil on Windows: through process handles).
func Supported() error { return nil }

// SignalTerminate is the record's Signal on Windows, where a process is
// ended by TerminateProcess through a handle: Windows has no SIGTERM for
// a console program to handle.
const SignalTerminate = "TerminateProcess"

// exitCodeEnded is the exit code a terminated member gets: 1, as
// taskkill /F gives.
const exitCodeEnded = 1

// osState is what the enforcer knows about itself on Windows: its own
// identity (never ended) and the clock lineage identities are on.
type osState struct {
	self     uint32
	selfTick uint64
	clock    winproc.Clock
	err      error
}

func newOSState(log *slog.Logger) osState {
	var st osState
	clock, err := winproc.SystemClock()
	if err != nil {
		st.err = err
		log.Error("enforcer: the boot clock is unreadable, nothing can be matched to its lineage identity", "err", err)
		return st
	}
	st.clock = clock
	pid, create, err := winproc.Self()
	if err != nil {
		st.err = err
		log.Error("enforcer: this process's identity is unreadable", "err", err)
		return st
	}
	st.self, st.selfTick = pid, clock.Since(create)/lineage.TickNS
	return st
}

// wtarget is one member as End tracks it on Windows.
type wtarget struct {
	p          lineage.Process
	h          *winproc.Handle // nil once decided
	terminated bool
	last       bool
	rec        KillRecord
}

// End ends every live member of what en ends, each through a handle
// opened for its identity (PID and create time at tick precision, as on
// Linux): the held handle keeps the PID from naming another process, so
// what was checked is what TerminateProcess ends. Under PolicyGraceful
// members get Config.Grace to exit on their own first (an MCP server
// exits when the host's end of its stdin closes), then are terminated;
// PolicyImmediate terminates at once. The sweep reads the members again
// every Config.SweepInterval until two rounds find nothing new and
// nothing alive, or Config.SweepTimeout passes.
//
// Refused: PID 0, the System process (PID 4), this process, a member
// whose start is unknown, a PID that now names another process. Spared: a
// spare rule's match (on the graph's image or the live image path and
// command line), and for a non-root owner, a member whose token has
// another owner number (Config.Owner).
func (e *Enforcer) End(ctx context.Context, en Ending) Report {
	start := time.Now()
	r := Report{Session: en.Session, Owner: en.Owner, Generation: en.Generation, Reason: en.Reason, Mode: e.cfg.Mode}
	e.log.Debug("enforcing", "session", en.Session, "generation", en.Generation, "reason", en.Reason,
		"mode", string(e.cfg.Mode), "policy", string(e.cfg.Policy))
	latency := func() time.Duration { return time.Since(start) }
	last := map[lineage.ID]bool{}
	for _, id := range en.Last {
		last[lineage.ID{PID: id.PID, Start: id.Tick()}] = true
	}
	targets := map[lineage.ID]*wtarget{}
	var order []*wtarget
	decide := func(t *wtarget, result string, observed bool) {
		if t.h != nil {
			t.h.Close()
			t.h = nil
		}
		t.rec.Result, t.rec.At = result, time.Now()
		if observed {
			t.rec.Latency = latency()
		}
		e.logRecord(t.rec)
	}
	cfg := e.cfg
	graceEnd := start.Add(cfg.Grace)
	deadline := start.Add(cfg.SweepTimeout)
	quiet, synced := 0, false
	var stop string
	for {
		ms, err := callMembers(en.Members)
		if err != nil {
			stop = err.Error()
			e.log.Error("reading the session's members failed; giving up", "session", en.Session, "err", err)
			break
		}
		news := 0
		for _, p := range ms {
			key := lineage.ID{PID: p.ID.PID, Start: p.ID.Tick()}
			if p.Exited || targets[key] != nil {
				continue
			}
			news++
			t := &wtarget{p: p, rec: newRecord(&en, p), last: last[key]}
			targets[key] = t
			order = append(order, t)
			if result := e.admitWindows(&en, t); result != "" {
				decide(t, result, false)
			}
		}
		now := time.Now()
		alive := 0
		for _, t := range order {
			if t.h == nil {
				continue
			}
			done, _, err := t.h.Exited()
			switch {
			case err != nil:
				e.log.Debug("wait", "pid", t.p.ID.PID, "err", err)
			case done && t.terminated:
				decide(t, ResultKilled, true)
				continue
			case done:
				decide(t, ResultExitedBeforeSignal, true)
				continue
			}
			alive++
			if cfg.Mode == ModeAudit {
				t.rec.Signal = SignalTerminate
				decide(t, ResultWouldKill, false)
				continue
			}
			// Under the graceful policy every member, and under either
			// the last ones, wait for the grace to pass.
			wait := cfg.Policy == PolicyGraceful || t.last
			if t.terminated || wait && now.Before(graceEnd) {
				continue
			}
			if e.liveSpare(t) {
				decide(t, ResultSpared, false)
				continue
			}
			t.rec.Signal = SignalTerminate
			if err := t.h.Terminate(exitCodeEnded); err != nil {
				decide(t, fmt.Sprintf("%s: %v", ResultFailed, err), false)
				continue
			}
			t.terminated = true
		}
		if news > 0 || alive > 0 {
			quiet, synced = 0, false
		} else if quiet++; quiet >= 2 {
			if synced || cfg.Sync == nil {
				r.Empty = true
				break
			}
			// Nothing left that the graph knows of: make sure it holds
			// every event the ETW session delivered so far (a member
			// started just before its creator ended may be in a buffer
			// not yet flushed), then look once more.
			if err := cfg.Sync(ctx); err != nil {
				stop = "waiting for the ETW session's events: " + err.Error()
				r.Interrupted = ctx.Err() != nil
				break
			}
			synced, quiet = true, 1
			continue
		}
		if ctx.Err() != nil {
			stop = "canceled: " + context.Cause(ctx).Error()
			r.Interrupted = true
			break
		}
		if !time.Now().Before(deadline) {
			stop = fmt.Sprintf("sweep timeout %s", cfg.SweepTimeout)
			break
		}
		tm := time.NewTimer(cfg.SweepInterval)
		select {
		case <-ctx.Done():
		case <-tm.C:
		}
		tm.Stop()
	}
	for _, t := range order {
		if t.h != nil {
			t.h.Close()
			t.h = nil
			r.Survivors++
			t.rec.Result = fmt.Sprintf("%s: still alive, %s", ResultFailed, stop)
			t.rec.At = time.Now()
		}
		r.Records = append(r.Records, t.rec)
	}
	if en.Containers != nil {
		for _, c := range en.Containers() {
			r.Records = append(r.Records, KillRecord{Session: en.Session, Generation: en.Generation, Container: c.ID, Comm: CommContainer,
				Result: ResultFailed + ": containers are not ended on Windows", At: time.Now()})
			r.Survivors++
			r.Empty = false
		}
	}
	r.Duration = time.Since(start)
	e.finish(&r, 0, 0)
	return r
}

// admitWindows opens a handle for t's identity and judges it; it returns
// the final result when t is not to be ended, "" when t.h is held for it.
func (e *Enforcer) admitWindows(en *Ending, t *wtarget) string {
	id := t.p.ID
	switch {
	case e.os.err != nil:
		return ResultFailed + ": " + e.os.err.Error()
	case id.PID == 0 || id.PID == 4:
		return ResultRefused + ": the idle or System process"
	case id.Start == 0:
		return ResultRefused + ": start time unknown"
	case id.PID == e.os.self && id.Tick() == e.os.selfTick:
		return ResultRefused + ": the enforcer itself"
	case en.Verify != nil:
		return ResultRefused + ": the ending asks to verify each member, which this OS does not support"
	}
	h, err := winproc.Open(id.PID, 0)
	if err != nil {
		if errors.Is(err, winproc.ErrGone) {
			return ResultExitedBeforeSignal
		}
		return fmt.Sprintf("%s: %v", ResultFailed, err)
	}
	if e.os.clock.Since(h.Create)/lineage.TickNS != id.Tick() {
		h.Close()
		return ResultRefused + ": identity mismatch: the PID names another process now"
	}
	if id.PID == e.os.self {
		h.Close()
		return ResultRefused + ": the enforcer itself"
	}
	img := t.p.Current()
	if e.spareRule(t.p.Comm, img.Filename, img.Argv) != nil {
		h.Close()
		return ResultSpared
	}
	if why := e.beyondOwner(en, h); why != "" {
		h.Close()
		return ResultSparedPrivilege + ": " + why
	}
	t.h = h
	return ""
}

// liveSpare matches the spare rules against the member as it is now: its
// image path and command line, read through a handle for its identity.
func (e *Enforcer) liveSpare(t *wtarget) bool {
	if len(e.spare) == 0 {
		return false
	}
	rh, err := winproc.OpenForRead(t.h.PID, t.h.Create)
	if err != nil {
		return false
	}
	defer rh.Close()
	exe, _ := rh.ImagePath()
	var argv []string
	if line, _, err := rh.CommandLine(); err == nil {
		argv, _ = winproc.SplitCommandLine(line)
	}
	return e.spareRule(winproc.ImageBase(exe), exe, argv) != nil
}

// beyondOwner says why the member h is beyond the authority of the
// ending's owner ("" when it is not): a non-root owner ends only members
// whose token has its owner number now (Config.Owner), unless
// Config.CrossUID is set and the ending is not OwnerOnly, as on Linux.
func (e *Enforcer) beyondOwner(en *Ending, h *winproc.Handle) string {
	if en.Owner == owners.Root || e.cfg.CrossUID && !en.OwnerOnly {
		return ""
	}
	if en.Owner == owners.Unknown {
		return "the owner has no number: no owner's authority"
	}
	if e.cfg.Owner == nil {
		return "no owner table: only root's sessions end processes"
	}
	tok, err := h.Token()
	if err != nil {
		return "its token is unreadable: " + err.Error()
	}
	if got := e.cfg.Owner(tok); got != en.Owner || got == owners.Unknown {
		return fmt.Sprintf("its token is owner %d's, not %d's", got, en.Owner)
	}
	return ""
}
