package winproc

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/windows"

	"github.com/mcptrace/mcptrace/internal/testenv"
	"github.com/mcptrace/mcptrace/lineage"
	"github.com/mcptrace/mcptrace/windows/owners"
)

// These tests run under wine in CI (scripts/wine-test.sh) and on Windows.

func TestMain(m *testing.M) {
	testenv.RunHelper(testenv.WindowsHelpers)
	os.Exit(m.Run())
}

// start starts cmd and ends it when the test ends.
func start(t *testing.T, cmd *exec.Cmd) *exec.Cmd {
	t.Helper()
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %v: %v", cmd.Args, err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd
}

func find(entries []Entry, pid uint32) (Entry, bool) {
	i := slices.IndexFunc(entries, func(e Entry) bool { return e.PID == pid })
	if i < 0 {
		return Entry{}, false
	}
	return entries[i], true
}

// A process started before the consumer is seeded from the snapshot with
// its parent, its create time and its command line, as a handle reads
// them; the lineage snapshot names its parent by both.
func TestSnapshotSeedsAChildWithItsParentCreateTimeAndCommandLine(t *testing.T) {
	child := start(t, testenv.Helper("sleep", "--token=s3cr3t", "two words", `quote"d`))
	pid := uint32(child.Process.Pid)
	self, selfCreate, err := Self()
	if err != nil {
		t.Fatal(err)
	}
	entries, err := Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	e, ok := find(entries, pid)
	if !ok {
		t.Fatalf("the child %d is not in the snapshot of %d processes", pid, len(entries))
	}
	h, err := Open(pid, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if e.PPID != self || e.Create == 0 || e.Create != h.Create || e.Create < selfCreate {
		t.Errorf("child entry %+v: want parent %d and the handle's create time %d (after ours, %d)", e, self, h.Create, selfCreate)
	}
	if e.ArgvTruncated || !slices.Equal(e.Argv[1:], child.Args[1:]) {
		t.Errorf("argv %q (truncated %v), want %q", e.Argv, e.ArgvTruncated, child.Args)
	}
	if filepath.Base(e.Path) != filepath.Base(os.Args[0]) || e.Image == "" {
		t.Errorf("image %q path %q, want the test binary %q", e.Image, e.Path, os.Args[0])
	}
	clock, err := SystemClock()
	if err != nil {
		t.Fatal(err)
	}
	if clock.Boot == 0 || clock.Boot > selfCreate {
		t.Errorf("boot time %d is not before this process's creation %d", clock.Boot, selfCreate)
	}
	tab, _ := owners.Load("")
	owner := func(tok owners.Token) uint32 { uid, _ := tab.Owner(tok); return uid }
	snaps := Snapshots(entries, clock, owner)
	tok, err := h.Token()
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(snaps, func(s lineage.Snapshot) bool { return s.ID.PID == pid })
	if i < 0 || snaps[i].PPID != self || snaps[i].ID.Start != clock.Since(h.Create) || snaps[i].UID != owner(tok) {
		t.Errorf("lineage snapshot of the child: %+v", snaps[max(i, 0)])
	}
}

// The command line comes from the process's PEB exactly as the process
// was started with it, spaces and quotes included, through cmd.exe too.
func TestCommandLineIsReadFromThePEB(t *testing.T) {
	child := start(t, testenv.Helper("sleep", "a b", `c"d`, `e\`, ""))
	h, err := OpenForRead(uint32(child.Process.Pid), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	line, truncated, err := h.CommandLine()
	if err != nil || truncated {
		t.Fatalf("CommandLine: %q truncated %v: %v", line, truncated, err)
	}
	argv, err := SplitCommandLine(line)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(argv[1:], child.Args[1:]) {
		t.Errorf("read %q, split %q; want %q", line, argv, child.Args)
	}
}

// A handle is opened for an identity: the same PID with another create
// time is another process, and an exited process is gone.
func TestOpenRefusesAnotherIdentityAndAnExitedProcess(t *testing.T) {
	child := start(t, testenv.Helper("sleep"))
	pid := uint32(child.Process.Pid)
	h, err := Open(pid, 0)
	if err != nil {
		t.Fatal(err)
	}
	create := h.Create
	h.Close()
	if _, err := Open(pid, create+1); !errors.Is(err, ErrGone) {
		t.Errorf("Open with a later create time: %v, want ErrGone", err)
	}
	h, err = Open(pid, create)
	if err != nil {
		t.Fatalf("Open with its create time: %v", err)
	}
	defer h.Close()
	if err := h.Terminate(9); err != nil {
		t.Fatal(err)
	}
	if done, err := h.Wait(10 * time.Second); !done || err != nil {
		t.Fatalf("terminated process did not exit: %v", err)
	}
	if done, code, err := h.Exited(); !done || code != 9 || err != nil {
		t.Errorf("Exited = %v, %d, %v; want true, 9", done, code, err)
	}
	if err := h.Terminate(9); err != nil {
		t.Errorf("terminating an exited process: %v", err)
	}
}

// `cmd.exe /c` started in a job, with a helper below it and the helper's
// own child below that: all three are in the job and listed, the
// grandchild included, and closing the job ends them all; a process
// started outside the job lives on.
func TestAJobHoldsACmdTreeAndEndsItWhenClosed(t *testing.T) {
	bystander := start(t, testenv.Helper("sleep"))
	job, err := NewJob()
	if err != nil {
		t.Fatal(err)
	}
	defer job.Close()
	pidFile := filepath.Join(testenv.TempDir(t), "child.pid")
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	root := exec.Command("cmd.exe", "/c", self, "-test.run=^$")
	root.Env = append(testenv.HelperEnv("spawn"), testenv.PIDFileVar+"="+pidFile)
	rh, err := job.Start(root)
	if err != nil {
		t.Fatal(err)
	}
	defer rh.Close()
	t.Cleanup(func() { _ = root.Process.Kill(); _ = root.Wait() })
	grandchild := testenv.SpawnedPID(t, pidFile)
	gh, err := Open(grandchild, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer gh.Close()
	if in, err := job.Contains(gh); !in || err != nil {
		t.Errorf("the grandchild is not in the job: %v, %v", in, err)
	}
	bh, err := Open(uint32(bystander.Process.Pid), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer bh.Close()
	if in, err := job.Contains(bh); in || err != nil {
		t.Errorf("the bystander is in the job: %v, %v", in, err)
	}
	pids, err := job.PIDs()
	if err != nil {
		t.Fatal(err)
	}
	if len(pids) != 3 || !slices.Contains(pids, rh.PID) || !slices.Contains(pids, grandchild) {
		t.Errorf("job lists %v; want cmd.exe %d, the helper and its child %d", pids, rh.PID, grandchild)
	}
	if err := job.Close(); err != nil {
		t.Fatal(err)
	}
	for _, h := range []*Handle{rh, gh} {
		if done, err := h.Wait(10 * time.Second); !done || err != nil {
			t.Errorf("process %d still runs after its job closed: %v", h.PID, err)
		}
	}
	if done, _, _ := bh.Exited(); done {
		t.Error("the bystander outside the job exited")
	}
}

// A process's token gives its owner: the same user SID the handle reads,
// whether the Administrators group is enabled, and the integrity level.
// Under wine every process runs as one user, an enabled administrator;
// on Windows an unelevated test runs as a user of its own.
func TestTokenReadsTheUserAndItsElevation(t *testing.T) {
	child := start(t, testenv.Helper("sleep"))
	h, err := Open(uint32(child.Process.Pid), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	tok, err := h.Token()
	if err != nil {
		t.Fatal(err)
	}
	sid, err := h.UserSID()
	if err != nil || tok.SID != sid || !owners.ValidSID(tok.SID) {
		t.Errorf("Token = %+v, UserSID = %q (%v)", tok, sid, err)
	}
	self, err := windows.GetCurrentProcessToken().GetTokenUser()
	if err != nil || self.User.Sid.String() != tok.SID {
		t.Errorf("the child runs as %s, this test as %v (%v)", tok.SID, self, err)
	}
	mine, err := TokenOf(windows.GetCurrentProcessToken())
	level, lerr := integrity(windows.GetCurrentProcessToken())
	t.Logf("the child's token %+v, this process's %+v at integrity level %#x (%v, %v)", tok, mine, level, err, lerr)
	if err != nil || lerr != nil || mine != tok || tok.High && tok.Admin || tok.High != (!tok.Admin && level >= integrityHigh) {
		t.Errorf("the child's token %+v, this process's %+v at integrity %#x", tok, mine, level)
	}
}
