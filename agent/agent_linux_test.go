package agent_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mcptrace/mcptrace/agent"
	"github.com/mcptrace/mcptrace/api"
	"github.com/mcptrace/mcptrace/internal/agenttest"
	"github.com/mcptrace/mcptrace/internal/testenv"
	"github.com/mcptrace/mcptrace/lineage"
	"github.com/mcptrace/mcptrace/procfs"
	"github.com/mcptrace/mcptrace/sensor"
)

func TestMain(m *testing.M) {
	testenv.RunHelper(map[string]func(){
		"threads-exec": agenttest.ThreadsThenExec,
		"api-flood":    floodHelper,
		"chain":        chainHelper,
		"hold-port":    holdPortHelper,
		"second-agent": secondAgentHelper,
		"own-pgroup": func() {
			// A member that moved to its own process group.
			syscall.Setpgid(0, 0)
			time.Sleep(time.Hour)
		},
	})
	code := m.Run()
	testenv.RemoveBinary()
	os.Exit(code)
}

type testAgent struct {
	*agent.Agent
	client *api.Client
	socket string
}

// startAgent runs a private agent for one test (see agenttest.Start).
func startAgent(t testing.TB, opts agent.Options) *testAgent {
	t.Helper()
	a := agenttest.Start(t, opts)
	return &testAgent{Agent: a, client: api.NewClient(a.Socket()), socket: a.Socket()}
}

// members is the members of the session with this ID (the one owner that
// has one: sessions.Tracker.Find).
func (a *testAgent) members(id string) []lineage.Process {
	s, _ := a.Sessions().Find(id)
	return a.Sessions().Members(s.Ref())
}

// waitFor polls cond until it holds (testenv.Eventually).
func waitFor(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	testenv.Eventually(t, what, cond)
}

// spawn starts a shell script whose stdout lines are pids it reports, and
// returns the shell's pid and a reader of those lines.
func spawn(t *testing.T, script string) (*exec.Cmd, *bufio.Scanner) {
	t.Helper()
	cmd := exec.Command("/bin/sh", "-c", script)
	_, sc := testenv.StartPiped(t, cmd)
	return cmd, sc
}

func readPID(t *testing.T, sc *bufio.Scanner) uint32 { t.Helper(); return testenv.ReadPID(t, sc) }

// killLater kills a process this test started (a sleep it left behind).
func killLater(t *testing.T, pid uint32) {
	t.Cleanup(func() { syscall.Kill(int(pid), syscall.SIGKILL) })
}

func pids(procs []lineage.Process) []uint32 {
	out := make([]uint32, len(procs))
	for i, p := range procs {
		out[i] = p.ID.PID
	}
	return out
}

func find(procs []lineage.Process, pid uint32) (lineage.Process, bool) {
	for _, p := range procs {
		if p.ID.PID == pid {
			return p, true
		}
	}
	return lineage.Process{}, false
}

func TestTreeKeepsGrandchildOfDeadWrapper(t *testing.T) {
	a := startAgent(t, agent.Options{})
	for _, tc := range []struct {
		name   string
		script string
	}{
		// The inner sh backgrounds a sleep and exits at once: the sleep is
		// reparented away from the dead wrapper.
		{"background-and-exit", `sh -c 'sleep 30 & echo $!; exit 0'; exec sleep 30`},
		// A double fork into a new session: setsid forks, the daemon's
		// parent exits.
		{"setsid-double-fork", `setsid sh -c 'sleep 30 & echo $!' ; exec sleep 30`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root, out := spawn(t, tc.script)
			rootPID := uint32(root.Process.Pid)
			grandchild := readPID(t, out)
			killLater(t, grandchild)

			var tree []lineage.Process
			waitFor(t, "grandchild under root with its wrapper exited", func() (bool, string) {
				l, err := a.client.Tree(context.Background(), rootPID)
				if err != nil {
					return false, err.Error()
				}
				tree = l.Processes
				g, ok := find(tree, grandchild)
				if !ok || g.Exited {
					return false, fmt.Sprintf("tree %d = %v", rootPID, pids(tree))
				}
				c, ok := find(tree, g.Creator.PID)
				return ok && c.Exited && c.ID.PID != rootPID, fmt.Sprintf("creator %+v", c)
			})
			if tree[0].ID.PID != rootPID {
				t.Errorf("tree starts at %d, want the root %d", tree[0].ID.PID, rootPID)
			}

			anc, err := a.client.Ancestors(context.Background(), grandchild)
			if err != nil {
				t.Fatal(err)
			}
			chain := pids(anc.Processes)
			i := 0
			for i < len(chain) && chain[i] != rootPID {
				i++
			}
			if i == len(chain) {
				t.Fatalf("ancestors of %d = %v, do not reach root %d", grandchild, chain, rootPID)
			}
			if i < 2 {
				t.Errorf("ancestors of %d = %v: want the dead wrapper between it and root", grandchild, chain)
			}
			if last := anc.Processes[len(anc.Processes)-1]; last.ID.PID != 1 {
				t.Errorf("ancestors of %d end at %d, want init (1): %v", grandchild, last.ID.PID, chain)
			}
		})
	}
}

func TestGraphRecordsBothExecsOfShortProcess(t *testing.T) {
	a := startAgent(t, agent.Options{})
	cmd := exec.Command("/bin/sh", "-c", "exec env MCPTRACE_TEST=1 true --short")
	start := time.Now()
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	t.Logf("process lived at most %v", time.Since(start))
	pid := uint32(cmd.Process.Pid)
	waitFor(t, "exited node with three images", func() (bool, string) {
		p, ok := a.Graph().Lookup(pid)
		if !ok || !p.Exited {
			return false, fmt.Sprintf("%+v", p)
		}
		var got []string
		for _, im := range p.Images {
			if im.Source == lineage.SourceKernel {
				got = append(got, strings.Join(im.Argv, " "))
			}
		}
		want := []string{
			"/bin/sh -c exec env MCPTRACE_TEST=1 true --short",
			"env MCPTRACE_TEST=1 true --short",
			"true --short",
		}
		return fmt.Sprint(got) == fmt.Sprint(want), fmt.Sprintf("images %q, want %q", got, want)
	})
}

// forkAt makes the next process the test starts get pid, by writing
// ns_last_pid and retrying when another fork on the node took the pid.
func forkAt(t *testing.T, pid uint32, name string, args ...string) *exec.Cmd {
	t.Helper()
	for try := 0; try < 200; try++ {
		cmd := exec.Command(name, args...)
		runtime.LockOSThread()
		err := os.WriteFile("/proc/sys/kernel/ns_last_pid", []byte(strconv.Itoa(int(pid-1))), 0)
		if err == nil {
			err = cmd.Start()
		}
		runtime.UnlockOSThread()
		if err != nil {
			t.Fatalf("start at pid %d: %v", pid, err)
		}
		if uint32(cmd.Process.Pid) == pid {
			t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
			return cmd
		}
		cmd.Process.Kill()
		cmd.Wait()
	}
	t.Fatalf("could not get pid %d after 200 tries", pid)
	return nil
}

func TestRecycledPIDIsANewNodeOutsideTheOldTree(t *testing.T) {
	a := startAgent(t, agent.Options{})
	// A "session" root whose member exits.
	root, out := spawn(t, `sh -c 'echo $$; exit 0'; exec sleep 30`)
	rootPID := uint32(root.Process.Pid)
	member := readPID(t, out)
	var old lineage.Process
	waitFor(t, "member exited", func() (bool, string) {
		p, ok := a.Graph().Lookup(member)
		old = p
		return ok && p.Exited, fmt.Sprintf("%+v", p)
	})

	// An unrelated process, started by the test itself, gets the same pid.
	unrelated := forkAt(t, member, "/bin/sleep", "30")
	var fresh lineage.Process
	waitFor(t, "new node for the recycled pid", func() (bool, string) {
		p, ok := a.Graph().Lookup(member)
		fresh = p
		return ok && !p.Exited && p.ID != old.ID, fmt.Sprintf("%+v", p)
	})
	if got, ok := a.Graph().Get(old.ID); !ok || !got.Exited || got.Creator.PID != rootPID {
		t.Errorf("old node changed or vanished: %+v (ok=%v)", got, ok)
	}
	if fresh.Creator.PID != uint32(os.Getpid()) {
		t.Errorf("new node's creator = %d, want the test process %d", fresh.Creator.PID, os.Getpid())
	}
	for _, p := range a.Graph().Descendants(lineage.ID{PID: rootPID, Start: mustLookup(t, a, rootPID).ID.Start}) {
		if p.ID == fresh.ID {
			t.Errorf("recycled pid %d (%v) listed under the old member's root %d", unrelated.Process.Pid, fresh.ID, rootPID)
		}
	}
}

func mustLookup(t *testing.T, a *testAgent, pid uint32) lineage.Process {
	t.Helper()
	p, ok := a.Graph().Lookup(pid)
	if !ok {
		t.Fatalf("pid %d not in graph", pid)
	}
	return p
}

func TestThreadedProcessIsOneNode(t *testing.T) {
	a := startAgent(t, agent.Options{})
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self, "-test.run=^$")
	cmd.Env = testenv.HelperEnv("threads-exec")
	err = cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 7 {
		t.Fatalf("helper: %v, want exit status 7", err)
	}
	pid := uint32(cmd.Process.Pid)
	waitFor(t, "one exited node", func() (bool, string) {
		p, ok := a.Graph().Lookup(pid)
		return ok && p.Exited, fmt.Sprintf("%+v", p)
	})
	p := mustLookup(t, a, pid)
	if p.ExitCode != 7 {
		t.Errorf("exit code %d, want 7", p.ExitCode)
	}
	if n := len(a.Graph().Children(p.ID)); n != 0 {
		t.Errorf("%d children: threads were counted as processes", n)
	}
	var kernelImages int
	for _, im := range p.Images {
		if im.Source == lineage.SourceKernel {
			kernelImages++
		}
	}
	if kernelImages != 2 {
		t.Errorf("images %+v, want the test binary then sh", p.Images)
	}
}

// diffWithProc lists disagreements between a graph's processes and /proc:
// every live process in /proc must be alive in the graph with the same
// start tick, and nothing alive in the graph may be gone from /proc.
func diffWithProc(procs []lineage.Process) []string {
	snaps, err := procfs.Scan("/proc")
	if err != nil {
		return []string{err.Error()}
	}
	alive := map[uint32]lineage.Process{}
	for _, p := range procs {
		if !p.Exited {
			alive[p.ID.PID] = p
		}
	}
	var diffs []string
	inProc := map[uint32]lineage.Snapshot{}
	for _, s := range snaps {
		inProc[s.ID.PID] = s
		p, ok := alive[s.ID.PID]
		if !ok || p.ID.Tick() != s.ID.Tick() {
			diffs = append(diffs, fmt.Sprintf("pid %d (%s) alive in /proc, graph has %+v (alive=%v)", s.ID.PID, s.Comm, p.ID, ok))
		}
	}
	for _, p := range alive {
		if s, ok := inProc[p.ID.PID]; !ok || s.ID.Tick() != p.ID.Tick() {
			diffs = append(diffs, fmt.Sprintf("pid %d (%s) alive in graph, gone from /proc (graph: start %d, coarse %v, gaps %v, parent %d, images %d)",
				p.ID.PID, p.Comm, p.ID.Start, p.CoarseStart, p.Gaps, p.Parent.PID, len(p.Images)))
		}
	}
	return diffs
}

func waitConsistent(t *testing.T, g *lineage.Graph) {
	t.Helper()
	waitFor(t, "graph to match /proc", func() (bool, string) {
		d := diffWithProc(g.Processes())
		return len(d) == 0, strings.Join(d, "; ")
	})
}

// storm forks short-lived processes until stopped.
func storm(t *testing.T) (stop func()) {
	t.Helper()
	cmd := exec.Command("/bin/sh", "-c", `while :; do for i in 1 2 3 4 5 6 7 8; do sh -c 'true' & done; wait; done`)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return func() {
		cmd.Process.Kill()
		cmd.Wait()
	}
}

func TestStartupSeesPreexistingAndStormProcesses(t *testing.T) {
	testenv.Root(t)
	// A tree that exists before the agent starts.
	root, out := spawn(t, `sleep 30 & echo $!; exec sleep 30`)
	child := readPID(t, out)
	killLater(t, child)
	stop := storm(t)
	a := startAgent(t, agent.Options{})
	time.Sleep(500 * time.Millisecond)
	stop()

	tree, err := a.client.Tree(context.Background(), uint32(root.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	if c, ok := find(tree.Processes, child); !ok || c.Creator.PID != uint32(root.Process.Pid) {
		t.Errorf("pre-existing child %d not under its parent %d: %v", child, root.Process.Pid, pids(tree.Processes))
	}
	waitConsistent(t, a.Graph())
}

func TestLostEventsAreCountedAndRepaired(t *testing.T) {
	testenv.Root(t)
	// The agent runs as its own process so the test can stop it, as a
	// loaded node deschedules it, while processes come and go: the
	// smallest ring buffer then overflows for certain.
	ag := agenttest.StartProcess(t, "--bpf.ring-buffer-size", strconv.Itoa(sensor.MinRingBufferSize), "--lineage.repair-interval", "100ms")
	client := ag.Client()

	ag.Stop(syscall.SIGSTOP)
	// While the agent is stopped: short processes that come and go, and
	// long ones that start and stay, whose fork and exec events are lost.
	// 300 processes: enough records to lose forks and exits too, not only
	// the large exec records.
	burst := exec.Command("/bin/sh", "-c", `i=0; while [ $i -lt 300 ]; do sh -c 'true' & i=$((i+1)); done; wait`)
	if err := burst.Run(); err != nil {
		t.Fatal(err)
	}
	var stayed []uint32
	for i := 0; i < 3; i++ {
		cmd := exec.Command("/bin/sleep", "300")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		stayed = append(stayed, uint32(cmd.Process.Pid))
	}
	ag.Continue()

	var st api.Status
	var err error
	waitFor(t, "losses counted and repaired", func() (bool, string) {
		st, err = client.Status(context.Background())
		if err != nil {
			return false, err.Error()
		}
		var lost uint64
		for _, n := range st.Lost {
			lost += n
		}
		return st.Lost["fork"] > 0 && st.Repairs > 0, fmt.Sprintf("lost %v repairs %d", st.Lost, st.Repairs)
	})
	t.Logf("after the overflow: lost %v, repairs %d, gaps %v", st.Lost, st.Repairs, st.Gaps)
	waitFor(t, "graph to match /proc", func() (bool, string) {
		l, err := client.Processes(context.Background())
		if err != nil {
			return false, err.Error()
		}
		d := diffWithProc(l.Processes)
		for _, pid := range stayed {
			if p, ok := find(l.Processes, pid); !ok || p.Exited {
				d = append(d, fmt.Sprintf("long-lived %d started during the loss is missing", pid))
			}
		}
		return len(d) == 0, strings.Join(d, "; ")
	})
}

// asUser runs the real CLI as uid against the agent's socket and returns
// its exit code and output. (Switching a thread of the test process
// instead would leave the process's own credentials changed when the
// thread is the group leader.)
func asUser(t *testing.T, socket string, uid int, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(testenv.Binary(t), append(args, "--api.socket", socket, "--show-secrets", "--json")...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)}}
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, string(out)
	case errors.As(err, &ee):
		return ee.ExitCode(), string(out)
	}
	t.Fatalf("run mcptrace as uid %d: %v", uid, err)
	return 0, ""
}

func TestAPIShowsOtherUsersOnlyTheirOwnProcesses(t *testing.T) {
	a := startAgent(t, agent.Options{})
	socket := a.socket
	const nobody = 65534
	// A process of uid nobody, with a secret in its argv, and one of root.
	theirs := exec.Command("/bin/sleep", "30")
	theirs.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	if err := theirs.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { theirs.Process.Kill(); theirs.Wait() })
	mine, _ := spawn(t, "exec sleep 30 --root-secret=hunter2")
	waitFor(t, "both processes in graph", func() (bool, string) {
		_, ok1 := a.Graph().Lookup(uint32(theirs.Process.Pid))
		_, ok2 := a.Graph().Lookup(uint32(mine.Process.Pid))
		return ok1 && ok2, ""
	})

	for _, tc := range []struct {
		name     string
		args     []string
		wantCode int
		want     string
		notWant  string
	}{
		{"processes lists own", []string{"tree"}, 0, fmt.Sprintf(`"pid": %d,`, theirs.Process.Pid), "hunter2"},
		{"tree of own process", []string{"tree", strconv.Itoa(theirs.Process.Pid)}, 0, `"uid": 65534`, ""},
		{"tree of root's process is not found", []string{"tree", strconv.Itoa(mine.Process.Pid)}, 1, "not in the lineage graph", "hunter2"},
		{"ancestors of root's process is not found", []string{"tree", "--ancestors", strconv.Itoa(mine.Process.Pid)}, 1, "not in the lineage graph", "hunter2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body := asUser(t, socket, nobody, tc.args...)
			if code != tc.wantCode {
				t.Fatalf("code %d, want %d: %s", code, tc.wantCode, body)
			}
			if tc.want != "" && !strings.Contains(body, tc.want) {
				t.Errorf("body lacks %q: %.300s", tc.want, body)
			}
			if tc.notWant != "" && strings.Contains(body, tc.notWant) {
				t.Errorf("body shows another user's %q", tc.notWant)
			}
			if strings.Contains(body, `"uid": 0,`) {
				t.Errorf("body shows root's processes to uid %d", nobody)
			}
		})
	}
	// Root sees both.
	l, err := a.client.Processes(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := find(l.Processes, uint32(mine.Process.Pid)); !ok {
		t.Error("root does not see its own process")
	}
	if _, ok := find(l.Processes, uint32(theirs.Process.Pid)); !ok {
		t.Error("root does not see uid 65534's process")
	}
}

// A process root started and then handed to another uid (sh -c "…; exec
// setpriv --reuid … sleep") shows that uid only the images executed under
// it: root's command lines before the switch, secrets and all, stay
// root's. Root sees the whole history, redacted unless it asks raw.
func TestOtherUIDNeverSeesImagesRunBeforeItOwnedTheProcess(t *testing.T) {
	a := startAgent(t, agent.Options{})
	const nobody = 65534
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		testenv.Missing(t, "setpriv (util-linux)", err.Error())
	}
	// Image 1: root's shell with a secret in its script; image 2: setpriv,
	// still root; image 3: sleep, uid 65534.
	cmd, _ := spawn(t, "true --password=ROOTSECRET; exec "+setpriv+" --reuid 65534 --regid 65534 --clear-groups /bin/sleep 300")
	pid := uint32(cmd.Process.Pid)
	waitFor(t, "the process running sleep as uid 65534", func() (bool, string) {
		p, ok := a.Graph().Lookup(pid)
		return ok && p.UID == nobody && p.Current().Filename == "/bin/sleep", fmt.Sprintf("%+v", p)
	})
	for _, tc := range []struct {
		name    string
		uid     int
		args    []string
		want    []string
		notWant []string
	}{
		{"the new owner sees only its own image", nobody, []string{"tree", strconv.Itoa(int(pid))},
			[]string{`"sleep"`}, []string{"ROOTSECRET", "setpriv", "--password"}},
		{"root sees the whole history redacted", 0, []string{"tree", strconv.Itoa(int(pid))},
			[]string{"setpriv", `"sleep"`, "--password=<redacted>"}, []string{"ROOTSECRET"}},
		{"root asking raw sees the secret", 0, []string{"tree", "--raw", strconv.Itoa(int(pid))},
			[]string{"ROOTSECRET"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Not asUser: its --show-secrets would ask root's answer raw.
			cmd := exec.Command(testenv.Binary(t), append(tc.args, "--api.socket", a.socket, "--json")...)
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(tc.uid), Gid: uint32(tc.uid)}}
			out, err := cmd.CombinedOutput()
			body := strings.NewReplacer(`\u003c`, "<", `\u003e`, ">").Replace(string(out))
			if err != nil {
				t.Fatalf("%v: %s", err, body)
			}
			for _, w := range tc.want {
				if !strings.Contains(body, w) {
					t.Errorf("output lacks %q: %.600s", w, body)
				}
			}
			for _, w := range tc.notWant {
				if strings.Contains(body, w) {
					t.Errorf("output shows %q: %.600s", w, body)
				}
			}
		})
	}
}

// The state directory is private, but the socket beside it (the default
// /run/mcptrace) stays reachable by every user: a parent the agent
// creates for its state is not made private with it.
func TestSocketBesideTheStateStaysReachableByOtherUsers(t *testing.T) {
	testenv.Root(t)
	base, err := os.MkdirTemp("", "mcptrace-run-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(base, 0o755)
	t.Cleanup(func() { os.RemoveAll(base) })
	run := filepath.Join(base, "run") // created by the agent
	a := startAgent(t, agent.Options{Socket: filepath.Join(run, "mcptrace.sock"), StateDir: filepath.Join(run, "state")})
	cmd := exec.Command(testenv.Binary(t), "sessions", "--api.socket", a.socket)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("uid 65534 cannot use the socket in %s: %v: %s", run, err, out)
	}
	fi, err := os.Stat(filepath.Join(run, "state"))
	if err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("state directory mode %v (%v), want 0700", fi.Mode().Perm(), err)
	}
}
