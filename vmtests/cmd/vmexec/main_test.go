//go:build linux

package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcptrace/mcptrace/vmtests/internal/kernel"
)

func TestTestTimeout(t *testing.T) {
	for _, c := range []struct {
		args []string
		want time.Duration
		ok   bool
	}{
		{[]string{"-test.paniconexit0", "-test.timeout=10m0s", "-test.v=test2json"}, 10 * time.Minute, true},
		{[]string{"--test.timeout", "90s"}, 90 * time.Second, true},
		{[]string{"-test.timeout=0s"}, 0, true},
		{[]string{"-test.v", "--", "-test.timeout=5s"}, 0, false},
		{[]string{"-test.run", "X"}, 0, false},
	} {
		got, ok := testTimeout(c.args)
		if got != c.want || ok != c.ok {
			t.Errorf("testTimeout(%q) = %v, %v; want %v, %v", c.args, got, ok, c.want, c.ok)
		}
	}
}

func TestDefaultGuestDir(t *testing.T) {
	root := t.TempDir()
	os.WriteFile(filepath.Join(root, "go.mod"), []byte("module x\n"), 0o644)
	pkg := filepath.Join(root, "a", "b")
	os.MkdirAll(pkg, 0o755)
	if got := defaultGuestDir(pkg); got != "/src/a/b" {
		t.Errorf("defaultGuestDir = %q, want /src/a/b", got)
	}
	if got := defaultGuestDir(root); got != "/src" {
		t.Errorf("defaultGuestDir(root) = %q, want /src", got)
	}
}

func TestGuestEnv(t *testing.T) {
	t.Setenv("MCPTRACE_FOO", "bar")
	t.Setenv("OTHER", "x")
	t.Setenv("PICKED", "y=z")
	t.Setenv("MCPTRACE_VM_GUEST", "0") // the guest's own value wins
	env, err := guestEnv([]string{"PICKED", "SET=1", "UNSET_ON_HOST"}, &kernel.Kernel{Release: "6.1.0-1-amd64"}, "6.1")
	if err != nil {
		t.Fatal(err)
	}
	s := "\n" + strings.Join(env, "\n") + "\n"
	for _, want := range []string{"MCPTRACE_FOO=bar", "PICKED=y=z", "SET=1", "MCPTRACE_VM_GUEST=1", "MCPTRACE_VM_KERNEL_RELEASE=6.1.0-1-amd64", "PATH=/bin:/sbin:/usr/bin:/usr/sbin"} {
		if !strings.Contains(s, "\n"+want+"\n") {
			t.Errorf("env lacks %s: %q", want, env)
		}
	}
	for _, notWant := range []string{"OTHER=", "UNSET_ON_HOST"} {
		if strings.Contains(s, "\n"+notWant) {
			t.Errorf("env has %s: %q", notWant, env)
		}
	}
}
