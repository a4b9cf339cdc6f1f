package testenv

import (
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// PIDFileVar names the file a "spawn" helper writes its child's PID to.
const PIDFileVar = "MCPTRACE_TEST_PIDFILE"

// helperLife bounds how long a Windows helper process lives when nothing
// ends it: a test that fails to end it leaks it for this long at most.
const helperLife = 2 * time.Minute

// WindowsHelpers are the helper processes of the tests that run under
// wine: "sleep" sleeps; "spawn" starts a "sleep" child, writes the
// child's PID to the file PIDFileVar names, and sleeps.
var WindowsHelpers = map[string]func(){
	"sleep": func() { time.Sleep(helperLife) },
	"spawn": func() {
		c := exec.Command(os.Args[0], "-test.run=^$")
		c.Env = HelperEnv("sleep")
		if err := c.Start(); err != nil {
			fmt.Fprintln(os.Stderr, "spawn:", err)
			os.Exit(1)
		}
		if err := os.WriteFile(os.Getenv(PIDFileVar), []byte(strconv.Itoa(c.Process.Pid)), 0o600); err != nil {
			fmt.Fprintln(os.Stderr, "spawn:", err)
			os.Exit(1)
		}
		time.Sleep(helperLife)
	},
}

// Helper is a command that runs this test binary as helper name, with
// args after it (a helper ignores them: they are there to be read back
// from its command line).
func Helper(name string, args ...string) *exec.Cmd {
	c := exec.Command(os.Args[0], append([]string{"-test.run=^$"}, args...)...)
	c.Env = HelperEnv(name)
	return c
}

// SpawnedPID waits for a "spawn" helper to write its child's PID to
// file.
func SpawnedPID(t testing.TB, file string) uint32 {
	t.Helper()
	var pid uint64
	Eventually(t, "the spawn helper to write its child's PID", func() (bool, string) {
		b, err := os.ReadFile(file)
		if err != nil {
			return false, err.Error()
		}
		pid, err = strconv.ParseUint(strings.TrimSpace(string(b)), 10, 32)
		return err == nil && pid != 0, fmt.Sprintf("%q", b)
	})
	return uint32(pid)
}

// TempDir is t.TempDir for the tests that run under wine: wine 8 lacks
// the call os.RemoveAll makes (it fails with "Invalid function"), which
// t.TempDir's cleanup uses. This one removes what is in the directory
// with os.Remove, deepest first, and fails the test if that fails.
func TempDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "mcptrace-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		var paths []string
		_ = filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
			paths = append(paths, p)
			return err
		})
		for _, p := range slices.Backward(paths) {
			if err := os.Remove(p); err != nil {
				t.Errorf("remove the test's temporary %s: %v", p, err)
			}
		}
	})
	return dir
}
