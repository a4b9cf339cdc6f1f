package e2e_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mcptrace/mcptrace/agent"
	"github.com/mcptrace/mcptrace/api"
	"github.com/mcptrace/mcptrace/enforcer"
	"github.com/mcptrace/mcptrace/exporter"
	"github.com/mcptrace/mcptrace/internal/agenttest"
	"github.com/mcptrace/mcptrace/internal/testenv"
	"github.com/mcptrace/mcptrace/roles"
	"github.com/mcptrace/mcptrace/sessions"
)

// The two servers every real host is configured with: a launcher that
// leaves a setsid'd sleep behind and execs npx for the filesystem
// server (which ends on stdin EOF), and the stubborn server, which
// ignores EOF, through npx.
const (
	fsServer   = "@modelcontextprotocol/server-filesystem"
	stubServer = "mcptrace-e2e-stubborn-server"
)

// hostRun is one run of a real host from npm, in a throwaway HOME, with
// the two servers configured.
type hostRun struct {
	name string // the run, as the table names it
	kind string // the default rule that must recognise it (host_kind)
	// together: the host keeps both servers running at once, so the
	// metrics must count exactly those two while it runs; the others
	// (`mcp list`, the Inspector) check them one after the other.
	together bool
	// prepare writes the host's configuration; start starts it and
	// returns a function that ends it (nil: it exits by itself).
	prepare func(t *testing.T, r *hostRun)
	start   func(t *testing.T, r *hostRun) (end func())

	home, tag, sleepArg, served, launcher string
	cmds                                  []*exec.Cmd
	stop                                  func() // ends what the run started outside its process groups
	started                               time.Time
}

// leftovers are the run's servers, wrappers and helpers alive, told by
// the arguments only this run gives them; the hosts' own processes are
// not among them.
func (r *hostRun) leftovers() []agenttest.Proc {
	var out []agenttest.Proc
	for _, m := range []string{"sleep " + r.sleepArg, r.served, "--e2e-host=" + r.tag} {
		for _, p := range agenttest.WithArgv(m) {
			if !slices.ContainsFunc(out, func(q agenttest.Proc) bool { return q.PID == p.PID }) {
				out = append(out, p)
			}
		}
	}
	return out
}

// envTag is the environment entry every process of the run inherits.
func (r *hostRun) envTag() string { return "MCPTRACE_E2E_RUN=" + r.tag }

// cleanup kills what the run left: its leftovers and any of its hosts
// still running (every process whose argv holds the run's tag).
func (r *hostRun) cleanup() {
	if r.stop != nil {
		r.stop()
	}
	for _, c := range r.cmds {
		if c.Process != nil {
			syscall.Kill(-c.Process.Pid, syscall.SIGKILL)
		}
	}
	// Until all are gone (an npx still starting a server may start it
	// after the first kill; a host in a tmux pane still exiting after
	// the server's kill-server), before the test removes HOME, which
	// they write to. What runs in tmux is in none of the run's process
	// groups, nor is the host's argv the run's: every process of the run
	// carries its tag in the environment (command), tmux's included.
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		left := append(append(r.leftovers(), agenttest.WithArgv(r.tag)...), agenttest.WithEnv(r.envTag())...)
		for _, p := range left {
			p.Kill()
		}
		alive := len(left)
		for _, c := range r.cmds {
			if c.Process != nil && syscall.Kill(-c.Process.Pid, 0) == nil {
				alive++
			}
		}
		if alive == 0 {
			return
		}
	}
}

// command starts a host binary of testdata/<pkg> in the run's HOME, in
// a process group of its own (the control's cleanup kills the group).
func (r *hostRun) command(t *testing.T, bin string, env []string, args ...string) *exec.Cmd {
	cmd := exec.Command(bin, args...)
	cmd.Dir = r.home
	cmd.Env = append(os.Environ(), append([]string{"HOME=" + r.home, "DISABLE_AUTOUPDATER=1",
		"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1", "NO_UPDATE_NOTIFIER=1", r.envTag()}, env...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatalf("%s: %v", r.name, err)
	}
	r.cmds = append(r.cmds, cmd)
	go cmd.Wait()
	return cmd
}

// npmBin is the path of a binary a testdata package installs, or the
// test stops naming what is missing.
func npmBin(t *testing.T, pkg, rel string) string {
	t.Helper()
	p, err := filepath.Abs(filepath.Join("testdata", pkg, "node_modules", rel))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p); err != nil {
		testenv.Missing(t, "the "+pkg+" CLI from npm", "run `make setup-test` (npm ci in e2e/testdata/"+pkg+")")
	}
	return p
}

func mcphostDir(t *testing.T) string {
	stubborn(t) // Missing when the packages are not installed
	d, err := filepath.Abs("testdata/mcphost")
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// stubArgs are the stubborn server's command through npx.
func (r *hostRun) stubArgs(t *testing.T) []string {
	return []string{"--prefix", mcphostDir(t), "--no-install", stubServer, "--e2e-host=" + r.tag}
}

func writeConfig(t *testing.T, path, data string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), mode); err != nil {
		t.Fatal(err)
	}
}

// mcpServersJSON is the mcpServers map most hosts read.
func (r *hostRun) mcpServersJSON(t *testing.T, extra string) string {
	args := `"` + strings.Join(r.stubArgs(t), `", "`) + `"`
	return fmt.Sprintf(`{"leaky": {%s"command": %q, "args": []}, "stub": {%s"command": "npx", "args": [%s]}}`,
		extra, r.launcher, extra, args)
}

func newRun(t *testing.T, i int, r hostRun) *hostRun {
	r.home = t.TempDir()
	r.tag = fmt.Sprintf("%s-%d-%d", strings.ReplaceAll(r.name, " ", "-"), os.Getpid(), i)
	// sleep takes a fraction: a number only this run's helper sleeps.
	r.sleepArg = fmt.Sprintf("%d.%d", 3600+i, os.Getpid())
	r.served = filepath.Join(r.home, "served-"+r.tag)
	if err := os.Mkdir(r.served, 0o755); err != nil {
		t.Fatal(err)
	}
	r.launcher = filepath.Join(r.home, "leaky-launch")
	writeConfig(t, r.launcher, fmt.Sprintf(`#!/bin/sh
# A launcher that leaves a helper behind, as some do.
setsid sleep %s </dev/null >/dev/null 2>&1 &
cd %s && exec npx --no-install %s %s
`, r.sleepArg, mcphostDir(t), fsServer, r.served), 0o755)
	r.prepare(t, &r)
	return &r
}

func realHostRuns(t *testing.T) []hostRun {
	claude := func(t *testing.T, r *hostRun) {
		bin := npmBin(t, "claude", ".bin/claude")
		for _, args := range [][]string{{"mcp", "add", "leaky", "--", r.launcher}, append([]string{"mcp", "add", "stub", "--", "npx"}, r.stubArgs(t)...)} {
			cmd := exec.Command(bin, args...)
			cmd.Dir, cmd.Env = r.home, append(os.Environ(), "HOME="+r.home, "DISABLE_AUTOUPDATER=1")
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("claude %s: %v\n%s", strings.Join(args, " "), err, out)
			}
		}
	}
	codexConfig := func(t *testing.T, r *hostRun) {
		args := `"` + strings.Join(r.stubArgs(t), `", "`) + `"`
		writeConfig(t, filepath.Join(r.home, ".codex", "config.toml"), fmt.Sprintf(`model_provider = "local"
model = "gpt-5"
[model_providers.local]
name = "local"
base_url = "http://127.0.0.1:9/v1"
[mcp_servers.leaky]
command = %q
[mcp_servers.stub]
command = "npx"
args = [%s]
`, r.launcher, args), 0o644)
	}
	codex := func(bin func(t *testing.T) string) func(t *testing.T, r *hostRun) func() {
		return func(t *testing.T, r *hostRun) func() {
			cmd := r.command(t, bin(t), nil, "exec", "--skip-git-repo-check", "say "+r.tag)
			return func() { cmd.Process.Signal(syscall.SIGTERM) }
		}
	}
	return []hostRun{
		{name: "claude mcp list", kind: "claude", prepare: claude, start: func(t *testing.T, r *hostRun) func() {
			r.command(t, npmBin(t, "claude", ".bin/claude"), nil, "mcp", "list")
			return nil
		}},
		{name: "claude -p", kind: "claude", together: true, prepare: claude, start: func(t *testing.T, r *hostRun) func() {
			cmd := r.command(t, npmBin(t, "claude", ".bin/claude"), []string{"ANTHROPIC_BASE_URL=http://127.0.0.1:9", "ANTHROPIC_API_KEY=sk-ant-e2e"}, "-p", "say "+r.tag)
			return func() { cmd.Process.Signal(syscall.SIGTERM) }
		}},
		{name: "codex npm", kind: "codex", together: true, prepare: codexConfig,
			start: codex(func(t *testing.T) string { return npmBin(t, "codex", ".bin/codex") })},
		{name: "codex native", kind: "codex", together: true, prepare: codexConfig,
			start: codex(func(t *testing.T) string {
				return npmBin(t, "codex", "@openai/codex-linux-x64/vendor/x86_64-unknown-linux-musl/bin/codex")
			})},
		{name: "copilot in tmux", kind: "copilot", together: true, prepare: func(t *testing.T, r *hostRun) {
			writeConfig(t, filepath.Join(r.home, ".copilot", "mcp-config.json"),
				`{"mcpServers": `+r.mcpServersJSON(t, `"type": "local", "tools": ["*"], `)+`}`, 0o644)
		}, start: func(t *testing.T, r *hostRun) func() {
			tmux, err := exec.LookPath("tmux")
			if err != nil {
				testenv.Missing(t, "tmux", "install tmux (make setup-test)")
			}
			sock := filepath.Join(r.home, "tmux.sock")
			r.command(t, tmux, nil, "-S", sock, "new-session", "-d", "-x", "200", "-y", "50",
				npmBin(t, "copilot", ".bin/copilot")+" --allow-all-tools")
			// Closing the terminal ends the host.
			r.stop = func() { exec.Command(tmux, "-S", sock, "kill-server").Run() }
			return r.stop
		}},
		{name: "gemini mcp list", kind: "gemini", prepare: func(t *testing.T, r *hostRun) {
			// Its default connection timeout is shorter than npx's start
			// with the other runs beside it.
			writeConfig(t, filepath.Join(r.home, ".gemini", "settings.json"), `{"mcpServers": `+r.mcpServersJSON(t, `"timeout": 120000, `)+`}`, 0o644)
			writeConfig(t, filepath.Join(r.home, ".gemini", "trustedFolders.json"), fmt.Sprintf(`{%q: "TRUST_FOLDER"}`, r.home), 0o644)
		}, start: func(t *testing.T, r *hostRun) func() {
			r.command(t, npmBin(t, "gemini", ".bin/gemini"), nil, "mcp", "list")
			return nil
		}},
		{name: "inspector --cli", kind: "mcp-inspector", prepare: func(*testing.T, *hostRun) {}, start: func(t *testing.T, r *hostRun) func() {
			// The Inspector's client talks to one server a run: one run each.
			bin := npmBin(t, "inspector", ".bin/mcp-inspector")
			r.command(t, bin, nil, "--cli", r.launcher, "--method", "tools/list")
			r.command(t, bin, nil, append(append([]string{"--cli", "npx"}, r.stubArgs(t)...), "--method", "tools/list")...)
			return func() {
				for _, c := range r.cmds {
					c.Process.Signal(syscall.SIGTERM)
				}
			}
		}},
	}
}

// hostsBound bounds each wait of a run: npx starting a server takes
// seconds on this machine kind, more with the other runs beside it.
const hostsBound = 90 * time.Second

func within(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(testenv.Bound(hostsBound))
	for {
		ok, detail := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s: %s", what, detail)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// exited reports whether every process the run started directly ended.
func (r *hostRun) exited() bool {
	for _, c := range r.cmds {
		if c.Process != nil && syscall.Kill(c.Process.Pid, 0) == nil {
			if st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", c.Process.Pid)); err == nil && !strings.Contains(string(st), ") Z ") {
				return false
			}
		}
	}
	return true
}

// control runs r with no agent: what the host leaves behind once it
// ended.
func (r *hostRun) control(t *testing.T) int {
	defer r.cleanup()
	end := r.start(t, r)
	within(t, r.name+" to start its servers", func() (bool, string) {
		st := agenttest.WithArgv("--e2e-host=" + r.tag)
		return len(st) > 0 && len(agenttest.WithArgv("sleep "+r.sleepArg)) > 0, fmt.Sprint(st)
	})
	if end != nil {
		time.Sleep(2 * time.Second) // both servers up: the stubborn one has just started
		end()
	}
	within(t, r.name+" to exit", func() (bool, string) { return r.exited(), "" })
	time.Sleep(2 * time.Second) // what a host ends on its way out is gone by now
	left := r.leftovers()
	t.Logf("%s without an agent leaves %d: %v", r.name, len(left), left)
	return len(left)
}

// result is one row of the table the test logs.
type result struct {
	recognised, right bool
	without, with     int
	note              string
}

// withAgent runs r under a: recognised by the default rules, drawn
// right, counted right, nothing left.
func (r *hostRun) withAgent(t *testing.T, a *agent.Agent, res *result) {
	defer r.cleanup()
	c := api.NewClient(a.Socket())
	ctx := context.Background()
	before := map[string]bool{}
	if ss, err := c.Sessions(ctx); err == nil {
		for _, s := range ss {
			before[s.ID] = true
		}
	}
	mine := func() []api.SessionInfo {
		ss, err := c.Sessions(ctx)
		if err != nil {
			t.Error(err)
		}
		return slices.DeleteFunc(ss, func(s api.SessionInfo) bool {
			return before[s.ID] || s.Origin != sessions.OriginRule+r.kind || s.Parent != ""
		})
	}
	r.started = time.Now()
	end := r.start(t, r)
	within(t, r.name+" recognised as a "+r.kind+" session", func() (bool, string) { return len(mine()) > 0, "" })
	res.recognised = true
	if r.together {
		// While it runs: the metrics count exactly the two servers.
		var last string
		within(t, "the metrics to count exactly the two servers", func() (bool, string) {
			pic := a.Sample()
			last = liveServersOf(pic, r.kind)
			return last == fsServer+" 1, "+stubServer+" 1", last
		})
		res.note = "(mcptrace_servers: " + last + ")"
		if r.kind == "copilot" { // a 20 s session
			time.Sleep(time.Until(r.started.Add(20 * time.Second)))
		}
		if out := r.tree(t, a, mine()[0].ID); r.kind == "copilot" {
			if n := strings.Count(out, "\n"); n > 60 {
				t.Errorf("tree --session of a running Copilot is %d lines, want at most 60", n)
			}
		}
	}
	if end != nil {
		// Each server was seen (the Inspector waits for ever for a
		// server that ignores EOF: a person ends it).
		within(t, "both servers in the run's sessions", func() (bool, string) {
			seen := r.servers(t, c, mine())
			return seen[fsServer] && seen[stubServer], fmt.Sprint(seen)
		})
		end()
	}
	within(t, r.name+" to exit", func() (bool, string) { return r.exited(), "" })
	within(t, "the sessions ended and enforced", func() (bool, string) {
		ss := mine()
		for _, s := range ss {
			if s.State != sessions.Ended || s.Enforcement == nil {
				return false, fmt.Sprintf("%s %v", s.ID, s.State)
			}
		}
		return len(ss) > 0, ""
	})
	// Drawn right: every server of every session of the run is one of
	// the two, named by its package, and both are there.
	seen := map[string]bool{}
	right := true
	for _, s := range mine() {
		d, err := c.Session(ctx, s.ID, nil)
		if err != nil {
			t.Fatal(err)
		}
		here := map[string]bool{}
		for i, m := range d.Roles {
			if m.Role == roles.Server {
				seen[m.Server], here[m.Server] = true, true
				if m.Server != fsServer && m.Server != stubServer {
					right = false
					t.Errorf("%s: %s is a server named %q", s.ID, strings.Join(d.Processes[i].Current().Argv, " "), m.Server)
				}
			}
		}
		out := r.tree(t, a, s.ID)
		for _, name := range []string{fsServer, stubServer} {
			if here[name] && !strings.Contains(out, "server "+name) {
				t.Errorf("tree --session %s shows no server %s", s.ID, name)
			}
		}
	}
	if !seen[fsServer] || !seen[stubServer] {
		right = false
		t.Errorf("servers seen %v, want %s and %s", seen, fsServer, stubServer)
	}
	res.right = right
	within(t, "nothing of the run left", func() (bool, string) {
		left := r.leftovers()
		return len(left) == 0, fmt.Sprint(left)
	})
	res.with = len(r.leftovers())
}

// servers lists the servers, by name, the sessions ss have or had.
func (r *hostRun) servers(t *testing.T, c *api.Client, ss []api.SessionInfo) map[string]bool {
	seen := map[string]bool{}
	for _, s := range ss {
		d, err := c.Session(context.Background(), s.ID, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range d.Roles {
			if m.Role == roles.Server {
				seen[m.Server] = true
			}
		}
	}
	return seen
}

// liveServersOf lists the live servers the picture counts under kind.
func liveServersOf(pic exporter.Picture, kind string) string {
	var out []string
	for k, s := range pic.Servers {
		if k.HostKind == kind && s.Live > 0 {
			out = append(out, fmt.Sprintf("%s %d", k.Server, s.Live))
		}
	}
	slices.Sort(out)
	return strings.Join(out, ", ")
}

// tree is `mcptrace tree --session ID` as a person sees it.
func (r *hostRun) tree(t *testing.T, a *agent.Agent, id string) string {
	code, out := agenttest.CLIAs(t, a.Socket(), 0, "tree", "--session", id)
	if code != 0 {
		t.Errorf("tree --session %s exited %d:\n%s", id, code, out)
	}
	t.Logf("%s: tree --session %s (%d lines):\n%s", r.name, id, strings.Count(out, "\n"), out)
	return out
}

// The real hosts from npm, offline, each configured with a launcher
// that leaves a setsid'd helper and a server that ignores stdin EOF
// (issue 32): without an agent they leave processes behind; under an
// agent with the default rules (narrowed to this test) each is
// recognised, its servers are drawn host → wrappers → server, named by
// their packages, its own native binary and commands are no server, the
// metrics count exactly the two servers, and nothing is left once it
// exits. The runs go side by side, the controls first (no agent), then
// under one agent, so the set costs about two of its slowest runs.
func TestRealHostsAreRecognisedDrawnRightAndLeaveNothing(t *testing.T) {
	specs := realHostRuns(t)
	results := make([]result, len(specs))
	var mu sync.Mutex
	// Side by side, not t.Parallel: the runs wait on their hosts, and
	// -parallel (GOMAXPROCS, 2 here) would run two at a time.
	together := func(t *testing.T, n int, run func(t *testing.T, i int)) {
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() { defer wg.Done(); run(t, i) }()
		}
		wg.Wait()
	}
	t.Run("without an agent", func(t *testing.T) {
		together(t, len(specs), func(t *testing.T, i int) {
			t.Run(specs[i].name, func(t *testing.T) {
				r := newRun(t, i, specs[i])
				n := r.control(t)
				mu.Lock()
				results[i].without = n
				mu.Unlock()
				if n == 0 {
					t.Errorf("%s left nothing without an agent: the control proves nothing", r.name)
				}
			})
		})
	})
	a := agenttest.Start(t, agent.Options{
		Sessions: sessions.Config{DefaultRules: true}, // narrowed to this test's subtree by agenttest
		Enforcer: enforcer.Config{Mode: enforcer.ModeEnforce, Policy: enforcer.PolicyGraceful, Grace: time.Second}})
	t.Run("with the agent", func(t *testing.T) {
		// Runs of one host kind share its metrics: they go one after the
		// other, the kinds side by side.
		byKind := map[string][]int{}
		var kinds []string
		for i, s := range specs {
			if byKind[s.kind] == nil {
				kinds = append(kinds, s.kind)
			}
			byKind[s.kind] = append(byKind[s.kind], i)
		}
		together(t, len(kinds), func(t *testing.T, k int) {
			kind := kinds[k]
			t.Run(kind, func(t *testing.T) {
				for _, i := range byKind[kind] {
					t.Run(specs[i].name, func(t *testing.T) {
						r := newRun(t, 100+i, specs[i])
						var res result
						r.withAgent(t, a, &res)
						mu.Lock()
						res.without = results[i].without
						results[i] = res
						mu.Unlock()
					})
				}
			})
		})
	})
	var b strings.Builder
	b.WriteString("| host, how it ran offline | recognised | leftovers without / with the agent | roles in tree --session and /metrics |\n|---|---|---|---|\n")
	for i, s := range specs {
		r := results[i]
		yes := map[bool]string{true: "yes", false: "no"}
		rt := map[bool]string{true: "right", false: "wrong"}
		fmt.Fprintf(&b, "| %s | %s | %d / %d | %s %s |\n", s.name, yes[r.recognised], r.without, r.with, rt[r.right], r.note)
	}
	t.Logf("real hosts:\n%s", b.String())
}
