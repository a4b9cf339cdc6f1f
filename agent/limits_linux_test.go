package agent_test

import (
	"bufio"
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
	"github.com/mcptrace/mcptrace/sessions"
)

// The two unprivileged uids of these tests: nobody, and one no account
// uses (the kernel needs no account to run a process as a uid).
const (
	nobodyUID = 65534
	tenantUID = 54321
)

// asUID starts argv as uid (its own process group, killed at the end of
// the test).
func asUID(t *testing.T, uid uint32, argv ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
	bin := testenv.Binary(t)
	cmd.Env = append(os.Environ(), "PATH="+filepath.Dir(bin)+":"+os.Getenv("PATH"))
	return cmd
}

// startAsUIDReadLine starts argv as uid (killed when keep ends: t or a
// test enclosing it) and returns it with the first line it printed.
func startAsUIDReadLine(t, keep *testing.T, uid uint32, argv ...string) (*exec.Cmd, string) {
	t.Helper()
	cmd := asUID(t, uid, argv...)
	out, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	keep.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line, _ := bufio.NewReader(out).ReadString('\n')
	return cmd, line
}

// A root-owned host that runs tools as per-tenant uids: a tenant's
// `mcptrace mark destroy` without --session, a child of the root, ends
// nothing — through the API or seen as an exec — while root's does.
func TestMarkerWithoutSessionFromAnotherUIDUnderARootHostIsRefused(t *testing.T) {
	// Root's marker is the host's child: it belongs to the generation it
	// ends, and the enforcer kills it last, once the grace is over, if it
	// has not exited by then (Ending.Last). The grace is the default's
	// (2 s), scaled as every wait in a guest: with enforcingAgent's
	// 500 ms the marker (a Go program that starts, asks the agent and
	// prints) was killed before it exited in 5.10 and 6.1 guests of a
	// busy host (exit 137). Nothing here ignores SIGTERM, so the longer
	// grace costs no time.
	a := startAgent(t, agent.Options{
		Sessions: sessions.Config{},
		Enforcer: enforcer.Config{Mode: enforcer.ModeEnforce, Policy: enforcer.PolicyGraceful, Grace: testenv.Bound(enforcer.DefaultGrace)},
	})
	dir := t.TempDir()
	os.Chmod(dir, 0o777)
	h := startHost(t, "gw", fmt.Sprintf(`sleep 300 </dev/null & echo server $!
setpriv --reuid=%[1]d --regid=%[1]d --clear-groups sleep 300 </dev/null & echo tenant $!
echo ready
while read uid sock n; do
  setpriv --reuid=$uid --regid=$uid --clear-groups mcptrace mark destroy --api.socket "$sock" </dev/null >%[2]s/out.$n 2>&1
  echo $? >%[2]s/rc.$n
done`, tenantUID, dir), "server", "tenant")
	n := 0
	mark := func(t *testing.T, uid int, socket string) (int, string) {
		t.Helper()
		n++
		h.say(t, fmt.Sprintf("%d %s %d", uid, socket, n))
		var rc int
		waitFor(t, "the marker's exit", func() (bool, string) {
			b, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("rc.%d", n)))
			if err != nil || !strings.HasSuffix(string(b), "\n") {
				return false, ""
			}
			_, err = fmt.Sscan(string(b), &rc)
			return err == nil, ""
		})
		out, _ := os.ReadFile(filepath.Join(dir, fmt.Sprintf("out.%d", n)))
		return rc, string(out)
	}
	for _, uid := range []int{nobodyUID, tenantUID} {
		for _, tc := range []struct {
			name   string
			socket string
		}{
			{"through the API", a.socket},
			{"by exec only", "/nonexistent/mcptrace.sock"},
		} {
			t.Run(fmt.Sprintf("uid %d %s", uid, tc.name), func(t *testing.T) {
				before := a.Sessions().Stats().MarkersRefused
				rc, out := mark(t, uid, tc.socket)
				if tc.socket == a.socket && (rc == 0 || !strings.Contains(out, "refused")) {
					t.Errorf("marker of uid %d: exit %d: %s; want refused", uid, rc, out)
				}
				if strings.Contains(out, "gw") {
					t.Errorf("the refusal names the session it refused: %s", out)
				}
				waitFor(t, "refusal counted", func() (bool, string) {
					return a.Sessions().Stats().MarkersRefused > before, ""
				})
				time.Sleep(300 * time.Millisecond) // a wrong kill would be done by now
				mustAlive(t, h.procs["host"], h.procs["server"], h.procs["tenant"])
				if s, _ := a.Sessions().Find("gw"); s.State != sessions.Active || s.Generation != 1 {
					t.Errorf("session after a tenant's marker: %+v", s)
				}
			})
		}
	}
	t.Run("root's marker ends the generation", func(t *testing.T) {
		if rc, out := mark(t, 0, a.socket); rc != 0 {
			t.Fatalf("root's marker: exit %d: %s", rc, out)
		}
		waitDead(t, h.procs["server"], h.procs["tenant"])
		mustAlive(t, h.procs["host"])
	})
}

// Tags are scoped by owner, and `mcptrace run` reports a refused
// declaration instead of running the command.
func TestRunReportsARefusedDeclarationBeforeItExecs(t *testing.T) {
	a := startAgent(t, agent.Options{
		Sessions: sessions.Config{MaxActivePerUID: 2},
		Enforcer: enforcer.Config{Mode: enforcer.ModeEnforce, Policy: enforcer.PolicyGraceful, Grace: 500 * time.Millisecond},
	})
	bin := testenv.Binary(t)
	start := func(t *testing.T, uid uint32, args ...string) *exec.Cmd {
		t.Helper()
		cmd := asUID(t, uid, append([]string{bin, "run"}, args...)...)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		return cmd
	}
	owned := func(uid uint32, tag string) (sessions.Session, bool) {
		for _, s := range a.Sessions().Sessions() {
			if s.Owner == uid && s.Tag == tag && s.State == sessions.Active {
				return s, true
			}
		}
		return sessions.Session{}, false
	}
	// nobody declares "work" first, in a sandbox without the socket.
	start(t, nobodyUID, "--session", "work", "--", "sleep", "300")
	waitFor(t, "nobody's work session", func() (bool, string) {
		_, ok := owned(nobodyUID, "work")
		return ok, fmt.Sprint(a.Sessions().Sessions())
	})
	outer := t // what the subtests start runs on, within the cap
	t.Run("another user's tag does not refuse yours", func(t *testing.T) {
		cmd, line := startAsUIDReadLine(t, outer, tenantUID, bin, "run", "--session", "work", "--api.socket", a.socket, "--", "sh", "-c", "echo ran; exec sleep 300")
		if line != "ran\n" {
			t.Fatalf("run printed %q, want ran", line)
		}
		s, ok := owned(tenantUID, "work")
		if !ok || s.Root.PID != uint32(cmd.Process.Pid) {
			t.Errorf("uid %d's work session: %+v, %v", tenantUID, s, ok)
		}
	})
	start(t, tenantUID, "--session", "second", "--api.socket", a.socket, "--", "sleep", "300")
	waitFor(t, "the tenant's second session", func() (bool, string) {
		_, ok := owned(tenantUID, "second")
		return ok, ""
	})
	t.Run("over the cap, run fails and says why", func(t *testing.T) {
		before := a.Status().Sessions.RefusedOverCap
		out, err := asUID(t, tenantUID, bin, "run", "--session", "third", "--api.socket", a.socket, "--", "sh", "-c", "echo ran").CombinedOutput()
		if err == nil || strings.Contains(string(out), "ran\n") {
			t.Fatalf("run over the cap: %v: %s; want it to fail before running the command", err, out)
		}
		for _, want := range []string{"too many active sessions", "sessions.max-active-per-uid"} {
			if !strings.Contains(string(out), want) {
				t.Errorf("run over the cap says %q, want it to mention %q", out, want)
			}
		}
		if st := a.Status().Sessions; st.RefusedOverCap != before+1 {
			t.Errorf("refusals over the cap %d, want %d", st.RefusedOverCap, before+1)
		}
		if _, ok := owned(tenantUID, "third"); ok {
			t.Error("a third session began")
		}
	})
}

// Any user looping `mcptrace run -- true` past the node's cap of ended
// sessions (and of kept reports) no longer evicts another user's session
// nor its enforcer report. The caps are made small (20 ended sessions on
// the node, 5 per uid) so that the loop crosses both in 21 runs instead
// of the defaults' 1,001 (minutes in an emulated guest); the defaults
// take the same code path.
func TestOneUIDsChurnKeepsAnotherUIDsEndedSessions(t *testing.T) {
	const maxEnded, maxEndedPerUID = 20, 5
	a := startAgent(t, agent.Options{
		Sessions: sessions.Config{MaxEnded: maxEnded, MaxEndedPerUID: maxEndedPerUID},
		Enforcer: enforcer.Config{Mode: enforcer.ModeEnforce, Policy: enforcer.PolicyGraceful, Grace: 500 * time.Millisecond},
	})
	bin := testenv.Binary(t)
	keep := asUID(t, tenantUID, bin, "run", "--session", "keep", "--", "sh", "-c", "sleep 300 </dev/null &")
	if out, err := keep.CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	waitFor(t, "keep ended and enforced", func() (bool, string) {
		s, _ := a.Sessions().Find("keep")
		rep, done := a.SessionReport("keep", 0)
		return s.State == sessions.Ended && done && rep.Killed == 1, fmt.Sprintf("%+v %+v", s, rep)
	})
	const churn = maxEnded + 1
	loop := asUID(t, nobodyUID, "/bin/sh", "-c", fmt.Sprintf(`i=0; while [ $i -lt %d ]; do mcptrace run -- true || exit 1; i=$((i+1)); done`, churn))
	if out, err := loop.CombinedOutput(); err != nil {
		t.Fatalf("churn: %v: %s", err, out)
	}
	waitFor(t, "the churn ended and enforced", func() (bool, string) {
		st := a.Sessions().Stats()
		return st.Ended[sessions.OriginRun] >= churn+1 && a.Enforcer().Stats().Sessions >= churn+1 && a.Status().PendingEndings == 0,
			fmt.Sprintf("%+v", st)
	})
	s, ok := a.Sessions().Find("keep")
	if !ok || s.State != sessions.Ended {
		t.Fatalf("uid %d's ended session was evicted by uid %d's churn", tenantUID, nobodyUID)
	}
	if _, ok := a.SessionReport("keep", 0); !ok {
		t.Error("its report is gone")
	}
	if st := a.Status().Sessions; st.DroppedOverQuota == 0 || st.Retained > maxEndedPerUID+1 {
		t.Errorf("stats %+v", st)
	}
}

// Two users' sessions of one ID: both are `work` (IDs are scoped by
// owner, so neither becomes work.2), each user's `mcptrace session end
// work` ends its own members only, and root, naming `work` without an
// owner, is told whose they are and ends the one it names with --owner.
func TestTwoUsersSessionsOfOneIDEndApart(t *testing.T) {
	a := enforcingAgent(t, enforcer.ModeEnforce)
	bin := testenv.Binary(t)
	members := map[uint32]proc{}
	for _, uid := range []uint32{nobodyUID, tenantUID} {
		_, line := startAsUIDReadLine(t, t, uid, bin, "run", "--session", "work", "--api.socket", a.socket, "--", "sh", "-c", "sleep 300 </dev/null & echo $!; exec sleep 300")
		pid, err := strconv.ParseUint(strings.TrimSpace(line), 10, 32)
		if err != nil {
			t.Fatalf("uid %d's member pid %q: %v", uid, line, err)
		}
		members[uid] = procOf(t, uint32(pid), fmt.Sprintf("uid %d's sleep", uid))
	}
	for uid, m := range members {
		waitFor(t, fmt.Sprintf("uid %d's work holds its sleep", uid), func() (bool, string) {
			s, ok := a.Sessions().Get(sessions.Ref{Owner: uid, ID: "work"})
			if !ok || s.State != sessions.Active {
				return false, fmt.Sprint(a.Sessions().Sessions())
			}
			for _, p := range a.Sessions().Members(s.Ref()) {
				if p.ID.PID == m.PID {
					return true, ""
				}
			}
			return false, fmt.Sprint(pids(a.Sessions().Members(s.Ref())))
		})
	}
	out, err := exec.Command(bin, "session", "end", "work", "--api.socket", a.socket).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "uids 54321, 65534") || !strings.Contains(string(out), "--owner") {
		t.Fatalf("root's session end work: %v: %s; want it refused, naming both uids and --owner", err, out)
	}
	mustAlive(t, members[nobodyUID], members[tenantUID])
	if out, err := asUID(t, nobodyUID, bin, "session", "end", "work", "--api.socket", a.socket).CombinedOutput(); err != nil {
		t.Fatalf("nobody's session end work: %v: %s", err, out)
	}
	waitDead(t, members[nobodyUID])
	mustAlive(t, members[tenantUID])
	if out, err := exec.Command(bin, "session", "end", "work", "--owner", strconv.Itoa(tenantUID), "--api.socket", a.socket).CombinedOutput(); err != nil {
		t.Fatalf("root's session end work --owner %d: %v: %s", tenantUID, err, out)
	}
	waitDead(t, members[tenantUID])
}
