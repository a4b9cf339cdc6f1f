// Package guestfixture holds tests that the vmtests self-tests run in a
// guest through vmexec, to prove that the runner reports passes, failures,
// panics, hangs and kernel panics faithfully. It is under testdata/ so that
// "go test ./..." ignores it, and every test skips unless
// MCPTRACE_VMTEST_FIXTURE=1, so running it by hand on the host is harmless.
package guestfixture

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

func fixture(t *testing.T) {
	t.Helper()
	if os.Getenv("MCPTRACE_VMTEST_FIXTURE") != "1" {
		t.Skip("fixture for the vmtests self-tests; set MCPTRACE_VMTEST_FIXTURE=1")
	}
}

// inGuest is true when PID 1 is vmexec's guest init (/init from the
// initramfs); on a host PID 1 is systemd, docker-init, etc.
func inGuest() bool {
	exe, err := os.Readlink("/proc/1/exe")
	return err == nil && exe == "/init"
}

func TestGuestOnlyPass(t *testing.T) {
	fixture(t)
	if !inGuest() {
		t.Fatal("not in a vmexec guest: /proc/1/exe is not /init")
	}
	if os.Getenv("MCPTRACE_VM_GUEST") != "1" {
		t.Fatal("MCPTRACE_VM_GUEST is not set")
	}
	host, _ := os.Hostname()
	if host != "vmexec" {
		t.Fatalf("hostname %q, want vmexec", host)
	}
	b, err := os.ReadFile("testdata/fixture.txt")
	if err != nil || strings.TrimSpace(string(b)) != "fixture data" {
		t.Fatalf("testdata/fixture.txt: %q, %v", b, err)
	}
	if want := os.Getenv("MCPTRACE_VMTEST_EXTRA"); want != "" {
		b, err := os.ReadFile("/opt/extra/hello")
		if err != nil || strings.TrimSpace(string(b)) != want {
			t.Fatalf("-file /opt/extra/hello: %q, %v; want %q", b, err, want)
		}
	}
	if args := os.Getenv("MCPTRACE_VMTEST_ARGS"); args != "" {
		// The runner must pass arguments through unchanged.
		got := strings.Join(os.Args[len(os.Args)-3:], "|")
		if got != args {
			t.Fatalf("last args %q, want %q", got, args)
		}
	}
	fmt.Println("FIXTURE-PASS-MARKER")
}

func TestGuestOnlyFail(t *testing.T) {
	fixture(t)
	if inGuest() {
		t.Fatal("FIXTURE-FAIL-MARKER: intentional failure inside the guest")
	}
}

func TestSkipInGuest(t *testing.T) {
	fixture(t)
	t.Skip("FIXTURE-SKIP-REASON: skipped on purpose")
}

// TestOutputBytes prints bytes a serial console would mangle (CR, tab,
// non-ASCII, a line without newline before the next write).
func TestOutputBytes(t *testing.T) {
	fixture(t)
	fmt.Print("BYTES:a\tb\r\nc é ✓ ")
	fmt.Println("END")
}

func TestPanic(t *testing.T) {
	fixture(t)
	panic("FIXTURE-PANIC-MARKER")
}

func TestHang(t *testing.T) {
	fixture(t)
	fmt.Println("FIXTURE-HANG-START")
	for {
		time.Sleep(time.Hour)
	}
}

// TestKernelPanic crashes the guest kernel (sysrq c): the runner must
// report a failure, not a pass, even though the test never "fails".
func TestKernelPanic(t *testing.T) {
	fixture(t)
	if !inGuest() {
		t.Skip("only in a guest")
	}
	fmt.Println("FIXTURE-KERNEL-PANIC-START")
	if err := os.WriteFile("/proc/sysrq-trigger", []byte("c"), 0); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Minute)
}
