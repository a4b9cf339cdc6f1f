package enforcer

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mcptrace/mcptrace/lineage"
	"github.com/mcptrace/mcptrace/procfs"
)

// Supported reports whether the enforcer can signal on this OS (nil on Linux).
func Supported() error { return nil }

// sendSignal sends sig through a pidfd. Tests wrap it to guard that only
// their own processes are ever signalled; it is never replaced by kill(2).
var sendSignal = func(fd int, pid uint32, sig unix.Signal) error {
	return unix.PidfdSendSignal(fd, sig, nil, 0)
}

// tickID is an identity at tick precision: the key members are tracked by,
// so a coarse identity the graph later makes exact is the same member.
type tickID struct {
	pid  uint32
	tick uint64
}

func tickOf(id lineage.ID) tickID { return tickID{id.PID, id.Tick()} }

// osState is what the enforcer knows about itself.
type osState struct {
	self int
	// ancestors are the agent's ancestors at New, by identity.
	ancestors map[tickID]bool
}

func newOSState(log *slog.Logger) osState {
	st := osState{self: os.Getpid(), ancestors: map[tickID]bool{}}
	pid := uint32(st.self)
	for range 4096 {
		s, err := procfs.ReadStat("", pid)
		if err != nil || s.PPID == 0 {
			break
		}
		ps, err := procfs.ReadStat("", s.PPID)
		if err != nil {
			break
		}
		st.ancestors[tickID{s.PPID, ps.StartTicks}] = true
		pid = s.PPID
	}
	if b, err := os.ReadFile("/proc/self/status"); err == nil {
		for line := range strings.Lines(string(b)) {
			if rest, ok := strings.CutPrefix(line, "NSpid:"); ok && len(strings.Fields(rest)) > 1 {
				log.Warn("the agent runs in a nested PID namespace; lineage PIDs are the kernel's initial-namespace PIDs and will not match (identity checks refuse the mismatches, nothing is killed by a foreign PID)")
			}
		}
	}
	return st
}

// state of a target within one End call.
type tstate uint8

const (
	stReady tstate = iota // identity verified, pidfd held, nothing sent yet
	stTerm                // SIGTERM sent, waiting for the grace
	stKill                // SIGKILL sent
	stRetry               // pidfd_open or the signal failed: retried every round
	stDone                // decided: dead, refused or spared
)

// target is one member of the session as the enforcer tracks it.
type target struct {
	key    tickID
	p      lineage.Process
	fd     int // pidfd, -1 when none
	state  tstate
	doomed bool
	// last: signalled only once the grace period has passed, with
	// SIGKILL: Ending.Last, and under the graceful policy the members
	// born during the grace (a SIGTERM handler's cleanup).
	last bool
	rec  KillRecord
}

// alive: a pidfd is held and the process has not been seen to exit.
func (t *target) alive() bool { return t.fd >= 0 && t.state != stDone }

// sweep is the state of one End call.
type sweep struct {
	e       *Enforcer
	en      *Ending
	session string
	endedAt uint64 // boottime ns
	start   time.Time
	// startTick is End's start, boottime ticks: a member that started
	// later was born during the grace.
	startTick uint64
	last      map[tickID]bool

	targets map[tickID]*target
	order   []*target

	escalated, doomErrs int
}

// End kills every live member of what en ends and sweeps until none the
// enforcer may kill is alive, or Config.SweepTimeout passed, or ctx is
// done (Report.Interrupted). It runs synchronously; call it in a
// goroutine. Calls for different sessions may run concurrently.
//
// Only Process values en.Members returns are ever signalled, each through
// a pidfd whose identity was checked against the Process's lineage ID.
func (e *Enforcer) End(ctx context.Context, en Ending) Report {
	start := time.Now()
	endedAt := en.EndedAt
	if now := procfs.BootTimeNow(); endedAt == 0 || endedAt > now {
		endedAt = now
	}
	s := &sweep{e: e, en: &en, session: en.Session, endedAt: endedAt, start: start, startTick: procfs.BootTimeNow() / lineage.TickNS,
		targets: map[tickID]*target{}, last: map[tickID]bool{}}
	for _, id := range en.Last {
		s.last[tickOf(id)] = true
	}
	r := Report{Session: en.Session, Owner: en.Owner, Generation: en.Generation, Reason: en.Reason, Mode: e.cfg.Mode}
	e.log.Debug("enforcing", "session", en.Session, "owner_uid", en.Owner, "generation", en.Generation, "reason", en.Reason,
		"mode", string(e.cfg.Mode), "policy", string(e.cfg.Policy))
	// Containers are stopped beside the sweep: their processes are not
	// members (the engine's shim created them), and the engine's grace
	// runs alongside the members'.
	var containerRecs []KillRecord
	ended := map[string]bool{}
	containersDone := make(chan struct{})
	go func() {
		defer close(containersDone)
		containerRecs = e.endContainers(ctx, &en, ended, s.latency)
	}()
	if e.cfg.Mode == ModeAudit {
		s.audit(en.Members, &r)
	} else {
		s.enforce(ctx, en.Members, &r)
	}
	s.release()
	<-containersDone
	if ctx.Err() == nil {
		// No member is left to start another; one may have done so
		// while the first round ran.
		containerRecs = append(containerRecs, e.endContainers(ctx, &en, ended, s.latency)...)
	}
	for _, t := range s.order {
		r.Records = append(r.Records, t.rec)
	}
	for _, rec := range containerRecs {
		r.Records = append(r.Records, rec)
		if rec.Result != ResultKilled && rec.Result != ResultExitedBeforeSignal && !strings.HasPrefix(rec.Result, ResultSpared) &&
			!strings.HasPrefix(rec.Result, ResultRefused) && rec.Result != ResultWouldKill {
			r.Survivors++
			r.Empty = false
		}
	}
	r.Duration = time.Since(start)
	e.finish(&r, s.escalated, s.doomErrs)
	return r
}

// decide sets a final result; observed says a death was just observed.
func (s *sweep) decide(t *target, result string, observed bool, extra ...any) {
	if t.fd >= 0 {
		unix.Close(t.fd)
		t.fd = -1
	}
	t.state = stDone
	t.rec.Result = result
	t.rec.At = time.Now()
	if observed {
		t.rec.Latency = s.latency()
	}
	s.e.logRecord(t.rec, extra...)
}

func (s *sweep) latency() time.Duration {
	now := procfs.BootTimeNow()
	if now < s.endedAt {
		return 0
	}
	return time.Duration(now - s.endedAt)
}

// wait polls the live pidfds until all are dead or until passes. With no
// live pidfd it sleeps until then (or ctx is done).
func (s *sweep) wait(ctx context.Context, until time.Time) {
	for {
		var (
			pfds []unix.PollFd
			ts   []*target
		)
		for _, t := range s.order {
			if t.alive() {
				pfds = append(pfds, unix.PollFd{Fd: int32(t.fd), Events: unix.POLLIN})
				ts = append(ts, t)
			}
		}
		d := time.Until(until)
		if len(pfds) == 0 {
			if d > 0 {
				tm := time.NewTimer(d)
				select {
				case <-ctx.Done():
				case <-tm.C:
				}
				tm.Stop()
			}
			return
		}
		if d < 0 {
			d = 0
		}
		ms := int((d + time.Millisecond - 1) / time.Millisecond)
		n, err := unix.Poll(pfds, ms)
		if err != nil && err != unix.EINTR {
			s.e.log.Error("poll on pidfds failed", "session", s.session, "err", err)
			return
		}
		if n > 0 {
			for i := range pfds {
				if pfds[i].Revents != 0 {
					s.dead(ts[i])
				}
			}
		}
		if ctx.Err() != nil || !time.Now().Before(until) {
			return
		}
	}
}

// enforce is the sweep: admit, doom, signal, wait; until two rounds one
// interval apart find nothing new and nothing alive.
func (s *sweep) enforce(ctx context.Context, members MembersFunc, r *Report) {
	cfg := s.e.cfg
	graceful := cfg.Policy == PolicyGraceful
	graceEnd := s.start.Add(cfg.Grace)
	deadline := s.start.Add(cfg.SweepTimeout)
	quiet := 0
	synced := false
	var stop string
	for {
		ms, err := callMembers(members)
		if err != nil {
			stop = err.Error()
			s.e.log.Error("reading the session's members failed; giving up", "session", s.session, "err", err)
			break
		}
		news := s.admitAll(ms)
		// Retry what failed before: reopen, or resend SIGKILL.
		var retried, resend []*target
		for _, t := range s.order {
			if t.state != stRetry {
				continue
			}
			if t.fd < 0 {
				s.check(t)
				if t.state == stReady {
					retried = append(retried, t)
				}
				continue
			}
			resend = append(resend, t)
		}
		s.kill(resend)
		var batch []*target
		for _, t := range append(news, retried...) {
			if t.state == stReady && !t.last {
				batch = append(batch, t)
			}
		}
		if graceful && time.Now().Before(graceEnd) {
			// Not doomed yet: a member may fork or exec in its SIGTERM
			// handler. Doom starts at the SIGKILL phase.
			for _, t := range batch {
				s.signal(t, unix.SIGTERM)
			}
		} else {
			s.kill(batch)
		}
		s.signalLast(graceEnd)
		s.reap()

		if len(news) > 0 || s.busy() {
			quiet, synced = 0, false
		} else if quiet++; quiet >= 2 {
			if synced || cfg.Sync == nil {
				r.Empty = true
				return
			}
			// Nothing left that the graph knows of: make sure it knows
			// everything the kernel reported so far, then look once more.
			if err := cfg.Sync(ctx); err != nil {
				stop = "waiting for the kernel's events: " + err.Error()
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
		now := time.Now()
		if !now.Before(deadline) {
			stop = fmt.Sprintf("sweep timeout %s", cfg.SweepTimeout)
			break
		}
		next := now.Add(cfg.SweepInterval)
		if (graceful && s.anyIn(stTerm) || s.anyLast()) && graceEnd.After(now) && graceEnd.Before(next) {
			next = graceEnd
		}
		if deadline.Before(next) {
			next = deadline
		}
		s.wait(ctx, next)
		if graceful && !time.Now().Before(graceEnd) {
			var batch []*target
			for _, t := range s.order {
				if t.state == stTerm && t.alive() {
					s.escalated++
					batch = append(batch, t)
				}
			}
			s.kill(batch)
		}
		s.signalLast(graceEnd)
	}
	// Gave up: whatever is not provably dead survives.
	s.reap()
	if r.Interrupted {
		// The agent is stopping and will not be here when the grace
		// ends: the SIGKILL phase's doom starts now, so the kernel holds
		// the members (a fork or exec kills them) until an agent resumes
		// the ending.
		var live []*target
		for _, t := range s.order {
			if t.alive() {
				live = append(live, t)
			}
		}
		s.doomAll(live)
		doomed := 0
		for _, t := range live {
			if t.doomed {
				doomed++
			}
		}
		s.e.log.Info("ending interrupted: its live members are doomed in the kernel until an agent resumes it",
			"session", s.session, "live", len(live), "doomed", doomed)
	}
	for _, t := range s.order {
		if t.state == stDone {
			continue
		}
		r.Survivors++
		t.rec.Result = fmt.Sprintf("%s: still alive, %s", ResultFailed, stop)
		t.rec.At = time.Now()
	}
}

// anyLast: a target ended last is still waiting for the grace to pass.
func (s *sweep) anyLast() bool {
	for _, t := range s.order {
		if t.last && t.state == stReady && t.alive() {
			return true
		}
	}
	return false
}

// busy: some target is alive or not yet resolved.
func (s *sweep) busy() bool {
	for _, t := range s.order {
		if t.state != stDone {
			return true
		}
	}
	return false
}

func (s *sweep) anyIn(st tstate) bool {
	for _, t := range s.order {
		if t.state == st && t.alive() {
			return true
		}
	}
	return false
}

// release closes every pidfd and undooms the dead. Survivors stay doomed:
// they are still members, and the kernel should kill them on their next
// fork or exec.
func (s *sweep) release() {
	for _, t := range s.order {
		survivor := t.state != stDone
		if t.fd >= 0 {
			unix.Close(t.fd)
			t.fd = -1
		}
		if t.doomed && !survivor && s.e.doom != nil {
			if err := s.e.doom.Undoom(t.p.ID); err != nil {
				s.e.log.Debug("undoom", "pid", t.p.ID.PID, "start_ns", t.p.ID.Start, "err", err)
			}
			t.doomed = false
		}
	}
}
