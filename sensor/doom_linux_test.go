package sensor_test

import (
	"errors"
	"io"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"github.com/mcptrace/mcptrace/internal/testenv"
	"github.com/mcptrace/mcptrace/lineage"
	"github.com/mcptrace/mcptrace/procfs"
	"github.com/mcptrace/mcptrace/sensor"
)

// startBlocked starts a shell script that waits for a line on stdin before
// running the rest, and returns its identity as /proc gives it (coarse
// start: doom compares at tick precision).
func startBlocked(t *testing.T, script string) (*exec.Cmd, io.WriteCloser, lineage.ID) {
	t.Helper()
	// The shell says it runs before it blocks: cmd.Start returns once the
	// exec passed its point of no return, before the exec tracepoint has
	// fired, and a process doomed that early is killed at its own exec.
	cmd := exec.Command("/bin/sh", "-c", "echo running; read go; "+script)
	in, out := testenv.StartPiped(t, cmd)
	if !out.Scan() || out.Text() != "running" {
		t.Fatalf("shell printed %q (%v), want running", out.Text(), out.Err())
	}
	snap, err := procfs.Read("/proc", uint32(cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	return cmd, in, snap.ID
}

func killedBySIGKILL(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	err := cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("wait: %v, want killed by SIGKILL", err)
	}
	ws := ee.Sys().(syscall.WaitStatus)
	if !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("process ended with %v, want killed by SIGKILL", ws)
	}
}

func TestDoomedProcessIsKilledWhenItExecs(t *testing.T) {
	s := openSensor(t, sensor.Options{})
	go drain(s)
	cmd, in, id := startBlocked(t, "exec sleep 100")
	if err := s.Doom(id); err != nil {
		t.Fatal(err)
	}
	before, _ := s.DoomKills()
	io.WriteString(in, "go\n")
	killedBySIGKILL(t, cmd)
	after, err := s.DoomKills()
	if err != nil {
		t.Fatal(err)
	}
	if after.Execs <= before.Execs {
		t.Errorf("doom kills at exec %d → %d, want counted", before.Execs, after.Execs)
	}
}

func TestDoomedProcessExecingASparedProgramLeavesDoomAlive(t *testing.T) {
	cases := []struct {
		name  string
		comms []string
		all   bool
	}{
		{"spared by name", []string{"sh"}, false},
		{"a rule the kernel cannot evaluate spares every exec", nil, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := openSensor(t, sensor.Options{})
			go drain(s)
			if err := s.SpareExecs(tc.comms, tc.all); err != nil {
				t.Fatal(err)
			}
			// The spared program forks once it runs: a process still
			// doomed would be killed there.
			cmd, in, id := startBlocked(t, `exec sh -c "sleep 0.2; exit 0"`)
			if err := s.Doom(id); err != nil {
				t.Fatal(err)
			}
			before, _ := s.DoomKills()
			io.WriteString(in, "go\n")
			if err := cmd.Wait(); err != nil {
				t.Fatalf("doomed process that exec'd a spared program: %v, want it to run and exit 0", err)
			}
			after, err := s.DoomKills()
			if err != nil {
				t.Fatal(err)
			}
			if after.SparedExecs <= before.SparedExecs || after.Execs != before.Execs {
				t.Errorf("doom counters %+v → %+v, want one spared exec and no kill", before, after)
			}
		})
	}
}

func TestDoomedProcessExecingAnUnsparedProgramIsStillKilled(t *testing.T) {
	s := openSensor(t, sensor.Options{})
	go drain(s)
	if err := s.SpareExecs([]string{"tail"}, false); err != nil {
		t.Fatal(err)
	}
	cmd, in, id := startBlocked(t, "exec sleep 100")
	if err := s.Doom(id); err != nil {
		t.Fatal(err)
	}
	io.WriteString(in, "go\n")
	killedBySIGKILL(t, cmd)
}

func TestDoomedProcessIsKilledWhenItForksAndChildInheritsDoom(t *testing.T) {
	s := openSensor(t, sensor.Options{})
	cmd, in, id := startBlocked(t, "sleep 100 & wait")
	pid := uint32(cmd.Process.Pid)
	if err := s.Doom(id); err != nil {
		t.Fatal(err)
	}
	io.WriteString(in, "go\n")
	// The shell dies at its fork; the child it forked dies too: before it
	// runs (6.13+) or when it execs sleep.
	var child uint32
	evs := collect(t, s,
		// Every exit is kept: the child's can come before this goroutine
		// learns the child's pid from its fork.
		func(ev lineage.Event) bool { return ev.Kind != lineage.KindFork || ev.Creator.PID == pid },
		func(ev lineage.Event) bool {
			if ev.Kind == lineage.KindFork && ev.Creator.PID == pid {
				child = ev.Proc.PID
			}
			return ev.Kind == lineage.KindExit && ev.Proc.PID == child && child != 0
		})
	killedBySIGKILL(t, cmd)
	for _, ev := range evs {
		if ev.Kind == lineage.KindExec && ev.Proc.PID != child {
			continue
		}
		if ev.Kind == lineage.KindExit && ev.Proc.PID == child && ev.Signal != int(syscall.SIGKILL) {
			t.Errorf("child exit %+v, want SIGKILL", ev)
		}
		if ev.Kind == lineage.KindExec && ev.Proc.PID == child {
			t.Logf("child got as far as exec %q before dying", strings.Join(ev.Argv, " "))
		}
	}
	k, _ := s.DoomKills()
	t.Logf("doom kills: %+v (children at fork: %v)", k, s.KillsChildrenAtFork())
	if k.Forkers == 0 {
		t.Error("the doomed forker was not counted")
	}
	if s.KillsChildrenAtFork() && k.Children == 0 {
		t.Error("kernel has bpf_send_signal_task but the child was not killed at fork")
	}
}

func TestUndoomLeavesARecycledPIDAlone(t *testing.T) {
	s := openSensor(t, sensor.Options{})
	go drain(s)
	cmd, in, id := startBlocked(t, "exec true")
	stale := lineage.ID{PID: id.PID, Start: id.Start + 5*doomTick}
	// Doom with another start time (an earlier process with the same pid):
	// the live process must not be taken for it.
	if err := s.Doom(stale); err != nil {
		t.Fatal(err)
	}
	io.WriteString(in, "go\n")
	if err := cmd.Wait(); err != nil {
		t.Fatalf("process with a recycled pid was killed: %v", err)
	}
	if err := s.Undoom(stale); err != nil {
		t.Fatal(err)
	}
}

const doomTick = 10_000_000

// drain reads and discards events so the ring buffer never fills.
func drain(s *sensor.Sensor) {
	for {
		if _, err := s.Read(); errors.Is(err, sensor.ErrClosed) {
			return
		}
	}
}

func TestMapUsageCountsTheDoomedProcesses(t *testing.T) {
	s := openSensor(t, sensor.Options{})
	go drain(s)
	doomed := func() sensor.MapUsage {
		t.Helper()
		us, err := s.MapUsage()
		if err != nil {
			t.Fatal(err)
		}
		for _, u := range us {
			if u.Name == "doomed" {
				return u
			}
		}
		t.Fatalf("no doomed map in %+v", us)
		return sensor.MapUsage{}
	}
	before := doomed()
	if before.Max != 65536 {
		t.Errorf("doomed holds %d entries at most, want 65536", before.Max)
	}
	cmd, in, id := startBlocked(t, "exec sleep 100")
	if err := s.Doom(id); err != nil {
		t.Fatal(err)
	}
	if got := doomed(); got.Entries != before.Entries+1 {
		t.Errorf("doomed entries %d → %d after dooming one process, want +1", before.Entries, got.Entries)
	}
	io.WriteString(in, "go\n")
	killedBySIGKILL(t, cmd)
}
