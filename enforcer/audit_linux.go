package enforcer

// Audit mode: record what enforce would kill, signal nothing.

// audit runs every check once and records what enforce would signal.
func (s *sweep) audit(members MembersFunc, r *Report) {
	ms, err := callMembers(members)
	if err != nil {
		s.e.log.Error("audit: reading members failed", "session", s.session, "err", err)
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
