package enforcer

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"golang.org/x/sys/unix"

	"github.com/mcptrace/mcptrace/lineage"
	"github.com/mcptrace/mcptrace/procfs"
	"github.com/mcptrace/mcptrace/redact"
)

// Admission: who among the members may be signalled at all, proved by
// identity through a pidfd and /proc (procfs), within the session owner's
// authority and the spare rules; and the same judgement again before
// every signal.

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
	if why, err := s.verify(p, snap); why != "" || err != nil {
		unix.Close(fd)
		switch {
		case err != nil && errors.Is(err, fs.ErrNotExist):
			s.decide(t, ResultExitedBeforeSignal, true)
		case err != nil:
			t.state = stRetry
			t.rec.Result = fmt.Sprintf("%s: %v", ResultFailed, err)
		default:
			s.decide(t, ResultRefused+": "+why, false)
		}
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
// the owner is root, or Config.CrossUID is set and Ending.OwnerOnly is
// not). The caller holds a pidfd
// on pid and checks it is alive afterwards: /proc/PID is that process.
func (s *sweep) boundary(pid uint32) (string, error) {
	owner := s.en.Owner
	if owner == 0 || s.e.cfg.CrossUID && !s.en.OwnerOnly {
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
		if why, err = s.verify(t.p, now); why != "" {
			why = ResultRefused + ": " + why
		}
	}
	if rule == nil && why == "" && err == nil {
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

// verify asks Ending.Verify about p as /proc shows it now (""/nil when
// the ending sets none). The caller holds p's pidfd and checks it is
// alive afterwards: /proc/PID is that process.
func (s *sweep) verify(p lineage.Process, now lineage.Snapshot) (string, error) {
	if s.en.Verify == nil {
		return "", nil
	}
	u, err := procfs.ReadUIDs("", p.ID.PID)
	if err != nil {
		return "", fmt.Errorf("reading uids: %w", err)
	}
	return s.en.Verify(p, now, u), nil
}
