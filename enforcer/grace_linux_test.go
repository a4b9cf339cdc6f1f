package enforcer

import (
	"testing"
	"time"
)

// TestGraceLongerThanTheOldSweepTimeoutEndsInSIGKILL: a grace period of
// 31s, accepted by the configuration, used to outlast the sweep, which gave
// up at a fixed 30s and reported a survivor that was never sent SIGKILL.
// The sweep's deadline now follows the grace period.
func TestGraceLongerThanTheOldSweepTimeoutEndsInSIGKILL(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: this test waits out a 31s grace period")
	}
	r := newRig(t)
	member := r.startTrapped(ignoreTERM) // returns once the trap is set
	const grace = 31 * time.Second
	e := New(Config{Policy: PolicyGraceful, Grace: grace}, nil, testLogger(t))
	rep := e.End(t.Context(), Ending{Session: "long-grace", Reason: "root exited", Members: r.tree(member.id)})
	if !rep.Empty || rep.Survivors != 0 {
		t.Fatalf("report %+v, want no survivor", summary(rep))
	}
	if member.alive() {
		t.Fatal("the member ignoring SIGTERM is alive after the sweep")
	}
	if rep.Duration < grace {
		t.Errorf("ended after %v, before the grace period %v", rep.Duration, grace)
	}
	t.Logf("killed %d after %v", rep.Killed, rep.Duration)
}
