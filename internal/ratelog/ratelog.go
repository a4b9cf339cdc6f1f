// Package ratelog bounds how often the agent logs what other users can
// make it log: each key (a uid) may log a burst of lines, then one line
// per interval; what it could not log is counted and reported with its
// next line. A flood from one user so never pushes the agent's logs into
// journald's rate limit, which would hide the lines that matter
// (survivors, losses).
//
// It does not decide what is worth logging, it keeps no clock of its own
// (callers pass the time, so the session tracker stays a pure function of
// its events), and it must not be used for errors an operator has to see
// every time (a survivor of an ending): log those directly.
package ratelog

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"sync"
)

// Limiter limits log lines per key. Use New.
type Limiter[K comparable] struct {
	burst   uint64
	every   uint64 // ns of credit one line costs
	maxKeys int
	keys    map[K]*bucket
	// Suppressed counts every line held back.
	Suppressed uint64
}

type bucket struct {
	credit     uint64 // ns
	last       uint64 // ns
	suppressed uint64
}

// New returns a limiter that lets each key log burst lines at once and then
// one line per every nanoseconds, keeping at most maxKeys keys (the
// stalest is forgotten first, so the table stays bounded whatever the
// keys are). A Limiter is not safe for concurrent use: its owner's lock
// guards it.
func New[K comparable](burst int, everyNS uint64, maxKeys int) *Limiter[K] {
	return &Limiter[K]{burst: uint64(burst), every: everyNS, maxKeys: maxKeys, keys: map[K]*bucket{}}
}

// Allow reports whether key may log a line at now (ns, any clock that does
// not run backwards; a step back is ignored), and how many lines of key
// were held back since its last allowed line (to be logged with it).
func (l *Limiter[K]) Allow(key K, now uint64) (ok bool, held uint64) {
	b := l.keys[key]
	if b == nil {
		if len(l.keys) >= l.maxKeys {
			l.evictStalest()
		}
		b = &bucket{credit: l.burst * l.every, last: now}
		l.keys[key] = b
	}
	if now > b.last {
		b.credit = min(b.credit+(now-b.last), l.burst*l.every)
		b.last = now
	}
	if b.credit < l.every {
		b.suppressed++
		l.Suppressed++
		return false, 0
	}
	b.credit -= l.every
	held, b.suppressed = b.suppressed, 0
	return true, held
}

// evictStalest forgets the key that logged least recently. O(keys), run
// only when the table is full.
func (l *Limiter[K]) evictStalest() {
	var stalest K
	var at uint64
	first := true
	for k, b := range l.keys {
		if first || b.last < at {
			stalest, at, first = k, b.last, false
		}
	}
	delete(l.keys, stalest)
}

// Log logs msg with args at level on log when key may log at now, adding
// the count of lines held back since its last one ("held_back_logs").
// Errors are never held back. A nil Limiter logs every line.
func (l *Limiter[K]) Log(log *slog.Logger, level slog.Level, key K, now uint64, msg string, args ...any) {
	if l != nil && level < slog.LevelError {
		ok, held := l.Allow(key, now)
		if !ok {
			return
		}
		if held > 0 {
			args = append(args, "held_back_logs", held)
		}
	}
	log.Log(context.Background(), level, msg, args...)
}

// Field bounds a caller-chosen string put into a log line: at most 160
// bytes, with how much was cut.
func Field(s string) string {
	const max = 160
	if len(s) <= max {
		return s
	}
	return strings.ToValidUTF8(s[:max], "") + "…(" + strconv.Itoa(len(s)-max) + " more bytes)"
}

// Handler is inner with key's lines limited by l, as Log limits them:
// what a logger made from it logs for key (below Error) is let through
// only when l allows, with the count held back since. mu is l's owner's
// lock, now its clock. For the loggers of work a caller asked for (an
// ending of orphans, a dry run), whose lines would otherwise be as many
// as the caller's requests.
func (l *Limiter[K]) Handler(inner slog.Handler, mu sync.Locker, key K, now func() uint64) slog.Handler {
	return &limited[K]{inner: inner, l: l, mu: mu, key: key, now: now}
}

type limited[K comparable] struct {
	inner slog.Handler
	l     *Limiter[K]
	mu    sync.Locker
	key   K
	now   func() uint64
}

func (h *limited[K]) Enabled(ctx context.Context, level slog.Level) bool {
	return h.inner.Enabled(ctx, level)
}

func (h *limited[K]) Handle(ctx context.Context, r slog.Record) error {
	if r.Level < slog.LevelError {
		h.mu.Lock()
		ok, held := h.l.Allow(h.key, h.now())
		h.mu.Unlock()
		if !ok {
			return nil
		}
		if held > 0 {
			r = r.Clone()
			r.AddAttrs(slog.Uint64("held_back_logs", held))
		}
	}
	return h.inner.Handle(ctx, r)
}

func (h *limited[K]) WithAttrs(attrs []slog.Attr) slog.Handler {
	c := *h
	c.inner = h.inner.WithAttrs(attrs)
	return &c
}

func (h *limited[K]) WithGroup(name string) slog.Handler {
	c := *h
	c.inner = h.inner.WithGroup(name)
	return &c
}
