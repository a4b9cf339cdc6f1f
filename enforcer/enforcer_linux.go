package enforcer

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mcptrace/mcptrace/lineage"
	"github.com/mcptrace/mcptrace/procfs"
	"github.com/mcptrace/mcptrace/redact"
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
				log.Warn("enforcer: the agent runs in a nested PID namespace; lineage PIDs are the kernel's initial-namespace PIDs and will not match (identity checks refuse the mismatches, nothing is killed by a foreign PID)")
			}
		}
	}
	return st
}

// pidfdDead reports whether the process behind fd has exited (the pidfd
// is readable, or hung up once the process is reaped).
func pidfdDead(fd int) bool {
	pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(pfd, 0)
		if err == unix.EINTR {
			continue
		}
		return err == nil && n > 0 && pfd[0].Revents != 0
	}
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
	e.log.Info("enforcer: ending session", "session", en.Session, "owner_uid", en.Owner, "generation", en.Generation, "reason", en.Reason,
		"mode", string(e.cfg.Mode), "policy", string(e.cfg.Policy))
	if e.cfg.Mode == ModeAudit {
		s.audit(en.Members, &r)
	} else {
		s.enforce(ctx, en.Members, &r)
	}
	s.release()
	for _, t := range s.order {
		r.Records = append(r.Records, t.rec)
	}
	r.Duration = time.Since(start)
	e.finish(&r, s.escalated, s.doomErrs)
	return r
}

// call runs members, turning a panic into an error.
func (s *sweep) call(members MembersFunc) (ms []lineage.Process, err error) {
	if members == nil {
		return nil, errors.New("no members function")
	}
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("members function panicked: %v", v)
		}
	}()
	return members(), nil
}

// admitAll creates targets for the live members not yet tracked and
// returns them.
func (s *sweep) admitAll(ms []lineage.Process) []*target {
	var news []*target
	for _, p := range ms {
		if p.Exited {
			continue
		}
		k := tickOf(p.ID)
		if t := s.targets[k]; t != nil {
			t.p = p // the graph's latest view: a new image is judged at the next signal
			continue
		}
		// A member born during the grace is left alone until the SIGKILL
		// phase: it may be the cleanup of a SIGTERM handler.
		born := s.e.cfg.Policy == PolicyGraceful && k.tick > s.startTick
		t := &target{key: k, p: p, fd: -1, last: s.last[k] || born, rec: newRecord(s.en, p)}
		s.targets[k] = t
		s.order = append(s.order, t)
		news = append(news, t)
		s.check(t)
	}
	return news
}

// refusal is why p may never be signalled whatever /proc says, or "".
func (s *sweep) refusal(p lineage.Process) string {
	o := &s.e.os
	switch {
	case p.ID.PID == 0:
		return "pid 0 (the idle task)"
	case p.ID.PID == 1:
		return "pid 1 (init)"
	case p.Kernel:
		return "kernel thread"
	case int(p.ID.PID) == o.self:
		return "the agent itself"
	case p.ID.Start == 0:
		return "start time unknown: identity cannot be checked"
	case o.ancestors[tickOf(p.ID)]:
		return "an ancestor of the agent"
	}
	if _, err := os.Lstat(fmt.Sprintf("/proc/self/task/%d", p.ID.PID)); err == nil {
		return "a thread of the agent"
	}
	return ""
}

// check decides a new target: refused, spared, exited, or verified (pidfd
// held, state stReady). It is also the retry of a target whose pidfd could
// not be opened.
func (s *sweep) check(t *target) {
	p := t.p
	if why := s.refusal(p); why != "" {
		s.decide(t, ResultRefused+": "+why, false)
		return
	}
	img := p.Current()
	if rule := s.e.spareRule(p.Comm, img.Filename, img.Argv); rule != nil {
		s.decide(t, ResultSpared, false, "rule", rule.Name())
		return
	}
	// The member's start must not be later than now: the pidfd opened next
	// then refers to a process that was alive when the member already was,
	// so a start-time match below proves it is the member.
	if p.ID.Tick() > procfs.BootTimeNow()/lineage.TickNS {
		s.decide(t, ResultRefused+": member start time is in the future", false)
		return
	}
	fd, err := unix.PidfdOpen(int(p.ID.PID), 0)
	switch {
	case err == unix.ESRCH:
		s.decide(t, ResultExitedBeforeSignal, true)
		return
	case err == unix.EINVAL:
		s.decide(t, ResultRefused+": pid is not a process (thread id?)", false)
		return
	case err != nil:
		t.state = stRetry
		t.rec.Result = fmt.Sprintf("%s: pidfd_open: %v", ResultFailed, err)
		return
	}
	// The pidfd pins the process from here on: it cannot be recycled under
	// fd, so what /proc/PID says now is about the process fd refers to.
	// procfs reports a process that has exited (a zombie) as gone; a
	// thread-group leader that exited while its other threads run is
	// alive, and signalling it ends them all.
	snap, err := procfs.Read("", p.ID.PID)
	if err != nil {
		unix.Close(fd)
		if errors.Is(err, fs.ErrNotExist) || pidfdDead(fd) {
			s.decide(t, ResultExitedBeforeSignal, true)
			return
		}
		t.state = stRetry
		t.rec.Result = fmt.Sprintf("%s: %v", ResultFailed, err)
		return
	}
	if now := snap.ID.Tick(); now != t.key.tick {
		unix.Close(fd)
		why := "pid reused: the member is gone"
		if now < t.key.tick {
			why = "the process is older than the member: wrong identity"
		}
		s.decide(t, fmt.Sprintf("%s: identity mismatch: pid %d belongs to a process started at tick %d, the member started at tick %d (%s)",
			ResultRefused, p.ID.PID, now, t.key.tick, why), false)
		return
	}
	if snap.Kernel {
		unix.Close(fd)
		s.decide(t, ResultRefused+": kernel thread", false)
		return
	}
	if t.rec.Comm == "" {
		t.rec.Comm = snap.Comm
	}
	if len(t.rec.Argv) == 0 && len(snap.Argv) > 0 {
		t.rec.Argv = redact.Argv(snap.Argv)
	}
	if rule := s.e.spareRule(snap.Comm, snap.Filename, snap.Argv); rule != nil {
		unix.Close(fd)
		s.decide(t, ResultSpared, false, "rule", rule.Name())
		return
	}
	why, err := s.boundary(p.ID.PID)
	switch {
	case pidfdDead(fd):
		unix.Close(fd)
		s.decide(t, ResultExitedBeforeSignal, true)
		return
	case err != nil:
		unix.Close(fd)
		t.state = stRetry
		t.rec.Result = fmt.Sprintf("%s: %v", ResultFailed, err)
		return
	case why != "":
		unix.Close(fd)
		s.decide(t, why, false)
		return
	}
	if pidfdDead(fd) {
		unix.Close(fd)
		s.decide(t, ResultExitedBeforeSignal, true)
		return
	}
	t.fd, t.state, t.rec.Result = fd, stReady, ""
}

// mayKill reports whether a sender whose real and effective uid are owner
// may signal a process with these uids, by kill(2)'s rule: the sender's
// real or effective uid equals the target's real or saved set-user-ID.
// Root (owner 0) may signal every process.
func mayKill(owner uint32, u procfs.UIDs) bool {
	return owner == 0 || u.Real == owner || u.Saved == owner
}

// boundary reads pid's uids and returns the spared result when the
// session's owner could not signal it itself, or "" when it could (or
// the owner is root, or Config.CrossUID is set). The caller holds a pidfd
// on pid and checks it is alive afterwards: /proc/PID is that process.
func (s *sweep) boundary(pid uint32) (string, error) {
	owner := s.en.Owner
	if owner == 0 || s.e.cfg.CrossUID {
		return "", nil
	}
	u, err := procfs.ReadUIDs("", pid)
	if err != nil {
		return "", fmt.Errorf("reading uids: %w", err)
	}
	if mayKill(owner, u) {
		return "", nil
	}
	return fmt.Sprintf("%s: uids real %d, effective %d, saved %d; the owner, uid %d, may not signal it",
		ResultSparedPrivilege, u.Real, u.Effective, u.Saved, owner), nil
}

// recheck judges a verified target again right before a signal, as it is
// now: a spare rule may match a program it exec'd since (the graph's
// latest image or /proc), or its uids may have moved out of the owner's
// reach (a setuid exec). It returns false when the target was decided or
// must be retried, and undooms it when it is spared.
func (s *sweep) recheck(t *target, now lineage.Snapshot) bool {
	pid := t.p.ID.PID
	img := t.p.Current()
	rule := s.e.spareRule(t.p.Comm, img.Filename, img.Argv)
	if rule == nil {
		rule = s.e.spareRule(now.Comm, now.Filename, now.Argv)
	}
	why, err := "", error(nil)
	if rule == nil {
		why, err = s.boundary(pid)
	}
	switch {
	case pidfdDead(t.fd):
		s.dead(t)
		return false
	case err != nil:
		t.state = stRetry
		t.rec.Result = fmt.Sprintf("%s: %v", ResultFailed, err)
		return false
	case rule == nil && why == "":
		return true
	}
	s.undoom(t)
	if rule != nil {
		s.decide(t, ResultSpared, false, "rule", rule.Name(), "when", "at signal time")
	} else {
		s.decide(t, why, false, "when", "at signal time")
	}
	return false
}

// undoom takes a target out of doom.
func (s *sweep) undoom(t *target) {
	if !t.doomed || s.e.doom == nil {
		return
	}
	if err := s.e.doom.Undoom(t.p.ID); err != nil {
		s.e.log.Warn("enforcer: undoom failed", "session", s.session, "pid", t.p.ID.PID, "start_ns", t.p.ID.Start, "err", err)
		return
	}
	t.doomed = false
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

// dead records the observed death of a signalled (or verified) target.
func (s *sweep) dead(t *target) {
	if t.rec.Signal == "" {
		s.decide(t, ResultExitedBeforeSignal, true)
		return
	}
	s.decide(t, ResultKilled, true)
}

// doomAll marks the live targets of a SIGKILL batch doomed in the
// kernel, before any of them is sent SIGKILL, so a fork or exec racing
// the signal dies too.
func (s *sweep) doomAll(ts []*target) {
	if s.e.doom == nil {
		return
	}
	for _, t := range ts {
		if !t.alive() || t.doomed {
			continue
		}
		if err := s.e.doom.Doom(t.p.ID); err != nil {
			s.doomErrs++
			s.e.log.Warn("enforcer: doom failed; the sweep still catches forks", "session", s.session,
				"pid", t.p.ID.PID, "start_ns", t.p.ID.Start, "err", err)
			continue
		}
		t.doomed = true
	}
}

// signal sends sig to t through its pidfd.
func (s *sweep) signal(t *target, sig unix.Signal) {
	if pidfdDead(t.fd) {
		s.dead(t)
		return
	}
	// Identity again, before every signal. The pidfd already pins the
	// process (its PID cannot be reused while it is alive or a zombie), so
	// a different start here means it has been reaped: nothing to signal.
	now, err := procfs.Read("", t.p.ID.PID)
	switch {
	case err == nil && now.ID.Tick() == t.key.tick:
	case pidfdDead(t.fd):
		s.dead(t)
		return
	case errors.Is(err, fs.ErrNotExist):
		// Exited, its pidfd not readable yet: the next round sees it dead.
		t.state = stRetry
		t.rec.Result = fmt.Sprintf("%s: %s: exiting", ResultFailed, unix.SignalName(sig))
		return
	case err != nil:
		s.decide(t, fmt.Sprintf("%s: reading /proc: %v", ResultRefused, err), false)
		return
	default:
		s.decide(t, fmt.Sprintf("%s: identity changed under a live pidfd (start tick %d, member %d)", ResultRefused, now.ID.Tick(), t.key.tick), false)
		return
	}
	if !s.recheck(t, now) {
		return
	}
	name := unix.SignalName(sig)
	err = sendSignal(t.fd, t.p.ID.PID, sig)
	switch {
	case err == unix.ESRCH:
		s.dead(t)
		return
	case err != nil:
		if !strings.HasPrefix(t.rec.Result, ResultFailed) {
			t.rec.Result = fmt.Sprintf("%s: %s: %v", ResultFailed, name, err)
			s.e.logRecord(t.rec)
		}
		t.state = stRetry
		return
	}
	switch {
	case t.rec.Signal == "":
		t.rec.Signal = name
	case t.rec.Signal != name && !strings.HasSuffix(t.rec.Signal, "+"+name):
		t.rec.Signal += "+" + name
	}
	t.rec.Result = ""
	if sig == unix.SIGKILL {
		t.state = stKill
	} else {
		t.state = stTerm
	}
}

// reap polls every live pidfd once and records the deaths.
func (s *sweep) reap() {
	for _, t := range s.order {
		if t.alive() && pidfdDead(t.fd) {
			s.dead(t)
		}
	}
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
			s.e.log.Error("enforcer: poll on pidfds failed", "session", s.session, "err", err)
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
		ms, err := s.call(members)
		if err != nil {
			stop = err.Error()
			s.e.log.Error("enforcer: reading the session's members failed; giving up", "session", s.session, "err", err)
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

// signalLast sends SIGKILL to the targets ended last (Ending.Last) once
// the grace period is over; until then they are left to exit by
// themselves.
func (s *sweep) signalLast(graceEnd time.Time) {
	if time.Now().Before(graceEnd) {
		return
	}
	var batch []*target
	for _, t := range s.order {
		if t.last && t.state == stReady && t.alive() {
			batch = append(batch, t)
		}
	}
	s.kill(batch)
}

// kill is the SIGKILL phase of ts: every live one the owner may still
// signal is doomed first, then each is sent SIGKILL (after the checks of
// signal, which undoom what turned out spared). Doom starts here (and for
// an End interrupted mid-grace, as it returns), so under the graceful
// policy a member is free to fork or exec during its grace.
func (s *sweep) kill(ts []*target) {
	if len(ts) == 0 {
		return
	}
	// What moved out of the owner's reach (a setuid exec during the
	// grace) is spared before it could be doomed; errors are left to
	// signal's own check.
	for _, t := range ts {
		if !t.alive() {
			continue
		}
		if why, err := s.boundary(t.p.ID.PID); err == nil && why != "" && !pidfdDead(t.fd) {
			s.decide(t, why, false, "when", "at signal time")
		}
	}
	s.doomAll(ts)
	for _, t := range ts {
		if t.alive() {
			s.signal(t, unix.SIGKILL)
		}
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

// audit runs every check once and records what enforce would signal.
func (s *sweep) audit(members MembersFunc, r *Report) {
	ms, err := s.call(members)
	if err != nil {
		s.e.log.Error("enforcer: audit: reading members failed", "session", s.session, "err", err)
		return
	}
	s.admitAll(ms)
	sig := "SIGKILL"
	if s.e.cfg.Policy == PolicyGraceful {
		sig = "SIGTERM"
	}
	r.Empty = true
	for _, t := range s.order {
		if t.state != stReady {
			continue
		}
		t.rec.Signal = sig
		s.decide(t, ResultWouldKill, false)
		r.Empty = false
	}
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
				s.e.log.Debug("enforcer: undoom", "pid", t.p.ID.PID, "start_ns", t.p.ID.Start, "err", err)
			}
			t.doomed = false
		}
	}
}
