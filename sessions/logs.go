package sessions

import (
	"context"
	"log/slog"

	"github.com/mcptrace/mcptrace/internal/ratelog"
)

// Per-session logs, limited per owner: what one user makes the tracker
// log never pushes out another's lines, and errors are never held back.

func newLogLimiter() *ratelog.Limiter[uint32] {
	return ratelog.New[uint32](logBurst, logEvery, maxLogUIDs)
}

// logFor logs a per-session message of owner's, at most as often as the
// limiter allows. Errors are never held back.
func (t *Tracker) logFor(owner uint32, level slog.Level, msg string, args ...any) {
	if !t.log.Enabled(context.Background(), level) {
		return
	}
	t.logs.Log(t.log, level, owner, t.clock, msg, args...)
}

// AllowLog reports whether a per-session log line about session id of
// owner (an enforcer's report, the agent's notes) may be written now
// under the owner's rate limit; what is held back is counted in
// Stats.LogsSuppressed. Without the owner, the one owner with a session
// of that ID is taken; sessions the tracker no longer lists (or an ID
// several owners use) share one limit (unknownOwner), so dropping them
// does not lift it. Callers never ask it about an error.
func (t *Tracker) AllowLog(id string, owner *uint32) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	key := unknownOwner
	switch {
	case owner != nil:
		if t.get(Ref{*owner, id}) != nil {
			key = *owner
		}
	default:
		var found *session
		for _, s := range t.names[id] { // the active sessions named id, by ID or tag
			if s.ID == id {
				if found != nil {
					found = nil
					break
				}
				found = s
			}
		}
		if found != nil {
			key = found.Owner
		}
	}
	ok, _ := t.logs.Allow(key, t.now())
	return ok
}
