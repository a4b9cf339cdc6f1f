package agent

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

// Records about a session below error level go through the limit; errors
// (the survivors of a sweep) and records about no session never do.
func TestSessionLogLimitNeverHoldsBackAnError(t *testing.T) {
	var buf bytes.Buffer
	asked := 0
	log := slog.New(sessionLogLimit{Handler: slog.NewTextHandler(&buf, nil), allow: func(id string) bool {
		asked++
		return id != "churn"
	}})
	log.Info("enforcer: session ended", "session", "churn")
	log.With("session", "churn").Warn("ending interrupted")
	log.Info("enforcer: session ended", "session", "kept")
	log.Error("enforcer: session members survived the sweep", "session", "churn", "survivors", 1)
	log.Info("serving")
	got := buf.String()
	for _, want := range []string{"session=kept", "survived the sweep", "serving"} {
		if !strings.Contains(got, want) {
			t.Errorf("log lacks %q:\n%s", want, got)
		}
	}
	if strings.Count(got, "session=churn") != 1 || strings.Contains(got, "interrupted") {
		t.Errorf("held-back records were written:\n%s", got)
	}
	if asked != 3 {
		t.Errorf("the limit was asked %d times, want 3 (never about an error or no session)", asked)
	}
}
