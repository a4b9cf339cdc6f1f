package agenttest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/mcptrace/mcptrace/internal/testenv"
	"github.com/mcptrace/mcptrace/procfs"
)

// A pin directory left by a test process that is gone is removed when the
// next test asks for one; those of live test processes, and directories
// of another form, stay.
func TestPinDirRemovesOnlyTheDirectoriesOfTestsThatAreGone(t *testing.T) {
	testenv.Root(t)
	dir := PinDir(t) // mounts bpffs when missing; this test process's own
	base := filepath.Dir(dir)
	self, err := procfs.ReadStat("", uint32(os.Getpid()))
	if err != nil {
		t.Fatal(err)
	}
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	made := map[string]bool{ // name → removed by the sweep
		fmt.Sprintf("mcptrace-test-%d-%d-x1", gone.Process.Pid, 1):         true,  // its pid is free
		fmt.Sprintf("mcptrace-test-%d-%d-x2", self.PID, self.StartTicks+1): true,  // its pid is another process's now
		fmt.Sprintf("mcptrace-test-%d-%d-x3", self.PID, self.StartTicks):   false, // a live test's
		fmt.Sprintf("mcptrace-test-x4-%d", os.Getpid()):                    false, // another form
	}
	for name := range made {
		p := filepath.Join(base, name)
		if err := os.Mkdir(p, 0o700); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(p) })
	}
	sweepPinDirs(t, base)
	for name, removed := range made {
		_, err := os.Stat(filepath.Join(base, name))
		if removed != os.IsNotExist(err) {
			t.Errorf("%s: removed %v, want %v (stat: %v)", name, os.IsNotExist(err), removed, err)
		}
	}
	if _, err := os.Stat(dir); err != nil {
		t.Errorf("the test's own pin directory: %v", err)
	}
}
