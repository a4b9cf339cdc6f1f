// Package testenv decides whether a test can run here and turns skips for
// missing features into failures where every feature must be present.
//
// CI sets MCPTRACE_REQUIRE_ALL=1: there, a test that would skip because
// something is missing (root, kernel BPF support, docker, prometheus) fails
// instead, so a green run always means the real thing was exercised.
package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"
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

// BinaryVar names the environment variable that points tests at a built
// mcptrace binary (the VM runner ships one into the guest, where there is
// no Go toolchain).
const BinaryVar = "MCPTRACE_BIN"

var (
	binOnce sync.Once
	binPath string
	binErr  error
)

// Binary returns the path of an mcptrace binary every user may execute:
// $MCPTRACE_BIN, or one built once per test process from ./cmd/mcptrace.
// The file is named mcptrace, as the agent recognises its tags by name.
func Binary(t testing.TB) string {
	t.Helper()
	if p := os.Getenv(BinaryVar); p != "" {
		return p
	}
	binOnce.Do(func() {
		gobin, err := exec.LookPath("go")
		if err != nil {
			binErr = fmt.Errorf("no %s and no go toolchain to build one: %w", BinaryVar, err)
			return
		}
		dir, err := os.MkdirTemp("", "mcptrace-bin-")
		if err != nil {
			binErr = err
			return
		}
		os.Chmod(dir, 0o755)
		binPath = filepath.Join(dir, "mcptrace")
		cmd := exec.Command(gobin, "build", "-o", binPath, "github.com/mcptrace/mcptrace/cmd/mcptrace")
		if out, err := cmd.CombinedOutput(); err != nil {
			binErr = fmt.Errorf("go build ./cmd/mcptrace: %v\n%s", err, out)
		}
	})
	if binErr != nil {
		Missing(t, "the mcptrace binary", binErr.Error())
	}
	return binPath
}

// RemoveBinary deletes the binary Binary built, if any. TestMain calls it
// after the tests ran.
func RemoveBinary() {
	if binPath != "" {
		os.RemoveAll(filepath.Dir(binPath))
	}
}

// Eventually polls cond until it holds, or fails the test after
// Bound(10 s) with what and cond's last detail. The agent applies kernel
// events a moment after they happen, so tests wait for its view instead
// of assuming it. It asserts no bound: a guest emulated in software runs
// about ten times slower, where 10 s is a second of the host's work (an
// agent's restart takes longer), and the longer wait costs time only when
// the test fails.
func Eventually(t testing.TB, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(Bound(10 * time.Second))
	for {
		ok, detail := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s: %s", what, detail)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Emulated reports whether the test runs in a QEMU guest under software
// emulation (vmtests sets MCPTRACE_VM_GUEST), where everything takes about
// ten times longer than on the host.
func Emulated() bool { return os.Getenv("MCPTRACE_VM_GUEST") == "1" }

// Sized is a test's repetitions or storm size: host on the host, guest in
// an emulated guest. A guest runs ten times slower, and there a test
// proves the same code path on another kernel, which needs the path run,
// not the host's count again; the host's count is what shakes out races
// (docs/ci.md).
func Sized(host, guest int) int {
	if Emulated() {
		return guest
	}
	return host
}

// Bound is a time bound a test asserts: d on real hardware, ten times d in
// an emulated guest (Emulated). Bounds the issue states are asserted as
// they are on the host; the guests prove the behaviour on their kernels.
func Bound(d time.Duration) time.Duration {
	if Emulated() {
		return 10 * d
	}
	return d
}

// SelfForEveryone copies the running test binary where every uid may run
// it (go test builds it in a private directory) and returns the copy's
// path, for helper processes a test starts as another uid. The copy is
// removed when the test ends.
func SelfForEveryone(t testing.TB) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "mcptrace-test-bin-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, filepath.Base(self))
	if err := os.WriteFile(path, data, 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}
