// Package testenv decides whether a test can run here and turns skips for
// missing features into failures where every feature must be present.
//
// CI sets MCPTRACE_REQUIRE_ALL=1: there, a test that would skip because
// something is missing (root, kernel BPF support, docker, prometheus) fails
// instead, so a green run always means the real thing was exercised.
package testenv

import (
	"os"
	"testing"
)

// RequireAllVar names the environment variable that turns skips into failures.
const RequireAllVar = "MCPTRACE_REQUIRE_ALL"

// RequireAll reports whether missing features must fail tests.
func RequireAll() bool { return os.Getenv(RequireAllVar) == "1" }

// Missing skips the test because feature is missing here, or fails it when
// RequireAll is set. The message names the feature and why.
func Missing(t testing.TB, feature, why string) {
	t.Helper()
	if RequireAll() {
		t.Fatalf("%s is missing (%s) and %s=1 requires it", feature, why, RequireAllVar)
	}
	t.Skipf("%s is missing: %s", feature, why)
}

// Root requires uid 0 (loading BPF programs, signalling other users' processes).
func Root(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		Missing(t, "root", "loading BPF programs needs uid 0")
	}
}
