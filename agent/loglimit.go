package agent

import (
	"context"
	"log/slog"
	"math"
)

// sessionLogLimit holds back the log records about one session (those
// with a "session" attribute, and its "owner_uid" when they carry it:
// session IDs are scoped by owner) below slog.LevelError that allow
// refuses: one user's churn of sessions must not push the agent's log
// into journald's rate limit. Errors, the survivors of a sweep among
// them, are never held back.
type sessionLogLimit struct {
	slog.Handler
	allow func(session string, owner *uint32) bool
	// session and owner: the attributes added by WithAttrs, if any.
	session string
	owner   *uint32
}

func (h sessionLogLimit) Handle(ctx context.Context, r slog.Record) error {
	if r.Level < slog.LevelError {
		id, owner := h.session, h.owner
		r.Attrs(func(a slog.Attr) bool {
			id, owner = sessionAttr(a, id, owner)
			return true
		})
		if id != "" && !h.allow(id, owner) {
			return nil
		}
	}
	return h.Handler.Handle(ctx, r)
}

// sessionAttr takes a "session" or "owner_uid" attribute into id and
// owner.
func sessionAttr(a slog.Attr, id string, owner *uint32) (string, *uint32) {
	switch a.Key {
	case "session":
		id = a.Value.String()
	case "owner_uid":
		if v := a.Value.Resolve(); v.Kind() == slog.KindUint64 && v.Uint64() <= math.MaxUint32 {
			u := uint32(v.Uint64())
			owner = &u
		} else if v.Kind() == slog.KindInt64 && v.Int64() >= 0 && v.Int64() <= math.MaxUint32 {
			u := uint32(v.Int64())
			owner = &u
		}
	}
	return id, owner
}

func (h sessionLogLimit) WithAttrs(attrs []slog.Attr) slog.Handler {
	for _, a := range attrs {
		h.session, h.owner = sessionAttr(a, h.session, h.owner)
	}
	h.Handler = h.Handler.WithAttrs(attrs)
	return h
}

func (h sessionLogLimit) WithGroup(name string) slog.Handler {
	h.Handler = h.Handler.WithGroup(name)
	return h
}
