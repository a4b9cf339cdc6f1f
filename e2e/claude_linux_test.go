package e2e_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mcptrace/mcptrace/agent"
	"github.com/mcptrace/mcptrace/api"
	"github.com/mcptrace/mcptrace/enforcer"
	"github.com/mcptrace/mcptrace/internal/agenttest"
	"github.com/mcptrace/mcptrace/internal/testenv"
	"github.com/mcptrace/mcptrace/sessions"
)

// claudeCLI is the real Claude Code CLI from npm, run with home as its
// HOME, in home.
func claudeCLI(t *testing.T, home string, args ...string) string {
	t.Helper()
	bin, err := filepath.Abs("testdata/claude/node_modules/.bin/claude")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(bin); err != nil {
		testenv.Missing(t, "the Claude Code CLI from npm", "run `make setup-test` (npm ci in e2e/testdata/claude)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = home
	cmd.Env = append(os.Environ(), "HOME="+home, "DISABLE_AUTOUPDATER=1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("claude %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// The real Claude Code CLI with a configuration wrap-config rewrote:
// `claude mcp list` starts each configured stdio server, now through
// `mcptrace exec`, so each becomes a sub-session named after it. While
// Claude waits for the two (slow to start) servers, a destroy marker
// for one ends exactly that server: Claude reports it failed, and the
// other answers and is reported connected.
func TestWrappedClaudeConfigRunsEachServerAsASubSession(t *testing.T) {
	a := agenttest.Start(t, agent.Options{
		Enforcer: enforcer.Config{Mode: enforcer.ModeEnforce, Policy: enforcer.PolicyGraceful, Grace: time.Second}})
	node, script := stubborn(t)
	home := t.TempDir()
	tag := fmt.Sprintf("--e2e-claude=%d", os.Getpid())
	for _, name := range []string{"stub-a", "stub-b"} {
		claudeCLI(t, home, "mcp", "add", name, "--", node, script, tag+"-"+name, "--delay-ready=6")
	}
	config := filepath.Join(home, ".claude.json")
	t.Cleanup(func() {
		for _, p := range agenttest.WithArgv(tag) {
			p.Kill()
		}
	})
	wrapConfig := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(testenv.Binary(t), append([]string{"wrap-config", config}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("wrap-config %q: %v\n%s", args, err, out)
		}
		return string(out)
	}
	out := wrapConfig("--mcptrace", testenv.Binary(t))
	t.Logf("wrap-config:\n%s", out)
	if strings.Count(out, "wrapped projects.") != 2 {
		t.Fatal("wrap-config did not wrap both servers")
	}
	if backups, _ := filepath.Glob(config + ".mcptrace-backup-*"); len(backups) != 1 {
		t.Errorf("backups %v, want one", backups)
	}
	listed := make(chan string, 1)
	go func() { listed <- claudeCLI(t, home, "mcp", "list") }()

	c := api.NewClient(a.Socket())
	active := func() []string {
		ss, err := c.Sessions(context.Background())
		if err != nil {
			t.Error(err)
			return nil
		}
		var ids []string
		for _, s := range ss {
			if s.State == sessions.Active && s.Origin == sessions.OriginExec {
				ids = append(ids, s.ID)
			}
		}
		slices.Sort(ids)
		return ids
	}
	testenv.Eventually(t, "the servers' sub-sessions", func() (bool, string) {
		ids := active()
		return slices.Equal(ids, []string{"stub-a", "stub-b"}), fmt.Sprint(ids)
	})
	// The two servers, by identity: Claude starts a failed one again.
	server := func(name string) agenttest.Proc {
		var ps []agenttest.Proc
		testenv.Eventually(t, name+" to run", func() (bool, string) {
			ps = agenttest.WithArgv(tag + "-" + name)
			return len(ps) == 1, fmt.Sprint(ps)
		})
		return ps[0]
	}
	sa, sb := server("stub-a"), server("stub-b")
	code, out := agenttest.CLIAs(t, a.Socket(), 0, "mark", "destroy", "--session", "stub-a")
	t.Logf("mark destroy --session stub-a: %s", out)
	if code != 0 {
		t.Fatalf("mark destroy exited %d", code)
	}
	testenv.Eventually(t, "server a to be ended", func() (bool, string) { return !sa.Alive(), sa.String() })
	if !sb.Alive() {
		t.Error("the marker for stub-a ended stub-b too")
	}
	list := <-listed
	t.Logf("claude mcp list:\n%s", list)
	// Claude starts a server that failed once more: stub-a's second
	// instance is another sub-session of that ID, which ran until Claude
	// exited. The marker ended the first stub-a and nothing of stub-b.
	all, err := c.Sessions(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	reasons := map[string][]string{}
	for _, s := range all {
		if s.Origin == sessions.OriginExec {
			reasons[s.Tag] = append(reasons[s.Tag], s.EndReason)
		}
	}
	t.Logf("sub-sessions and how they ended: %v", reasons)
	if !slices.Contains(reasons["stub-a"], sessions.ReasonMarker) || slices.Contains(reasons["stub-b"], sessions.ReasonMarker) || len(reasons["stub-b"]) != 1 {
		t.Errorf("sub-sessions ended %v: want stub-a's first by the marker, stub-b's one not by it", reasons)
	}
	if !strings.Contains(list, "stub-b: "+testenv.Binary(t)+" exec --session stub-b --") {
		t.Errorf("claude did not run stub-b through mcptrace exec")
	}
	if out := wrapConfig("--unwrap"); strings.Count(out, "unwrapped projects.") != 2 {
		t.Errorf("unwrap:\n%s", out)
	}
	if data, err := os.ReadFile(config); err != nil || strings.Contains(string(data), "exec") {
		t.Errorf("the unwrapped configuration still names mcptrace (%v)", err)
	}
}
