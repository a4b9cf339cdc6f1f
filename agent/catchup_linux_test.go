package agent_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mcptrace/mcptrace/agent"
	"github.com/mcptrace/mcptrace/enforcer"
	"github.com/mcptrace/mcptrace/internal/testenv"
	"github.com/mcptrace/mcptrace/sensor"
	"github.com/mcptrace/mcptrace/sessions"
)

// The agent's decisions must not depend on how far behind the kernel it
// is: these tests hold its consumer back (HoldEvents) while processes come
// and go.

// TestEnforcerWaitsForTheKernelsEventsBeforeCallingASessionEmpty: a member
// forks a child whose fork event is still unread when the session ends.
// The enforcer kills the members it knows, then waits for the graph to
// catch up with the kernel before it calls the session empty: the child
// is found and killed.
func TestEnforcerWaitsForTheKernelsEventsBeforeCallingASessionEmpty(t *testing.T) {
	a := startAgent(t, agent.Options{
		Enforcer: enforcer.Config{Mode: enforcer.ModeEnforce, Policy: enforcer.PolicyImmediate},
	})
	fifo := filepath.Join(t.TempDir(), "fork")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	// The member forks a child when told through the fifo, and writes its
	// pid next to it.
	h := startHost(t, "held", `sh -c 'echo member $$; read x < "$0"; sleep 300 & echo $! > "$0.child"; exec sleep 300' "`+fifo+`" </dev/null &
echo ready
exec sleep 300`, "member")
	member := h.procs["member"]
	waitFor(t, "the member in the session", func() (bool, string) {
		for _, p := range a.members("held") {
			if p.ID.PID == member.PID {
				return true, ""
			}
		}
		return false, fmt.Sprint(pids(a.members("held")))
	})

	release := a.HoldEvents()
	defer release()
	os.WriteFile(fifo, []byte("go\n"), 0)
	var child proc
	waitFor(t, "the member's child", func() (bool, string) {
		b, err := os.ReadFile(fifo + ".child")
		pid, perr := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 32)
		if err != nil || perr != nil {
			return false, fmt.Sprint(err, perr)
		}
		child = procOf(t, uint32(pid), "child")
		return true, ""
	})
	killLater(t, child.PID)
	// Root may end any session; the request needs no caller resolution,
	// so it is applied while the events are held.
	res, err := a.client.EndSession(context.Background(), "held", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("session end: %+v", res)
	time.Sleep(500 * time.Millisecond)
	if _, done := a.SessionReport("held", 0); done {
		t.Fatal("the enforcer called the session done while the kernel's events were held back")
	}
	release()
	waitDead(t, member, child)
	var rep enforcer.Report
	waitFor(t, "the enforcer's report", func() (bool, string) {
		var ok bool
		rep, ok = a.SessionReport("held", 0)
		return ok, ""
	})
	if !rep.Empty || rep.Survivors != 0 {
		t.Errorf("report: empty=%v survivors=%d", rep.Empty, rep.Survivors)
	}
	killed := false
	for _, r := range a.Enforcer().Records() {
		if r.Session == "held" && r.Process.PID == child.PID && r.Result == enforcer.ResultKilled {
			killed = true
		}
	}
	if !killed {
		t.Errorf("no kill record for the child forked before the session ended (pid %d)", child.PID)
	}
}

// TestFailedRepairIsRetriedUntilItSucceeds: the ring buffer overflows
// while the agent is held back and the exit of a session's root is among
// the lost events; the /proc repair that follows fails (the proc root is
// unreadable), and is retried until it succeeds, which ends the session.
func TestFailedRepairIsRetriedUntilItSucceeds(t *testing.T) {
	testenv.Root(t)
	dir := t.TempDir()
	procRoot := filepath.Join(dir, "proc")
	if err := os.Symlink("/proc", procRoot); err != nil {
		t.Fatal(err)
	}
	a := startAgent(t, agent.Options{
		ProcRoot:       procRoot,
		RingBufferSize: sensor.MinRingBufferSize,
		RepairInterval: 100 * time.Millisecond,
		Enforcer:       enforcer.Config{Mode: enforcer.ModeEnforce, Policy: enforcer.PolicyImmediate},
	})
	h := startHost(t, "repair", `sleep 300 </dev/null & echo member $!
echo ready
read x
exit 0`, "member")
	waitFor(t, "the session active", func() (bool, string) {
		s, ok := a.Sessions().Find("repair")
		return ok && s.State == sessions.Active && len(a.members("repair")) == 2, fmt.Sprint(pids(a.members("repair")))
	})
	status := func() api_status {
		st, err := a.client.Status(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return api_status{repairs: st.Repairs, pending: st.RepairPending, lost: st.Lost}
	}
	// The repair every agent runs once after start-up must be over before
	// /proc goes: a scan under way when the proc root is swapped lists the
	// real /proc and then cannot read a single process, which tells the
	// repair that every process exited.
	var before api_status
	waitFor(t, "the start-up repair done", func() (bool, string) {
		before = status()
		return before.repairs >= 1 && !before.pending, fmt.Sprintf("%+v", before)
	})

	// /proc cannot be read from before the loss: the lost-event check
	// reads the kernel's counters whether or not the consumer is held, and
	// notices the loss at once.
	os.Remove(procRoot)
	os.Symlink(filepath.Join(dir, "nowhere"), procRoot)
	release := a.HoldEvents()
	// Fill the ring, large exec records first, then the small fork and
	// exit records of subshells into what room is left; then end the
	// root: its exit is lost.
	if err := exec.Command("/bin/sh", "-c", `i=0; while [ $i -lt 200 ]; do /bin/true $i; i=$((i+1)); done; i=0; while [ $i -lt 300 ]; do ( : ); i=$((i+1)); done`).Run(); err != nil {
		t.Fatal(err)
	}
	h.say(t, "exit")
	h.cmd.Wait()
	release()
	var during api_status
	waitFor(t, "the loss noticed and its repair failing", func() (bool, string) {
		during = status()
		return during.pending && during.lost["exit"] > before.lost["exit"], fmt.Sprintf("%+v", during)
	})
	time.Sleep(500 * time.Millisecond) // several repair intervals
	if s, _ := a.Sessions().Find("repair"); s.State != sessions.Active || status().repairs != during.repairs {
		t.Fatalf("with /proc unreadable the session ended (%v, reason %q) or a repair counted (%d → %d); lost before %v, during %v",
			s.State, s.EndReason, during.repairs, status().repairs, before.lost, during.lost)
	}
	// /proc readable again: the pending repair runs and ends the session.
	os.Remove(procRoot)
	os.Symlink("/proc", procRoot)
	waitFor(t, "the repair retried and the session ended", func() (bool, string) {
		st := status()
		s, _ := a.Sessions().Find("repair")
		return !st.pending && st.repairs > during.repairs && s.State == sessions.Ended, fmt.Sprintf("%+v, session %v", st, s.State)
	})
	waitDead(t, h.procs["member"])
	s, _ := a.Sessions().Find("repair")
	t.Logf("lost %v; session ended: %s", status().lost, s.EndReason)
	if s.EndReason != sessions.ReasonRootGone {
		t.Errorf("end reason %q, want %q (the root's exit event was lost)", s.EndReason, sessions.ReasonRootGone)
	}
}

type api_status struct {
	repairs uint64
	pending bool
	lost    map[string]uint64
}
