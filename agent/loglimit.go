package agent

import (
	"context"
	"log/slog"
)

// sessionLogLimit holds back the log records about one session (those
// with a "session" attribute) below slog.LevelError that allow refuses:
// one user's churn of sessions must not push the agent's log into
// journald's rate limit. Errors, the survivors of a sweep among them, are
// never held back.
type sessionLogLimit struct {
	slog.Handler
	allow func(session string) bool
	// session is the "session" attribute added by WithAttrs, if any.
	session string
}

func (h sessionLogLimit) Handle(ctx context.Context, r slog.Record) error {
	if r.Level < slog.LevelError {
		id := h.session
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "session" {
				id = a.Value.String()
				return false
			}
			return true
		})
		if id != "" && !h.allow(id) {
			return nil
		}
	}
	return h.Handler.Handle(ctx, r)
}

func (h sessionLogLimit) WithAttrs(attrs []slog.Attr) slog.Handler {
	for _, a := range attrs {
		if a.Key == "session" {
			h.session = a.Value.String()
		}
	}
	h.Handler = h.Handler.WithAttrs(attrs)
	return h
}

func (h sessionLogLimit) WithGroup(name string) slog.Handler {
	h.Handler = h.Handler.WithGroup(name)
	return h
}

// limitSessionLogs wraps log so that its per-session records go through
// the tracker's per-owner limit.
func (a *Agent) limitSessionLogs(log *slog.Logger) *slog.Logger {
	return slog.New(sessionLogLimit{Handler: log.Handler(), allow: func(id string) bool { return a.tracker.AllowLog(id) }})
}
