package e2e_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mcptrace/mcptrace/agent"
	"github.com/mcptrace/mcptrace/api"
	"github.com/mcptrace/mcptrace/enforcer"
	"github.com/mcptrace/mcptrace/internal/agenttest"
	"github.com/mcptrace/mcptrace/internal/testenv"
	"github.com/mcptrace/mcptrace/orphans"
)

// stubborn is the local MCP server that outlives its stdin, as leaked
// servers do, run by node directly from the host's node_modules.
func stubborn(t *testing.T) (node, script string) {
	t.Helper()
	hostDir, err := filepath.Abs("testdata/mcphost")
	if err != nil {
		t.Fatal(err)
	}
	script = filepath.Join(hostDir, "node_modules", "mcptrace-e2e-stubborn-server", "index.mjs")
	if _, err := os.Stat(script); err != nil {
		testenv.Missing(t, "the MCP host's node packages", "run `make setup-test` (npm ci in e2e/testdata/mcphost)")
	}
	if node, err = exec.LookPath("node"); err != nil {
		testenv.Missing(t, "Node.js", "install nodejs (make setup-test)")
	}
	return node, script
}

// leakThroughSh starts, as uid, `sh -c 'node stubborn-server; :'` with
// a stdin pipe this test writes (the test is its host), then kills the
// sh wrapper: the server is reparented while its host still holds the
// pipe. It returns the function that closes the host's end: the host is
// then gone.
func leakThroughSh(t *testing.T, marker string, uid uint32, args ...string) (hostGone func()) {
	t.Helper()
	node, script := stubborn(t)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	sh := exec.Command("sh", "-c", fmt.Sprintf("%s %s --token=LEAKSECRET %s; :", node, script, strings.Join(args, " ")))
	sh.Stdin = r
	sh.Env = append(os.Environ(), marker)
	sh.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
	if err := sh.Start(); err != nil {
		t.Fatal(err)
	}
	r.Close()
	t.Cleanup(func() { w.Close(); endMarked(marker) })
	want := 2
	if slices.Contains(args, "--children") {
		want = 4
	}
	testenv.Eventually(t, "the server under sh -c to start", func() (bool, string) {
		n := len(agenttest.WithEnv(marker))
		return n == want, fmt.Sprintf("%d processes", n)
	})
	sh.Process.Kill()
	sh.Wait()
	return func() { w.Close() }
}

// endMarked kills what is left of a test's processes, found by marker.
func endMarked(marker string) {
	for _, p := range agenttest.WithEnv(marker) {
		p.Kill()
	}
}

// bystanders starts what orphans must never list: a daemon on /dev/null
// reparented to init, and a user's own node program (no package) cut
// off from its stdin and reparented the same way.
func bystanders(t *testing.T, marker string) {
	t.Helper()
	node, _ := stubborn(t)
	app := filepath.Join(t.TempDir(), "app.js")
	if err := os.WriteFile(app, []byte("setInterval(() => {}, 1000)\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, script := range []string{
		"sleep 600 </dev/null >/dev/null 2>&1 &",
		fmt.Sprintf("%s %s >/dev/null 2>&1 &", node, app),
	} {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		c := exec.Command("sh", "-c", script)
		c.Stdin = r
		c.Env = append(os.Environ(), marker)
		if err := c.Run(); err != nil {
			t.Fatal(err)
		}
		r.Close()
		w.Close()
	}
	t.Cleanup(func() { endMarked(marker) })
}

func orphansOf(t *testing.T, c *api.Client) api.OrphanList {
	t.Helper()
	l, err := c.Orphans(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func named(l api.OrphanList, name string) []orphans.Orphan {
	var out []orphans.Orphan
	for _, o := range l.Orphans {
		if o.Name == name {
			out = append(out, o)
		}
	}
	return out
}

// A node prepared with a real backlog: a stubborn server whose npx
// chain lost its host (SIGKILLed), one whose sh -c wrapper was killed
// while its host lived on and whose host then went away, a live host
// holding two generations of the filesystem server, and bystanders.
// orphans lists every leaked one with its confidence and none of the
// bystanders; --end leaves none leaked and every bystander alive.
func TestOrphansListsARealBacklogAndEndsItLeavingBystanders(t *testing.T) {
	a := agenttest.Start(t, agent.Options{IdleAfter: time.Second, OrphansEvery: time.Millisecond, OrphansConfirmAfter: time.Second,
		Enforcer: enforcer.Config{Mode: enforcer.ModeEnforce, Policy: enforcer.PolicyGraceful, Grace: time.Second}})
	c := api.NewClient(a.Socket())
	pid := os.Getpid()
	npxMarker := fmt.Sprintf("MCPTRACE_E2E=orphan-npx-%d", pid)
	shMarker := fmt.Sprintf("MCPTRACE_E2E=orphan-sh-%d", pid)
	liveMarker := fmt.Sprintf("MCPTRACE_E2E=orphan-live-%d", pid)
	byMarker := fmt.Sprintf("MCPTRACE_E2E=orphan-bystander-%d", pid)

	// 1. A host (no session) starts the stubborn server through npx, and
	// is SIGKILLed: its filesystem servers exit on end of file, the
	// stubborn one does not.
	dead := startHost(t, "", npxMarker, a.Socket())
	dead.say(t, "start-stubborn", "ready")
	dead.cmd.Process.Kill()
	dead.cmd.Wait()
	// 2. A server whose sh -c wrapper was killed: its host (this test)
	// still holds its stdin.
	hostGone := leakThroughSh(t, shMarker, 0, "--children")
	// 3. A live host holding two generations of the filesystem server.
	live := startHost(t, "", liveMarker, a.Socket())
	t.Cleanup(func() { endMarked(npxMarker); endMarked(liveMarker) })
	// 4. Bystanders.
	bystanders(t, byMarker)
	var bystanderProcs []agenttest.Proc
	testenv.Eventually(t, "the bystanders: the daemon and the user's node program", func() (bool, string) {
		bystanderProcs = agenttest.WithEnv(byMarker)
		return len(bystanderProcs) == 2, fmt.Sprint(bystanderProcs)
	})

	const stub = "mcptrace-e2e-stubborn-server"
	const fs = "@modelcontextprotocol/server-filesystem"
	// The first look notes every server's I/O; idleness needs a second.
	var l api.OrphanList
	testenv.Eventually(t, "the backlog to be listed", func() (bool, string) {
		l = orphansOf(t, c)
		return len(named(l, stub)) == 1 && len(named(l, fs)) == 1, fmt.Sprintf("%+v", l.Orphans)
	})
	if o := named(l, stub)[0]; o.Confidence != orphans.Certain || o.Kind != orphans.HostGone || o.Processes < 3 {
		t.Errorf("the npx chain whose host was killed: %+v, want certain, host gone, npx → sh → node", o)
	}
	older := named(l, fs)[0]
	if older.Kind != orphans.Superseded || older.Confidence != orphans.Likely || older.Host.PID != uint32(live.cmd.Process.Pid) {
		t.Errorf("the older filesystem server of the live host: %+v", older)
	}
	// The sh -c server's host still holds its pipe: not leaked, until the
	// host goes.
	for _, o := range l.Orphans {
		for _, p := range agenttest.WithEnv(shMarker) {
			if o.Server.PID == p.PID {
				t.Errorf("a server whose host still writes its stdin is listed: %+v", o)
			}
		}
	}
	hostGone()
	testenv.Eventually(t, "the sh -c server to be listed once its host is gone", func() (bool, string) {
		l = orphansOf(t, c)
		return len(named(l, stub)) == 2, fmt.Sprintf("%+v", l.Orphans)
	})
	for _, o := range l.Orphans {
		for _, b := range bystanderProcs {
			if o.Top.PID == b.PID || o.Server.PID == b.PID {
				t.Errorf("a bystander is listed: %+v", o)
			}
		}
		if strings.Contains(strings.Join(o.Argv, " "), "LEAKSECRET") {
			t.Errorf("a secret in a command line is shown: %q", o.Argv)
		}
	}
	// The metrics count the same, by host kind, evidence and confidence.
	byConfidence := map[string]int{}
	for k, u := range a.Sample().Unowned {
		byConfidence[k.Confidence] += u.Servers
	}
	if byConfidence["certain"] != 2 || byConfidence["likely"] != 1 {
		t.Errorf("the metrics' picture of the orphans: %v, want 2 certain and 1 likely", byConfidence)
	}
	code, out := agenttest.CLIAs(t, a.Socket(), 0, "orphans")
	t.Logf("mcptrace orphans:\n%s", out)
	if code != 0 || !strings.HasPrefix(out, "3 leaked MCP servers (2 certain, 1 likely)") {
		t.Errorf("mcptrace orphans exited %d, want the totals first", code)
	}

	code, out = agenttest.CLIAs(t, a.Socket(), 0, "orphans", "--end", "--dry-run")
	if code != 0 || !strings.Contains(out, "would end (dry run") {
		t.Errorf("--dry-run exited %d:\n%s", code, out)
	}
	if left := orphansOf(t, c); left.Totals.Servers != 3 {
		t.Errorf("a dry run ended something: %d left", left.Totals.Servers)
	}
	code, out = agenttest.CLIAs(t, a.Socket(), 0, "orphans", "--end")
	t.Logf("mcptrace orphans --end:\n%s", out)
	if code != 0 || !strings.Contains(out, "0 leaked MCP servers left") {
		t.Errorf("--end exited %d", code)
	}
	for _, m := range []string{npxMarker, shMarker} {
		if left := agenttest.WithEnv(m); slices.ContainsFunc(left, func(p agenttest.Proc) bool { return strings.Contains(strings.Join(p.Argv, " "), "stubborn") }) {
			t.Errorf("leaked servers still run: %v", left)
		}
	}
	for _, b := range bystanderProcs {
		if !b.Alive() {
			t.Errorf("bystander %v was ended", b)
		}
	}
	// The server's own worker ended with it; the daemon it detached into
	// its own session did not.
	var worker, daemon int
	for _, p := range agenttest.WithEnv(shMarker) {
		switch strings.Join(p.Argv, " ") {
		case "sleep 3601":
			worker++
		case "sleep 3602":
			daemon++
		}
	}
	if worker != 0 || daemon != 1 {
		t.Errorf("after --end: %d workers and %d detached daemons of the sh -c server, want 0 and 1", worker, daemon)
	}
	if h := agenttest.ProcOf(t, uint32(live.cmd.Process.Pid), "the live host"); !h.Alive() {
		t.Error("the live host was ended")
	}
	if len(serversOf(liveMarker, "2")) == 0 {
		t.Error("the live host's current filesystem server was ended")
	}
}

// Another user sees and ends only their own orphans; root's stay until
// root ends them.
func TestOrphansOfAnotherUserAreTheirsAlone(t *testing.T) {
	a := agenttest.Start(t, agent.Options{OrphansConfirmAfter: time.Second,
		Enforcer: enforcer.Config{Mode: enforcer.ModeEnforce, Policy: enforcer.PolicyImmediate}})
	c := api.NewClient(a.Socket())
	rootMarker := fmt.Sprintf("MCPTRACE_E2E=orphan-root-%d", os.Getpid())
	userMarker := fmt.Sprintf("MCPTRACE_E2E=orphan-nobody-%d", os.Getpid())
	leakThroughSh(t, rootMarker, 0)()
	leakThroughSh(t, userMarker, nobody)()
	testenv.Eventually(t, "both users' orphans to be listed", func() (bool, string) {
		l := orphansOf(t, c)
		return l.Totals.Servers == 2, fmt.Sprintf("%+v", l.Orphans)
	})
	code, out := agenttest.CLIAs(t, a.Socket(), nobody, "orphans", "--json")
	if code != 0 || strings.Count(out, `"server":`) != 1 || !strings.Contains(out, fmt.Sprintf(`"uid": %d`, nobody)) {
		t.Errorf("nobody's list (exit %d):\n%s", code, out)
	}
	code, out = agenttest.CLIAs(t, a.Socket(), nobody, "orphans", "--end")
	t.Logf("nobody's --end:\n%s", out)
	if code != 0 {
		t.Errorf("nobody's --end exited %d", code)
	}
	if left := agenttest.WithEnv(userMarker); len(left) != 0 {
		t.Errorf("nobody's orphan survived its --end: %v", left)
	}
	if left := agenttest.WithEnv(rootMarker); len(left) != 1 {
		t.Errorf("root's orphan after nobody's --end: %v, want it alive", left)
	}
	if l := orphansOf(t, c); l.Totals.Servers != 1 {
		t.Errorf("root sees %d orphans after nobody's --end, want its own", l.Totals.Servers)
	}
}
