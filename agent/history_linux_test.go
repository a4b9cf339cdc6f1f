package agent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mcptrace/mcptrace/api"
	"github.com/mcptrace/mcptrace/enforcer"
	"github.com/mcptrace/mcptrace/history"
	"github.com/mcptrace/mcptrace/internal/agenttest"
	"github.com/mcptrace/mcptrace/internal/testenv"
	"github.com/mcptrace/mcptrace/sessions"
)

// pastSession waits until the agent answers for session id from its
// history (it no longer holds it) and returns that answer.
func pastSession(t *testing.T, ag *agenttest.Process, id string) api.SessionDetail {
	t.Helper()
	var d api.SessionDetail
	testenv.Eventually(t, "session "+id+" answered from the history", func() (bool, string) {
		var err error
		d, err = ag.Client().Session(context.Background(), id, nil)
		if err != nil {
			return false, err.Error()
		}
		return !d.Recorded.IsZero(), fmt.Sprintf("answered from memory: %s %v", d.Session.State, d.Session.EndReason)
	})
	return d
}

// checkSessionA checks the history's answer for sessionA after its root
// was killed: every member, the dead wrapper among them, and a kill
// record for the daemon and the child.
func checkSessionA(t *testing.T, d api.SessionDetail, s *sessionA) {
	t.Helper()
	var procs []string
	seen := map[uint32]bool{}
	wrapper := false
	for _, p := range d.Processes {
		procs = append(procs, fmt.Sprintf("%d %s exited=%v", p.ID.PID, p.Comm, p.Exited))
		seen[p.ID.PID] = true
		if p.Comm == "sh" && p.Exited {
			wrapper = true
		}
	}
	for _, p := range s.all {
		if !seen[p.PID] {
			t.Errorf("the history's session lacks %s; it has %s", p, strings.Join(procs, "; "))
		}
	}
	if !wrapper {
		t.Errorf("the history's session lacks the exited sh wrapper: %s", strings.Join(procs, "; "))
	}
	killed := map[uint32]bool{}
	for _, k := range d.Kills {
		if k.Result == enforcer.ResultKilled {
			killed[k.Process.PID] = true
		}
	}
	if !killed[s.daemon.PID] || !killed[s.child.PID] {
		t.Errorf("kill records %+v lack the daemon %d or the child %d", d.Kills, s.daemon.PID, s.child.PID)
	}
	if d.Session.State != sessions.Ended || d.Session.Enforcement == nil {
		t.Errorf("the history's session: state %s, enforcement %+v", d.Session.State, d.Session.Enforcement)
	}
}

// TestHistoryAnswersForSessionsTheAgentForgotAndAcrossARestart: a
// session that ended and left the agent's memory (sessions.retention),
// and the same after a SIGKILL and restart of the agent, is shown by
// tree --session with its dead wrapper, its members and kill records;
// another user's session is neither listed nor shown to a user, and its
// secrets are nowhere on disk.
func TestHistoryAnswersForSessionsTheAgentForgotAndAcrossARestart(t *testing.T) {
	ag := agenttest.StartProcess(t, "--sessions.retention=1s", "--lineage.retention=1s")
	s := startSessionA(t, ag, "hist-a")

	// A session of nobody's with a secret on its command line.
	const nobody = 65534
	const secret = "s3cr3tHistoryValue42"
	env := fmt.Sprintf("MCPTRACE_HISTORY_TEST=%d", os.Getpid())
	theirs := exec.Command(ag.Bin, "run", "--session", "hist-n", "--", "sh", "-c", "sleep 1003 & exec sleep 1004", "sh", "--token", secret)
	theirs.Env = append(os.Environ(), env)
	theirs.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	if err := theirs.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, p := range agenttest.WithEnv(env) {
			p.Kill()
		}
		theirs.Process.Kill()
		theirs.Wait()
	})
	testenv.Eventually(t, "nobody's session with its two processes", func() (bool, string) {
		d, err := ag.Client().Session(context.Background(), "hist-n", ptr(uint32(nobody)))
		if err != nil {
			return false, err.Error()
		}
		return len(d.Processes) >= 2, fmt.Sprint(len(d.Processes), " members")
	})

	aliveAt := time.Now()
	time.Sleep(50 * time.Millisecond) // the session's members are seconds old by then: aliveAt is within their lives
	s.root.Kill()
	s.rootCmd.Wait()
	s.waitNoSurvivor(t, "session hist-a's members dead")
	theirs.Process.Kill()
	theirs.Wait()
	testenv.Eventually(t, "nobody's members dead", func() (bool, string) {
		left := agenttest.WithEnv(env)
		return len(left) == 0, fmt.Sprint(left)
	})

	d := pastSession(t, ag, "hist-a")
	checkSessionA(t, d, s)
	out, err := ag.CLI("tree", "--session", "hist-a")
	t.Logf("tree --session hist-a from the history:\n%s", out)
	if err != nil || !strings.Contains(out, "from the history") {
		t.Fatalf("tree --session from the history: %v\n%s", err, out)
	}

	// The daemon and its dead wrapper's place, as they were when alive.
	past, err := ag.Client().TreeAt(context.Background(), s.root.PID, aliveAt)
	if err != nil {
		t.Fatalf("tree %d --at: %v", s.root.PID, err)
	}
	var alive []uint32
	for _, p := range past.Processes {
		if !p.Exited {
			alive = append(alive, p.ID.PID)
		}
	}
	for _, p := range s.all {
		if !slices.Contains(alive, p.PID) {
			t.Errorf("tree %d --at %s: alive %v, lacks %s", s.root.PID, aliveAt.Format(time.RFC3339Nano), alive, p)
		}
	}
	if _, err := ag.Client().TreeAt(context.Background(), s.root.PID, aliveAt.Add(-time.Hour)); err == nil {
		t.Errorf("tree %d --at an hour before it was born answered", s.root.PID)
	}

	// The timeline of the past session: a row per member, a cross per kill.
	svg, err := ag.CLI("tree", "--session", "hist-a", "--format", "svg")
	if err != nil {
		t.Fatalf("tree --format svg: %v\n%s", err, svg)
	}
	if rows, kills := strings.Count(svg, `<g class="proc"`), strings.Count(svg, `<g class="kill"`); rows != len(d.Processes) || kills != 2 {
		t.Errorf("the timeline has %d rows and %d kills, want %d and 2", rows, kills, len(d.Processes))
	}

	ag.Stop(syscall.SIGKILL)
	ag.Start()
	d = pastSession(t, ag, "hist-a")
	checkSessionA(t, d, s)
	out, err = ag.CLI("history")
	t.Logf("history after a restart:\n%s", out)
	if err != nil || !strings.Contains(out, "hist-a") || !strings.Contains(out, "hist-n") {
		t.Fatalf("root's history lacks a session: %v\n%s", err, out)
	}

	// nobody sees its own session only, from the history too, redacted.
	code, out := cliAs(t, ag.Socket, nobody, "history", "--json")
	var list api.HistoryList
	if code != 0 || json.Unmarshal([]byte(out), &list) != nil {
		t.Fatalf("history as nobody: exit %d\n%s", code, out)
	}
	var ids []string
	for _, hs := range list.Sessions {
		ids = append(ids, hs.ID)
	}
	if !slices.Equal(ids, []string{"hist-n"}) {
		t.Errorf("nobody's history lists %v, want its own hist-n only", ids)
	}
	if code, out := cliAs(t, ag.Socket, nobody, "tree", "--session", "hist-a", "--owner", "0"); code == 0 || strings.Contains(out, "sleep") {
		t.Errorf("nobody was shown root's past session: exit %d\n%s", code, out)
	}
	code, out = cliAs(t, ag.Socket, nobody, "tree", "--session", "hist-n")
	if code != 0 || !strings.Contains(out, "sleep") || !strings.Contains(out, "recorded") {
		t.Errorf("nobody's own past session: exit %d\n%s", code, out)
	}
	if strings.Contains(out, secret) {
		t.Errorf("the history showed nobody its own secret unredacted:\n%s", out)
	}
	// The secret never reached the disk.
	b, err := os.ReadFile(filepath.Join(ag.HistoryDir, history.FileName))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), secret) {
		t.Errorf("the history's store holds the secret %q", secret)
	}
	if !strings.Contains(string(b), "sleep") {
		t.Errorf("the history's store holds no command line at all (%d bytes): the secret check proves nothing", len(b))
	}
}

func ptr[T any](v T) *T { return &v }

// cliAs runs the real CLI as uid against socket, as it is, and returns
// its exit code and output.
func cliAs(t *testing.T, socket string, uid int, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(testenv.Binary(t), append(args, "--api.socket", socket)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)}}
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), string(out)
	} else if err != nil {
		t.Fatalf("run mcptrace as uid %d: %v", uid, err)
	}
	return 0, string(out)
}
