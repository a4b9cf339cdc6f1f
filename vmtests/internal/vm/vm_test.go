//go:build linux

package vm

import (
	"fmt"
	"strings"
	"testing"
)

func TestRecords(t *testing.T) {
	line := strings.TrimSpace(formatRecord("abc123", recExit, "3"))
	r, ok := parseRecord("abc123", line)
	if !ok || r.Kind != recExit {
		t.Fatalf("parseRecord(%q) = %+v, %v", line, r, ok)
	}
	if code, ok := r.exitCode(); !ok || code != 3 {
		t.Errorf("exitCode = %d, %v", code, ok)
	}
	if _, ok := parseRecord("other", line); ok {
		t.Error("record with another nonce accepted")
	}
	// Kernel noise before the record on the same line does not hide it.
	if r, ok := parseRecord("abc123", "[ 1.0] x VMEXEC abc123 SIGNAL 9 killed"); !ok || r.Rest != "9 killed" {
		t.Errorf("noisy line: %+v, %v", r, ok)
	}
}

func TestLineRing(t *testing.T) {
	r := &lineRing{n: 3}
	for i := 0; i < 5; i++ {
		fmt.Fprintf(r, "line %d\r\n", i)
	}
	r.Write([]byte("[ 2.0] Kernel panic - not syncing: x\nafter\npartial"))
	got := r.Lines()
	if strings.Join(got, "|") != "[ 2.0] Kernel panic - not syncing: x|after|partial" {
		t.Errorf("Lines = %q", got)
	}
	if p := r.panicLine(); p != "[ 2.0] Kernel panic - not syncing: x" {
		t.Errorf("panicLine = %q", p)
	}
}

func TestGuestLibPath(t *testing.T) {
	for in, want := range map[string]string{
		"/lib/x86_64-linux-gnu/libc.so.6":     "/usr/lib/x86_64-linux-gnu/libc.so.6",
		"/lib64/ld-linux-x86-64.so.2":         "/usr/lib64/ld-linux-x86-64.so.2",
		"/usr/lib/x86_64-linux-gnu/libz.so.1": "/usr/lib/x86_64-linux-gnu/libz.so.1",
	} {
		if got := guestLibPath(in); got != want {
			t.Errorf("guestLibPath(%s) = %s, want %s", in, got, want)
		}
	}
}

func TestResultCode(t *testing.T) {
	for _, c := range []struct {
		r    Result
		want int
	}{
		{Result{Status: Exited, ExitCode: 0}, 0},
		{Result{Status: Exited, ExitCode: 2}, 2},
		{Result{Status: Signaled, Signal: "9 killed"}, 137},
		{Result{Status: NoStatus}, 125},
		{Result{Status: TimedOut}, 125},
		{Result{Status: GuestError}, 125},
	} {
		if got := c.r.Code(); got != c.want {
			t.Errorf("%v: Code = %d, want %d", c.r.Status, got, c.want)
		}
	}
}
