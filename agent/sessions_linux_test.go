package agent_test

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mcptrace/mcptrace/agent"
	"github.com/mcptrace/mcptrace/enforcer"
	"github.com/mcptrace/mcptrace/internal/agenttest"
	"github.com/mcptrace/mcptrace/internal/testenv"
	"github.com/mcptrace/mcptrace/lineage"
	"github.com/mcptrace/mcptrace/procfs"
	"github.com/mcptrace/mcptrace/sessions"
)

// The agents of these tests match no host on the machine: sessions come
// only from the test's own `mcptrace run` / `exec` tags.
func enforcingAgent(t *testing.T, mode enforcer.Mode) *testAgent {
	return startAgent(t, agent.Options{
		Sessions: sessions.Config{}, // no rules
		Enforcer: enforcer.Config{Mode: mode, Policy: enforcer.PolicyGraceful, Grace: 500 * time.Millisecond},
	})
}

// proc is a process a test started or was told about, with its identity.
// proc is a process of a test, by identity, with the name the test
// gives it in failures.
type proc struct {
	agenttest.Proc
	what string
}

func procOf(t *testing.T, pid uint32, what string) proc {
	t.Helper()
	return proc{agenttest.ProcOf(t, pid, what), what}
}

func (p proc) alive() bool { return p.Alive() }

func (p proc) kill() { p.Kill() } // only ever the test's own processes, checked by identity

// host runs script as `mcptrace run --session ID -- sh -c script`; the
// script reports "name pid" lines, then "ready", then reads commands from
// stdin.
type host struct {
	cmd   *exec.Cmd
	in    io.WriteCloser
	out   *bufio.Scanner
	procs map[string]proc
}

func startHost(t *testing.T, session, script string, want ...string) *host {
	t.Helper()
	h := launchHost(t, false, session, script)
	h.waitReady(t, want...)
	return h
}

// gatedHost is startHost with a gate: a shell that waits for a line on
// stdin (h.say) before it execs into `mcptrace run`, so that its pid is
// known before the tag is exec'd. Call waitReady after opening the gate.
func gatedHost(t *testing.T, session, script string) *host {
	t.Helper()
	return launchHost(t, true, session, script)
}

func launchHost(t *testing.T, gated bool, session, script string) *host {
	t.Helper()
	bin := testenv.Binary(t)
	argv := []string{bin, "run", "--session", session, "--", "/bin/sh", "-c", script}
	if gated {
		argv = append([]string{"/bin/sh", "-c", `read gate; exec "$0" "$@"`}, argv...)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), "MCPTRACE_BIN_DIR="+filepath.Dir(bin), "PATH="+filepath.Dir(bin)+":"+os.Getenv("PATH"))
	in, out := testenv.StartPiped(t, cmd)
	h := &host{cmd: cmd, in: in, out: out, procs: map[string]proc{}}
	h.procs["host"] = procOf(t, uint32(cmd.Process.Pid), "host")
	t.Cleanup(func() {
		for _, p := range h.procs {
			p.kill()
		}
	})
	return h
}

// waitReady reads the host's "name pid" lines until it has printed every
// name in want and "ready".
func (h *host) waitReady(t *testing.T, want ...string) {
	t.Helper()
	ready := false
	complete := func() bool {
		for _, w := range want {
			if _, ok := h.procs[w]; !ok {
				return false
			}
		}
		return ready
	}
	for h.out.Scan() {
		line := strings.TrimSpace(h.out.Text())
		if line == "ready" {
			ready = true
		} else {
			name, pidText, ok := strings.Cut(line, " ")
			pid, err := strconv.ParseUint(pidText, 10, 32)
			if !ok || err != nil {
				t.Fatalf(`host printed %q, want "name pid" or "ready"`, line)
			}
			// A member may be gone already (it exits at once): keep its pid.
			p := proc{Proc: agenttest.Proc{PID: uint32(pid)}, what: name}
			if snap, err := procfs.Read("/proc", p.PID); err == nil {
				p.Tick = snap.ID.Tick()
			}
			h.procs[name] = p
		}
		if complete() {
			// Later lines (none expected) must not block the host.
			go io.Copy(io.Discard, stdoutRest(h.out))
			return
		}
	}
	t.Fatalf("host ended before ready: %v", h.out.Err())
}

// stdoutRest drains what the scanner has not read.
func stdoutRest(sc *bufio.Scanner) io.Reader {
	pr, pw := io.Pipe()
	go func() {
		for sc.Scan() {
		}
		pw.Close()
	}()
	return pr
}

func (h *host) say(t *testing.T, line string) {
	t.Helper()
	if _, err := io.WriteString(h.in, line+"\n"); err != nil {
		t.Fatal(err)
	}
}

func waitDead(t *testing.T, ps ...proc) {
	t.Helper()
	waitFor(t, "processes to die", func() (bool, string) {
		var alive []string
		for _, p := range ps {
			if p.alive() {
				alive = append(alive, fmt.Sprintf("%s(%d)", p.what, p.PID))
			}
		}
		return len(alive) == 0, "alive: " + strings.Join(alive, " ")
	})
}

func mustAlive(t *testing.T, ps ...proc) {
	t.Helper()
	for _, p := range ps {
		if !p.alive() {
			t.Errorf("%s (%d) was killed, but it is outside the ended session", p.what, p.PID)
		}
	}
}

// bystander is an unrelated process started beside the session.
func bystander(t *testing.T) proc {
	t.Helper()
	cmd := exec.Command("/bin/sleep", "300")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return procOf(t, uint32(cmd.Process.Pid), "bystander")
}

// escapees spawns the ways a member tries to outlive its session.
func escapees(t *testing.T) string {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return `
setsid sh -c 'sleep 300 & echo daemon $!' </dev/null
MCPTRACE_TEST_HELPER=own-pgroup ` + self + ` -test.run=^$ </dev/null >/dev/null & echo pgroup $!
nohup sleep 300 </dev/null >/dev/null 2>&1 & echo nohup $!
sh -c 'trap "" TERM; echo ignores-term $$; exec sleep 300' </dev/null &
sh -c 'sh -c "sleep 300 </dev/null & echo grandchild \$!"'
echo ready
`
}

func TestRootExitEndsEveryDescendant(t *testing.T) {
	a := enforcingAgent(t, enforcer.ModeEnforce)
	for _, tc := range []struct {
		name string
		end  func(t *testing.T, h *host)
	}{
		{"root exits", func(t *testing.T, h *host) { h.say(t, "exit") }},
		{"root killed", func(t *testing.T, h *host) { h.cmd.Process.Signal(syscall.SIGKILL) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			other := bystander(t)
			session := "t-" + strings.ReplaceAll(tc.name, " ", "-")
			// ignores-term reports itself once its trap is set.
			h := startHost(t, session, escapees(t)+"read line; exit 0", "ignores-term")
			var members []proc
			for name, p := range h.procs {
				if name != "host" {
					members = append(members, p)
				}
			}
			waitFor(t, "session active", func() (bool, string) {
				s, ok := a.Sessions().Find(session)
				return ok && s.State == sessions.Active, fmt.Sprintf("%+v", s)
			})
			// The SIGTERM-ignorer says so before it execs sleep: wait for
			// the exec, or a doom set before it kills it at the exec.
			waitFor(t, "the SIGTERM-ignoring member running sleep", func() (bool, string) {
				snap, err := procfs.Read("/proc", h.procs["ignores-term"].PID)
				return err == nil && len(snap.Argv) > 0 && snap.Argv[0] == "sleep", fmt.Sprint(snap.Argv, err)
			})
			tc.end(t, h)
			h.cmd.Wait()
			waitDead(t, members...)
			mustAlive(t, other)

			var sig string
			waitFor(t, "kill record of the SIGTERM-ignoring member", func() (bool, string) {
				for _, r := range a.Enforcer().Records() {
					if r.Session == session && r.Process.PID == h.procs["ignores-term"].PID && r.Result == enforcer.ResultKilled {
						sig = r.Signal
						return true, ""
					}
				}
				return false, ""
			})
			if sig != "SIGTERM+SIGKILL" {
				t.Errorf("the SIGTERM-ignoring member died by %q, want SIGTERM+SIGKILL after the grace", sig)
			}
		})
	}
}

// tagged is a host with three sub-sessions a, b, c, each a server that
// started a child of its own; on "mark X" it runs an exec marker for X
// against a socket it cannot reach (a sandbox).
func tagged(t *testing.T, session string) *host {
	srv := func(id string) string {
		return fmt.Sprintf(`mcptrace exec --session %[1]s -- sh -c 'sleep 300 </dev/null & echo %[1]s-child $!; exec sleep 300' </dev/null & echo %[1]s $!
`, id)
	}
	var want []string
	for _, x := range []string{"-a", "-b", "-c"} {
		want = append(want, session+x, session+x+"-child")
	}
	return startHost(t, session, srv(session+"-a")+srv(session+"-b")+srv(session+"-c")+`echo ready
while read cmd id; do
  if [ "$cmd" = mark ]; then mcptrace mark destroy --session "$id" --api.socket /nonexistent/mcptrace.sock </dev/null >/dev/null 2>&1; fi
done`, want...)
}

func TestDestroyMarkerEndsOnlyTheNamedSubSession(t *testing.T) {
	a := enforcingAgent(t, enforcer.ModeEnforce)
	for _, tc := range []struct {
		name string
		mark func(t *testing.T, h *host, id string)
	}{
		{"through the API", func(t *testing.T, h *host, id string) {
			out, err := exec.Command(testenv.Binary(t), "mark", "destroy", "--session", id, "--api.socket", a.socket).CombinedOutput()
			if err != nil || !strings.Contains(string(out), "session "+id+" ended") {
				t.Fatalf("mark destroy: %v: %s", err, out)
			}
		}},
		{"by exec only, socket unreachable", func(t *testing.T, h *host, id string) {
			h.say(t, "mark "+id)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			session := "h" + strconv.Itoa(len(tc.name))
			h := tagged(t, session)
			id := func(x string) string { return session + "-" + x }
			waitFor(t, "three sub-sessions", func() (bool, string) {
				n := 0
				for _, x := range []string{"a", "b", "c"} {
					if s, ok := a.Sessions().Find(id(x)); ok && s.State == sessions.Active && s.Parent == session {
						n++
					}
				}
				detail := fmt.Sprintf("%v\nagent %+v\ntracker %+v", a.Sessions().Sessions(), a.Status(), a.Sessions().Stats())
				for _, x := range []string{"a", "b", "c"} {
					if s, ok := a.Sessions().Find(id(x)); !ok || s.State != sessions.Active {
						for _, p := range a.Graph().Processes() {
							if p.ID.PID == h.procs[id(x)].PID {
								detail += fmt.Sprintf("\nserver %s node: %v creator %v exited %v gaps %v", x, p.ID, p.Creator, p.Exited, p.Gaps)
								for _, im := range p.Images {
									detail += fmt.Sprintf("\n   image %d %s %q trunc=%v", im.Time, im.Source, im.Argv[:min(len(im.Argv), 4)], im.ArgvTruncated)
								}
							}
						}
					}
				}
				return n == 3, detail
			})
			tc.mark(t, h, id("b"))
			waitDead(t, h.procs[id("b")], h.procs[id("b")+"-child"])
			time.Sleep(300 * time.Millisecond) // anything wrongly killed would be dead by now
			mustAlive(t, h.procs["host"], h.procs[id("a")], h.procs[id("a")+"-child"], h.procs[id("c")], h.procs[id("c")+"-child"])
			for _, x := range []string{"a", "c"} {
				if s, _ := a.Sessions().Find(id(x)); s.State != sessions.Active {
					t.Errorf("sibling %s ended: %+v", x, s)
				}
			}
			if s, _ := a.Sessions().Find(session); s.State != sessions.Active {
				t.Errorf("host session ended: %+v", s)
			}
		})
	}
}

func TestForkingMemberLeavesNoSurvivor(t *testing.T) {
	a := enforcingAgent(t, enforcer.ModeEnforce)
	trials := testenv.Sized(20, 6)
	killed := 0
	for i := 0; i < trials; i++ {
		session := fmt.Sprintf("fork-%d", i)
		marker := fmt.Sprintf("MCPTRACE_FORK_TRIAL=%d-%d", os.Getpid(), i)
		h := startHost(t, session, marker+` sh -c 'while :; do sleep 100 </dev/null & done' </dev/null >/dev/null 2>&1 &
echo ready; read line`)
		time.Sleep(100 * time.Millisecond) // let the loop build up
		h.cmd.Process.Signal(syscall.SIGKILL)
		h.cmd.Wait()
		var rep enforcer.Report
		waitFor(t, "enforcer report for "+session, func() (bool, string) {
			var ok bool
			rep, ok = a.SessionReport(session, 0)
			return ok, ""
		})
		if !rep.Empty || rep.Survivors != 0 {
			t.Fatalf("trial %d: enforcer reports empty=%v survivors=%d", i, rep.Empty, rep.Survivors)
		}
		// Checked apart from the graph and the enforcer: no process of the
		// trial is alive, now or a moment later. (The /proc scan is taken
		// twice: pids wrap around during a fork storm and a scan can miss
		// a process created behind it.)
		for _, wait := range []time.Duration{0, 50 * time.Millisecond} {
			time.Sleep(wait)
			if left := agenttest.WithEnv(marker); len(left) != 0 {
				t.Fatalf("trial %d: %d survivors after the enforcer reported the session empty: %v", i, len(left), left)
			}
		}
		killed += rep.Killed
	}
	if st := a.Status().Enforcer; st.Killed < uint64(killed) || st.Endings < uint64(trials) || st.Survivors != 0 {
		t.Errorf("status enforcer counters %+v, want at least %d endings and %d killed, no survivor", st, trials, killed)
	}
	t.Logf("%d trials, 0 survivors, %d processes killed", trials, killed)
}

func TestRecycledPIDOfAMemberIsNotKilled(t *testing.T) {
	a := enforcingAgent(t, enforcer.ModeEnforce)
	h := startHost(t, "reuse", `sh -c 'echo member $$' </dev/null; echo ready; read line`)
	member := h.procs["member"]
	waitFor(t, "member exited", func() (bool, string) {
		p, ok := a.Graph().Lookup(member.PID)
		return ok && p.Exited, ""
	})
	unrelated := forkAt(t, member.PID, "/bin/sleep", "300")
	u := procOf(t, uint32(unrelated.Process.Pid), "unrelated")
	h.say(t, "exit")
	h.cmd.Wait()
	waitFor(t, "session ended and enforced", func() (bool, string) {
		s, _ := a.Sessions().Find("reuse")
		_, done := a.SessionReport("reuse", 0)
		return s.State == sessions.Ended && done, fmt.Sprintf("%+v", s)
	})
	time.Sleep(300 * time.Millisecond)
	mustAlive(t, u)
	for _, r := range a.Enforcer().Records() {
		if r.Process.PID == u.PID && r.Result == enforcer.ResultKilled {
			t.Errorf("the recycled pid's new process was killed: %+v", r)
		}
	}
}

// Another user's marker naming a session ends nothing: session IDs are
// scoped by owner, so it names nothing of its own, is counted unmatched,
// and the CLI says there is no such session (as for an ID nobody has).
func TestUnauthorizedMarkerIsRefused(t *testing.T) {
	a := enforcingAgent(t, enforcer.ModeEnforce)
	bin := testenv.Binary(t)
	h := startHost(t, "guarded", `sleep 300 </dev/null & echo server $!; echo ready; read line`)
	for _, tc := range []struct {
		name   string
		socket string
	}{
		{"through the API", a.socket},
		{"by exec", "/nonexistent/mcptrace.sock"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := a.Sessions().Stats().MarkersUnmatched
			cmd := exec.Command(bin, "mark", "destroy", "--session", "guarded", "--api.socket", tc.socket)
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
			out, err := cmd.CombinedOutput()
			if tc.socket == a.socket && (err == nil || !strings.Contains(string(out), `no session "guarded"`)) {
				t.Errorf("marker from uid 65534: %v: %s, want no such session", err, out)
			}
			waitFor(t, "the marker counted as matching nothing", func() (bool, string) {
				return a.Sessions().Stats().MarkersUnmatched > before, ""
			})
			time.Sleep(200 * time.Millisecond)
			mustAlive(t, h.procs["host"], h.procs["server"])
			if s, _ := a.Sessions().Find("guarded"); s.State != sessions.Active {
				t.Errorf("session ended by an unauthorized marker: %+v", s)
			}
		})
	}
}

func TestAuditModeKillsNothingAndListsWhatItWould(t *testing.T) {
	a := enforcingAgent(t, enforcer.ModeAudit)
	h := startHost(t, "audited", escapees(t)+"read line; exit 0", "ignores-term")
	var want []uint32
	var members []proc
	for name, p := range h.procs {
		if name != "host" {
			want = append(want, p.PID)
			members = append(members, p)
		}
	}
	h.say(t, "exit")
	h.cmd.Wait()
	var got []uint32
	waitFor(t, "audit report", func() (bool, string) {
		_, done := a.SessionReport("audited", 0)
		return done, ""
	})
	for _, r := range a.Enforcer().Records() {
		if r.Session == "audited" && r.Result == enforcer.ResultWouldKill {
			got = append(got, r.Process.PID)
		}
	}
	slices.Sort(got)
	slices.Sort(want)
	// The escapee shells that exec'd or exited are not members any more;
	// every live member must be listed, and nothing else.
	var live []uint32
	for _, p := range members {
		if p.alive() {
			live = append(live, p.PID)
		}
	}
	slices.Sort(live)
	if !slices.Equal(got, live) {
		t.Errorf("would-kill %v, want exactly the live members %v", got, live)
	}
	if len(live) != len(members) {
		t.Errorf("audit mode killed something: %d of %d members alive", len(live), len(members))
	}
}

func TestAgentNarrowedToASubtreeLeavesEverythingElseAlone(t *testing.T) {
	// The scope is a session host started before the agent; a second host
	// beside it, outside the scope, stands for another test package's
	// processes (or anything else on the node).
	inside := gatedHost(t, "inside", `sleep 300 </dev/null & echo member $!; echo ready
read line; mcptrace exec --session sub -- sleep 300 </dev/null &
read line; exit 0`)
	a := startAgent(t, agent.Options{
		Sessions: sessions.Config{WithinPID: inside.procs["host"].PID},
		Enforcer: enforcer.Config{Mode: enforcer.ModeEnforce, Policy: enforcer.PolicyImmediate},
	})
	inside.say(t, "go")
	inside.waitReady(t, "member")
	waitFor(t, "the tag in scope seen at exec", func() (bool, string) {
		s, ok := a.Sessions().Find("inside")
		return ok && s.State == sessions.Active, fmt.Sprintf("%v", a.Sessions().Sessions())
	})

	outside := startHost(t, "outside", `sleep 300 </dev/null & echo member $!; echo ready; read line; exit 0`, "member")
	inside.say(t, "sub")
	waitFor(t, "the sub-session's tag seen at exec", func() (bool, string) {
		s, ok := a.Sessions().Find("sub")
		return ok && s.State == sessions.Active && s.Parent == "inside", fmt.Sprintf("%v", a.Sessions().Sessions())
	})
	waitFor(t, "the outside host's tag in the graph", func() (bool, string) {
		p, ok := a.Graph().Lookup(outside.procs["host"].PID)
		for _, im := range p.Images {
			if im.Source == lineage.SourceKernel && slices.Contains(im.Argv, "outside") {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%v %+v", ok, p)
	})
	if s, ok := a.Sessions().Find("outside"); ok {
		t.Errorf("a tag outside the scope began a session: %+v", s)
	}

	// A marker from outside the scope, by root, through the API and by its
	// exec: refused, nothing ends.
	before := a.Sessions().Stats().MarkersRefused
	out, err := exec.Command(testenv.Binary(t), "mark", "destroy", "--session", "inside", "--api.socket", a.socket).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "sessions.within-pid") {
		t.Errorf("marker from outside the scope: %v: %s, want refused naming sessions.within-pid", err, out)
	}
	waitFor(t, "refusal counted", func() (bool, string) {
		return a.Sessions().Stats().MarkersRefused > before, ""
	})
	if s, _ := a.Sessions().Find("inside"); s.State != sessions.Active {
		t.Errorf("a marker from outside the scope ended the session: %+v", s)
	}

	// The outside host dies: its member is not this agent's to kill.
	outside.cmd.Process.Signal(syscall.SIGKILL)
	outside.cmd.Wait()
	waitFor(t, "the outside host's exit in the graph", func() (bool, string) {
		p, ok := a.Graph().Get(mustLookup(t, a, outside.procs["member"].PID).Creator)
		return ok && p.Exited, fmt.Sprintf("%+v", p)
	})
	time.Sleep(200 * time.Millisecond)
	mustAlive(t, outside.procs["member"])

	// The host in scope exits: its members and its sub-session die.
	sub, _ := a.Sessions().Find("sub")
	subRoot := procOf(t, sub.Root.PID, "sub-session root")
	inside.say(t, "exit")
	inside.cmd.Wait()
	waitDead(t, inside.procs["member"], subRoot)
	mustAlive(t, outside.procs["member"])
}
