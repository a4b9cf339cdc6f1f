package enforcer

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mcptrace/mcptrace/procfs"
)

// Signals and doom: SIGTERM, the SIGKILL phase with its doom, and
// noticing deaths through the pidfds.

// undoom takes a target out of doom.
func (s *sweep) undoom(t *target) {
	if !t.doomed || s.e.doom == nil {
		return
	}
	if err := s.e.doom.Undoom(t.p.ID); err != nil {
		s.e.log.Warn("undoom failed", "session", s.session, "pid", t.p.ID.PID, "start_ns", t.p.ID.Start, "err", err)
		return
	}
	t.doomed = false
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
			s.e.log.Warn("doom failed; the sweep still catches forks", "session", s.session,
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
			continue
		}
		// What the ending's own check refuses now is never doomed.
		if s.en.Verify == nil {
			continue
		}
		if now, err := procfs.Read("", t.p.ID.PID); err == nil && now.ID.Tick() == t.key.tick {
			if why, err := s.verify(t.p, now); err == nil && why != "" && !pidfdDead(t.fd) {
				s.decide(t, ResultRefused+": "+why, false, "when", "at signal time")
			}
		}
	}
	s.doomAll(ts)
	for _, t := range ts {
		if t.alive() {
			s.signal(t, unix.SIGKILL)
		}
	}
}

// dead records the observed death of a signalled (or verified) target.
func (s *sweep) dead(t *target) {
	if t.rec.Signal == "" {
		s.decide(t, ResultExitedBeforeSignal, true)
		return
	}
	s.decide(t, ResultKilled, true)
}

// reap polls every live pidfd once and records the deaths.
func (s *sweep) reap() {
	for _, t := range s.order {
		if t.alive() && pidfdDead(t.fd) {
			s.dead(t)
		}
	}
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
