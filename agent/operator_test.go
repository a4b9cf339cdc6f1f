package agent

import (
	"log/slog"
	"strings"
	"testing"
)

// The problem log keeps the last warnings and errors with their
// attributes (those of With too), counts a message repeated right after
// itself instead of keeping it twice, keeps maxProblems, and bounds each.
func TestProblemLogKeepsTheLastWarningsAndErrors(t *testing.T) {
	p := &problemLog{}
	log := slog.New(problemHandler{next: slog.DiscardHandler, log: p}).With("component", "enforcer")
	log.Info("serving")
	log.Warn("kill failed", "session", "claude-7", "err", "operation not permitted")
	log.Warn("kill failed", "session", "claude-7", "err", "operation not permitted")
	log.WithGroup("g").Error("store", "path", "/var/lib/x")
	got := p.list()
	if len(got) != 2 {
		t.Fatalf("kept %d problems, want 2: %+v", len(got), got)
	}
	if got[0].What != `kill failed session=claude-7 err="operation not permitted"` || got[0].Repeats != 1 || got[0].Level != "WARN" {
		t.Errorf("first problem %+v", got[0])
	}
	if got[1].What != "store g.path=/var/lib/x" || got[1].Level != "ERROR" {
		t.Errorf("second problem %+v", got[1])
	}
	for i := range 2 * maxProblems {
		log.Error("problem", "n", i, "long", strings.Repeat("x", 2*maxProblemText))
	}
	got = p.list()
	if len(got) != maxProblems || !strings.HasPrefix(got[maxProblems-1].What, "problem n=15 ") {
		t.Fatalf("kept %d, the last %q; want %d, the last n=15", len(got), got[len(got)-1].What, maxProblems)
	}
	for _, pr := range got {
		if len(pr.What) > maxProblemText+len("…") {
			t.Errorf("a problem of %d bytes, over %d", len(pr.What), maxProblemText)
		}
	}
}
