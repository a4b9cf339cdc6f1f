//go:build linux

package vmtests

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcptrace/mcptrace/internal/testenv"
	"github.com/mcptrace/mcptrace/vmtests/internal/vm"
)

// These self-tests boot real guests (one kernel, 6.1 by default, or
// $MCPTRACE_VMTEST_KERNEL) to prove that vmexec never swallows a failure.
// The guest side is the package in testdata/guestfixture.

const fixtureDir = "testdata/guestfixture"

var (
	setupOnce sync.Once
	setupErr  error
	missing   []prereq // skip (or fail under MCPTRACE_REQUIRE_ALL=1) naming these
	workDir   string
	vmexecBin string
	fixture   string // the fixture's test binary
)

type prereq struct{ what, why string }

func TestMain(m *testing.M) {
	code := m.Run()
	if workDir != "" {
		os.RemoveAll(workDir)
	}
	os.Exit(code)
}

func goTool() (string, error) {
	if p, err := exec.LookPath("go"); err == nil {
		return p, nil
	}
	p := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(p); err != nil {
		return "", errors.New("the go command (to build vmexec and the fixture)")
	}
	return p, nil
}

func kernelSpec() string {
	if k := os.Getenv("MCPTRACE_VMTEST_KERNEL"); k != "" {
		return k
	}
	return "6.1"
}

// prepare builds vmexec and the fixture test binary once and resolves the
// kernel, recording what is missing.
func prepare(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("boots VMs; skipped with -short")
	}
	setupOnce.Do(func() {
		if _, err := vm.FindQEMU(); err != nil {
			missing = append(missing, prereq{"qemu-system-x86_64", err.Error()})
		}
		if bb, err := vm.FindBusybox(); err != nil {
			missing = append(missing, prereq{"busybox", err.Error()})
		} else if err := vm.CheckStatic(bb, "busybox", "install busybox-static"); err != nil {
			missing = append(missing, prereq{"a static busybox", err.Error()})
		}
		goCmd, err := goTool()
		if err != nil {
			missing = append(missing, prereq{"the go command", err.Error()})
		}
		if len(missing) > 0 {
			return
		}
		if workDir, setupErr = os.MkdirTemp("", "vmtests-"); setupErr != nil {
			return
		}
		vmexecBin = filepath.Join(workDir, "vmexec")
		fixture = filepath.Join(workDir, "guestfixture.test")
		for _, args := range [][]string{
			{"build", "-o", vmexecBin, "github.com/mcptrace/mcptrace/vmtests/cmd/vmexec"},
			{"test", "-c", "-o", fixture, "./" + fixtureDir},
		} {
			cmd := exec.Command(goCmd, args...)
			cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
			if out, err := cmd.CombinedOutput(); err != nil {
				setupErr = fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, out)
				return
			}
		}
		// Resolve (and on first use download) the kernel, so that each
		// test's timing is the guest's alone.
		cmd := exec.Command(vmexecBin, "-kernel", kernelSpec(), "-resolve")
		if out, err := cmd.CombinedOutput(); err != nil {
			missing = append(missing, prereq{"kernel " + kernelSpec(), fmt.Sprintf("vmexec -resolve: %v: %s", err, strings.TrimSpace(string(out)))})
		}
	})
	if setupErr != nil {
		t.Fatal(setupErr)
	}
	if len(missing) > 0 {
		var what, why []string
		for _, m := range missing {
			what = append(what, m.what)
			why = append(why, m.why)
		}
		testenv.Missing(t, strings.Join(what, " and "), "the VM runner self-tests boot real guests: "+strings.Join(why, "; "))
	}
}

type runResult struct {
	code           int
	stdout, stderr string
	elapsed        time.Duration
}

// runVM runs the fixture binary through vmexec, in the fixture's package
// directory, as go test -exec would.
func runVM(t *testing.T, vmexecFlags []string, testArgs ...string) runResult {
	t.Helper()
	args := append([]string{"-kernel", kernelSpec(), "-env", "MCPTRACE_VMTEST_FIXTURE=1"}, vmexecFlags...)
	args = append(args, fixture)
	args = append(args, testArgs...)
	cmd := exec.Command(vmexecBin, args...)
	cmd.Dir = fixtureDir
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	r := runResult{stdout: stdout.String(), stderr: stderr.String(), elapsed: time.Since(start)}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	default:
		t.Fatalf("running vmexec: %v", err)
	}
	t.Logf("vmexec %s: exit %d after %s\n--- stdout:\n%s--- stderr:\n%s", strings.Join(args, " "), r.code, r.elapsed.Round(100*time.Millisecond), r.stdout, r.stderr)
	return r
}

func mustContain(t *testing.T, what, s string, subs ...string) {
	t.Helper()
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			t.Errorf("%s does not contain %q", what, sub)
		}
	}
}

func TestGuestOnlyPassExitsZero(t *testing.T) {
	t.Parallel()
	prepare(t)
	extra := filepath.Join(t.TempDir(), "hello")
	os.WriteFile(extra, []byte("shipped with -file\n"), 0o644)
	r := runVM(t, []string{"-file", extra + ":/opt/extra/hello", "-env", "MCPTRACE_VMTEST_EXTRA=shipped with -file",
		"-env", "MCPTRACE_VMTEST_ARGS=a b|'c\"|$HOME;*"},
		"-test.v", "-test.run", "^TestGuestOnlyPass$", "--", "a b", `'c"`, "$HOME;*")
	if r.code != 0 {
		t.Errorf("exit code %d, want 0", r.code)
	}
	mustContain(t, "stdout", r.stdout, "FIXTURE-PASS-MARKER", "--- PASS: TestGuestOnlyPass", "\nPASS\n")
}

func TestGuestOnlyFailureExitsNonZero(t *testing.T) {
	t.Parallel()
	prepare(t)
	r := runVM(t, nil, "-test.v", "-test.run", "^TestGuestOnlyFail$")
	if r.code != 1 {
		t.Errorf("exit code %d, want 1 (the test binary's own status)", r.code)
	}
	mustContain(t, "stdout", r.stdout, "FIXTURE-FAIL-MARKER", "--- FAIL: TestGuestOnlyFail")
	mustContain(t, "stderr", r.stderr, "exited with status 1 in the guest")
}

func TestPanicExitsNonZero(t *testing.T) {
	t.Parallel()
	prepare(t)
	r := runVM(t, nil, "-test.v", "-test.run", "^TestPanic$")
	if r.code == 0 {
		t.Errorf("exit code 0 for a panicking test")
	}
	mustContain(t, "stdout", r.stdout, "panic: FIXTURE-PANIC-MARKER", "--- FAIL: TestPanic")
}

func TestHangIsKilledAtTimeout(t *testing.T) {
	t.Parallel()
	prepare(t)
	const limit = 45 * time.Second
	r := runVM(t, []string{"-timeout", limit.String()}, "-test.v", "-test.run", "^TestHang$")
	if r.code == 0 {
		t.Fatalf("exit code 0 for a hung guest")
	}
	if r.code != 125 {
		t.Errorf("exit code %d, want 125 (no status from the guest)", r.code)
	}
	if r.elapsed < limit || r.elapsed > limit+30*time.Second {
		t.Errorf("vmexec returned after %s, want just over %s", r.elapsed, limit)
	}
	// The test really was running (not stuck booting) when it was killed.
	mustContain(t, "stdout", r.stdout, "=== RUN   TestHang", "FIXTURE-HANG-START")
	mustContain(t, "stderr", r.stderr, "timed out after 45s", "the test binary was still running",
		"guest console lines:", "vmexec-init: kernel", "running /vmexec/bin/guestfixture.test")
}

func TestKernelPanicIsAFailure(t *testing.T) {
	t.Parallel()
	prepare(t)
	r := runVM(t, nil, "-test.v", "-test.run", "^TestKernelPanic$")
	if r.code != 125 {
		t.Errorf("exit code %d, want 125", r.code)
	}
	mustContain(t, "stdout", r.stdout, "FIXTURE-KERNEL-PANIC-START")
	mustContain(t, "stderr", r.stderr, "kernel panicked", "Kernel panic")
}

func TestBootFailureBeforeTheTestIsRetriedThenFails(t *testing.T) {
	t.Parallel()
	prepare(t)
	// No init in the initramfs at that path: the kernel panics before the
	// test binary could start, on every boot.
	r := runVM(t, []string{"-append", "rdinit=/nonexistent", "-boot-tries", "2"}, "-test.v")
	if r.code != 125 {
		t.Errorf("exit code %d, want 125", r.code)
	}
	mustContain(t, "stderr", r.stderr, "boot 1 of 2 failed before the test started", "the test binary never started")
	if strings.Contains(r.stderr, "boot 2 of 2 failed") {
		t.Errorf("booted more than -boot-tries times")
	}
	if r.stdout != "" {
		t.Errorf("stdout %q: nothing of the test may appear", r.stdout)
	}
}

// TestGoTestJSON runs the fixture through go test -json -exec, as the
// matrix does, and checks the event stream: every line is JSON, statuses
// are the tests' own, output bytes arrive unchanged, failure propagates.
func TestGoTestJSON(t *testing.T) {
	t.Parallel()
	prepare(t)
	goCmd, _ := goTool()
	cmd := exec.Command(goCmd, "test", "-json", "-count=1",
		"-exec", vmexecBin+" -kernel "+kernelSpec()+" -env MCPTRACE_VMTEST_FIXTURE=1",
		"-run", "^(TestGuestOnlyPass|TestGuestOnlyFail|TestSkipInGuest|TestOutputBytes)$",
		"./"+fixtureDir)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	t.Logf("go test -json: %v\n--- stdout:\n%s--- stderr:\n%s", err, stdout.String(), stderr.String())
	if err == nil {
		t.Error("go test succeeded although TestGuestOnlyFail fails in the guest")
	}
	status := map[string]string{}
	var output strings.Builder
	sc := bufio.NewScanner(&stdout)
	for sc.Scan() {
		var ev struct{ Action, Test, Output string }
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("not a JSON event: %q: %v", sc.Text(), err)
		}
		switch ev.Action {
		case "pass", "fail", "skip":
			status[ev.Test] = ev.Action
		case "output":
			output.WriteString(ev.Output)
		}
	}
	want := map[string]string{
		"TestGuestOnlyPass": "pass", "TestGuestOnlyFail": "fail",
		"TestSkipInGuest": "skip", "TestOutputBytes": "pass", "": "fail",
	}
	for test, w := range want {
		if status[test] != w {
			t.Errorf("%q: status %q, want %q", test, status[test], w)
		}
	}
	mustContain(t, "JSON output", output.String(), "BYTES:a\tb\r\nc é ✓ END\n", "FIXTURE-SKIP-REASON")
}
