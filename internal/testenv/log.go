package testenv

import (
	"log/slog"
	"strings"
	"testing"
)

// Logger logs through t.Log at level and above, one record per line, so a
// test's logs show beside its failure and only when it fails (or -v).
func Logger(t testing.TB, level slog.Level) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: level}))
}

type tWriter struct{ t testing.TB }

func (w tWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(b), "\n"))
	return len(b), nil
}
