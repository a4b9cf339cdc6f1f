// Package ratelog bounds how often the agent logs what other users can
// make it log: each key (a uid, a session) may log a burst of lines, then
// one line per interval; what it could not log is counted and reported
// with its next line. A flood from one user so never pushes the agent's
// logs into journald's rate limit, which would hide the lines that matter
// (survivors, losses).
//
// It does not decide what is worth logging, and it must not be used for
// errors an operator has to see every time (a survivor of an ending): log
// those directly.
package ratelog

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Limiter limits log lines per key. The zero Limiter is not usable: use New.
type Limiter struct {
	burst  int
	every  time.Duration
	maxKey int
	now    func() time.Time

	mu   sync.Mutex
	keys map[string]*bucket
}

type bucket struct {
	tokens     float64
	last       time.Time
	suppressed uint64
}

// New returns a limiter that lets each key log burst lines at once and then
// one line per every, keeping at most maxKeys keys (the stalest is
// forgotten first, so the table stays bounded whatever the keys are).
func New(burst int, every time.Duration, maxKeys int) *Limiter {
	return &Limiter{burst: burst, every: every, maxKey: maxKeys, now: time.Now, keys: map[string]*bucket{}}
}

// Allow reports whether key may log a line now, and how many lines of key
// were suppressed since its last allowed line (to be logged with it).
func (l *Limiter) Allow(key string) (ok bool, suppressed uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	b := l.keys[key]
	if b == nil {
		if len(l.keys) >= l.maxKey {
			l.evictStalest()
		}
		b = &bucket{tokens: float64(l.burst), last: now}
		l.keys[key] = b
	}
	b.tokens = min(float64(l.burst), b.tokens+float64(now.Sub(b.last))/float64(l.every))
	b.last = now
	if b.tokens < 1 {
		b.suppressed++
		return false, 0
	}
	b.tokens--
	suppressed, b.suppressed = b.suppressed, 0
	return true, suppressed
}

// evictStalest forgets the key that logged least recently. O(keys), run
// only when the table is full.
func (l *Limiter) evictStalest() {
	var stalest string
	var at time.Time
	for k, b := range l.keys {
		if stalest == "" || b.last.Before(at) {
			stalest, at = k, b.last
		}
	}
	delete(l.keys, stalest)
}

// Log logs msg with args at level on log when key may log now, adding the
// count of lines suppressed since the last one ("suppressed"). A nil
// Limiter logs every line.
func (l *Limiter) Log(log *slog.Logger, level slog.Level, key, msg string, args ...any) {
	if l == nil {
		log.Log(context.Background(), level, msg, args...)
		return
	}
	ok, n := l.Allow(key)
	if !ok {
		return
	}
	if n > 0 {
		args = append(args, "suppressed", n)
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
