package ratelog

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestLimiter(t *testing.T) {
	clock := time.Unix(1000, 0)
	l := New(3, 10*time.Second, 2)
	l.now = func() time.Time { return clock }
	allow := func(key string) string {
		ok, n := l.Allow(key)
		return fmt.Sprint(ok, n)
	}
	steps := []struct {
		name    string
		advance time.Duration
		key     string
		want    string
	}{
		{"a burst is allowed", 0, "a", "true 0"},
		{"a burst is allowed", 0, "a", "true 0"},
		{"a burst is allowed", 0, "a", "true 0"},
		{"beyond the burst a line is suppressed", 0, "a", "false 0"},
		{"beyond the burst a line is suppressed", time.Second, "a", "false 0"},
		{"another key has its own burst", 0, "b", "true 0"},
		{"after an interval one line is allowed and says what was suppressed", 9 * time.Second, "a", "true 2"},
		{"and the count starts again", 0, "a", "false 0"},
		{"a third key evicts the stalest one when the table is full", 0, "c", "true 0"},
		{"an evicted key starts with a full burst", 0, "b", "true 0"},
	}
	for _, s := range steps {
		clock = clock.Add(s.advance)
		if got := allow(s.key); got != s.want {
			t.Errorf("%s (%s): Allow = %s, want %s", s.name, s.key, got, s.want)
		}
	}
	if len(l.keys) > 2 {
		t.Errorf("%d keys kept, want at most 2", len(l.keys))
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
