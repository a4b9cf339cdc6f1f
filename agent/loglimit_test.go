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
	var owners []uint32
	log := slog.New(sessionLogLimit{Handler: slog.NewTextHandler(&buf, nil), allow: func(id string, owner *uint32) bool {
		asked++
		if owner != nil {
			owners = append(owners, *owner)
		}
		return id != "churn"
	}})
	log.Info("session enforced", "session", "churn", "owner_uid", uint32(1000))
	log.With("session", "churn", "owner_uid", uint32(1000)).Warn("ending interrupted")
	log.Info("session enforced", "session", "kept")
	log.Error("session members survived the sweep", "session", "churn", "survivors", 1)
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
	if len(owners) != 2 || owners[0] != 1000 || owners[1] != 1000 {
		t.Errorf("the limit was told owners %v, want 1000 twice (session IDs are scoped by owner)", owners)
	}
}
