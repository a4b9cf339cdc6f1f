package enforcer

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mcptrace/mcptrace/internal/testenv"
	"github.com/mcptrace/mcptrace/procfs"
)

// leaderExits is the test binary as a process whose thread-group leader
// exits on its own (test helper "leader-exits": a raw exit(2) of the main
// thread, not exit_group) while its other threads keep running: /proc
// shows the leader as a zombie ('Z'), yet the process lives on, and the
// kernel reports no process exit until the last thread leaves.
func leaderExits() {
	if unix.Gettid() != unix.Getpid() {
		fmt.Fprintln(os.Stderr, "leader-exits: the helper does not run on the thread-group leader")
		os.Exit(3)
	}
	go func() {
		for {
			time.Sleep(time.Hour)
		}
	}()
	runtime.LockOSThread()
	unix.RawSyscall(unix.SYS_EXIT, 0, 0, 0)
}

// init keeps the main goroutine on the main thread (the thread-group
// leader) in a process started as the leader-exits helper: only a lock
// taken during init does (runtime.LockOSThread); without it, main may run
// on another thread, and the helper's exit(2) would end that thread and
// leave the leader running (seen once in a loaded 6.12 guest).
func init() {
	if os.Getenv(testenv.HelperVar) == "leader-exits" {
		runtime.LockOSThread()
	}
}

// TestZombieLeaderWithLiveThreadsIsKilled: the enforcer read any 'Z' as
// "exited before signal" and left such a process running; procfs counts
// it alive (its other threads run), and so does the enforcer now that it
// reads processes through procfs. Signalling the pidfd ends every thread.
func TestZombieLeaderWithLiveThreadsIsKilled(t *testing.T) {
	r := newRig(t)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = testenv.HelperEnv("leader-exits")
	m := r.startCmd(cmd)
	deadline := time.Now().Add(5 * time.Second)
	for {
		st, err := procfs.ReadStat("", m.id.PID)
		if err != nil {
			t.Fatalf("helper: %v", err)
		}
		if st.State == 'Z' {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the helper's leader never exited (state %c)", st.State)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := procfs.Read("", m.id.PID); err != nil {
		t.Fatalf("procfs reads the helper as gone, want alive (its threads run): %v", err)
	}
	if !m.alive() {
		t.Fatal("the helper's pidfd says it exited")
	}

	// The graph's view: no exit was reported for the process.
	p := liveProcess(t, int(m.id.PID))
	p.Exited = false
	e := New(Config{Policy: PolicyImmediate}, nil, testLogger(t))
	rep := e.End(t.Context(), Ending{Session: "s1", EndedAt: procfs.BootTimeNow(), Reason: "destroy", Members: static(p)})
	rec := recordOf(t, rep, m.id)
	if rec.Result != ResultKilled || rec.Signal != "SIGKILL" {
		t.Errorf("record %+v, want killed by SIGKILL", rec)
	}
	if !m.waitDead(5 * time.Second) {
		t.Fatal("the process with a zombie leader survived")
	}
	if rep.Survivors != 0 {
		t.Errorf("report: %+v", rep)
	}
}
