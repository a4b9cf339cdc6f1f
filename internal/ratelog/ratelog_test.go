package ratelog

import (
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestLimiter(t *testing.T) {
	l := New[string](3, uint64(10*time.Second), 2)
	now := uint64(1000 * time.Second)
	steps := []struct {
		name    string
		advance time.Duration
		key     string
		want    string
	}{
		{"a burst is allowed", 0, "a", "true 0"},
		{"a burst is allowed", 0, "a", "true 0"},
		{"a burst is allowed", 0, "a", "true 0"},
		{"beyond the burst a line is held back", 0, "a", "false 0"},
		{"beyond the burst a line is held back", time.Second, "a", "false 0"},
		{"another key has its own burst", 0, "b", "true 0"},
		{"after an interval one line is allowed and says what was held back", 9 * time.Second, "a", "true 2"},
		{"and the count starts again", 0, "a", "false 0"},
		{"a clock that steps back gives no credit", -5 * time.Second, "a", "false 0"},
		{"a third key evicts the stalest one when the table is full", time.Hour, "c", "true 0"},
		{"an evicted key starts with a full burst", 0, "b", "true 0"},
	}
	for _, s := range steps {
		now = uint64(int64(now) + int64(s.advance))
		ok, n := l.Allow(s.key, now)
		if got := fmt.Sprint(ok, n); got != s.want {
			t.Errorf("%s (%s): Allow = %s, want %s", s.name, s.key, got, s.want)
		}
	}
	if len(l.keys) > 2 {
		t.Errorf("%d keys kept, want at most 2", len(l.keys))
	}
	if l.Suppressed != 4 {
		t.Errorf("Suppressed = %d, want 4", l.Suppressed)
	}
}

func TestFieldCutsWhatACallerChose(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"short is kept", "work", "work"},
		{"long is cut with its length", strings.Repeat("x", 200), strings.Repeat("x", 160) + "…(40 more bytes)"},
		{"a cut rune is dropped", strings.Repeat("x", 159) + "é", strings.Repeat("x", 159) + "…(1 more bytes)"},
	} {
		if got := Field(tc.in); got != tc.want {
			t.Errorf("%s: Field = %q, want %q", tc.name, got, tc.want)
		}
	}
}

// A logger made from Handler logs a key's lines as Log does: the burst,
// then one per interval with the count held back, errors always, and
// what With adds kept; another key has its own burst.
func TestHandlerBoundsAKeysLinesAndCountsTheRest(t *testing.T) {
	l := New[uint32](2, uint64(10*time.Second), 8)
	var mu sync.Mutex
	now := uint64(1000 * time.Second)
	clock := func() uint64 { return now }
	var out strings.Builder
	inner := slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelDebug})
	user := slog.New(l.Handler(inner, &mu, 65534, clock)).With("dry_run", true)
	for range 50 {
		user.Info("ending orphans")
	}
	user.Error("must be seen")
	slog.New(l.Handler(inner, &mu, 1000, clock)).Info("another user")
	now += uint64(10 * time.Second)
	user.Info("ending orphans")
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 5 || !strings.Contains(lines[2], "must be seen") || !strings.Contains(lines[3], "another user") ||
		!strings.Contains(lines[4], "held_back_logs=48") || !strings.Contains(lines[4], "dry_run=true") {
		t.Errorf("want 2 lines, the error, the other user's and one with 48 held back:\n%s", out.String())
	}
	if l.Suppressed != 48 {
		t.Errorf("suppressed %d, want 48", l.Suppressed)
	}
}
