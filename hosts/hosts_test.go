package hosts

import (
	"strings"
	"testing"

	"github.com/mcptrace/mcptrace/lineage"
	"github.com/mcptrace/mcptrace/procmatch"
	"github.com/mcptrace/mcptrace/roles"
)

// img is an image as the kernel reports it at exec: the path given to
// execve, and argv split on spaces.
func img(filename, argv string) procmatch.Image {
	base := filename[strings.LastIndexByte(filename, '/')+1:]
	return procmatch.Image{Filename: filename, Comm: procmatch.TruncComm(base), Argv: strings.Fields(argv)}
}

func firstRule(t *testing.T, im procmatch.Image) string {
	t.Helper()
	ms, err := procmatch.CompileAll(Rules(), procmatch.Any)
	if err != nil {
		t.Fatal(err)
	}
	if m := procmatch.First(ms, im); m != nil {
		return m.Rule().Name
	}
	return ""
}

// Each host's process, with argv recorded from the real program (run
// here from npm: the host file says which version) or shown in its
// documentation (hosts that do not install here).
func TestRulesRecogniseEveryHostAsItRuns(t *testing.T) {
	const nm = "/home/u/work/node_modules"
	tests := []struct {
		name string
		im   procmatch.Image
		want string
	}{
		// Recorded.
		{"claude 2.1 npm native", img(nm+"/.bin/claude", nm+"/.bin/claude -p hello"), "claude"},
		{"codex npm launcher", img("/usr/bin/node", "node "+nm+"/.bin/codex exec --skip-git-repo-check hello"), "codex"},
		{"codex native child", img(nm+"/@openai/codex-linux-x64/vendor/x86_64-unknown-linux-musl/bin/codex", nm+"/@openai/codex-linux-x64/vendor/x86_64-unknown-linux-musl/bin/codex exec --skip-git-repo-check hello"), "codex"},
		{"copilot npm loader", img("/usr/bin/node", "node "+nm+"/.bin/copilot --allow-all-tools"), "copilot"},
		{"copilot native child", img(nm+"/@github/copilot-linux-x64/copilot", nm+"/@github/copilot-linux-x64/copilot --allow-all-tools"), "copilot"},
		{"gemini launcher", img("/usr/bin/node", "node "+nm+"/.bin/gemini mcp list"), "gemini"},
		{"gemini relaunched with a larger heap", img("/usr/bin/node", "/usr/bin/node --max-old-space-size=12052 "+nm+"/.bin/gemini mcp list"), "gemini"},
		{"gemini bundle by path", img("/usr/bin/node", "node /usr/lib/node_modules/@google/gemini-cli/bundle/gemini.js"), "gemini"},
		{"qwen launcher", img("/usr/bin/node", "node "+nm+"/.bin/qwen mcp list"), "qwen"},
		{"qwen cli-entry by path", img("/usr/bin/node", "node /usr/lib/node_modules/@qwen-code/qwen-code/cli-entry.js"), "qwen"},
		{"inspector --cli", img("/usr/bin/node", "node "+nm+"/.bin/mcp-inspector --cli npx --prefix /x --no-install some-server --method tools/list"), "mcp-inspector"},
		{"inspector --cli, shebang exec", img(nm+"/.bin/mcp-inspector", "/usr/bin/env node "+nm+"/.bin/mcp-inspector --cli node build/index.js --method tools/list"), "mcp-inspector"},
		{"inspector launcher by path", img("/usr/bin/node", "node "+nm+"/@modelcontextprotocol/inspector/clients/launcher/build/index.js --cli node s.js"), "mcp-inspector"},
		{"opencode native", img(nm+"/.bin/opencode", nm+"/.bin/opencode mcp list"), "opencode"},
		{"opencode run", img("/home/u/.opencode/bin/opencode", "opencode run fix-it"), "opencode"},
		{"amp native -x", img(nm+"/.bin/amp", nm+"/.bin/amp -x say-hi"), "amp"},
		{"amp interactive", img("/home/u/.local/bin/amp", "amp"), "amp"},
		{"cline prompt", img(nm+"/.bin/cline", nm+"/.bin/cline -P openai -k sk-x say-hi"), "cline"},
		{"cline hub daemon", img(nm+"/@cline/cli-linux-x64/bin/cline", nm+"/@cline/cli-linux-x64/bin/cline --cline-hub-daemon --cwd /w --host 127.0.0.1 --port 25463 --pathname /hub"), "cline"},
		// Documented.
		{"crush interactive", img("/usr/local/bin/crush", "crush"), "crush"},
		{"crush run", img("/home/u/go/bin/crush", "crush run explain-this"), "crush"},
		{"kiro bare", img("/home/u/.local/bin/kiro-cli", "kiro-cli"), "kiro"},
		{"kiro chat", img("/home/u/.local/bin/kiro-cli", "kiro-cli chat --trust-all-tools"), "kiro"},
		{"kiro agent option", img("/home/u/.local/bin/kiro-cli", "kiro-cli --agent myagent"), "kiro"},
		{"kiro chat binary", img("/home/u/.local/bin/kiro-cli-chat", "kiro-cli-chat chat"), "kiro"},
		{"goose session", img("/usr/local/bin/goose", "goose session"), "goose"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := firstRule(t, tt.im); got != tt.want {
				t.Errorf("%q: rule %q, want %q", strings.Join(tt.im.Argv, " "), got, tt.want)
			}
		})
	}
}

// What hosts run that is not a host: their management commands, their
// MCP-server modes, the Inspector's web proxy, and namesakes.
func TestRulesLeaveWhatIsNoHost(t *testing.T) {
	const nm = "/home/u/work/node_modules"
	for _, im := range []procmatch.Image{
		img("/usr/bin/node", "node "+nm+"/.bin/mcp-inspector"),
		img("/usr/bin/node", "node "+nm+"/.bin/mcp-inspector --web"),
		img("/usr/bin/npx", "npx @modelcontextprotocol/inspector --cli node build/index.js"),
		img(nm+"/.bin/amp", "amp login"),
		img(nm+"/.bin/amp", "amp mcp list"),
		img(nm+"/.bin/cline", "cline auth"),
		img(nm+"/.bin/cline", "cline mcp add x --yes -- npx y"),
		img("/usr/local/bin/crush", "crush logs"),
		img("/home/u/.local/bin/kiro-cli", "kiro-cli login"),
		img("/home/u/.local/bin/kiro-cli", "kiro-cli mcp list"),
		img("/usr/bin/grep", "grep -r gemini ."),
		img("/usr/bin/vim", "vim opencode.json"),
	} {
		if got := firstRule(t, im); got != "" {
			t.Errorf("%q: rule %q, want none", strings.Join(im.Argv, " "), got)
		}
	}
}

func TestEveryHostIsNamedOnceAndSaysHowItWasVerified(t *testing.T) {
	seen := map[string]bool{}
	for _, h := range Defaults() {
		if seen[h.Rule.Name] {
			t.Errorf("host %q twice", h.Rule.Name)
		}
		seen[h.Rule.Name] = true
		if h.Verified != "run" && h.Verified != "docs" {
			t.Errorf("host %q: Verified %q", h.Rule.Name, h.Verified)
		}
		if _, err := procmatch.CompileAll(append(append([]procmatch.Rule{h.Rule}, h.Self...), h.Tools...), procmatch.Any); err != nil {
			t.Errorf("host %q: %v", h.Rule.Name, err)
		}
	}
}

// proc is one process of a recorded tree: pid, creator, stdio at exec
// ("pipe", "socket", "null" for /dev/null, "" unrecorded), how long it
// lived in ms (0: alive) and its argv; fork: no exec of its own.
type proc struct {
	pid, creator uint32
	stdio        string
	livedMS      uint64
	fork         bool
	argv         string
}

func tree(ps []proc) []lineage.Process {
	out := make([]lineage.Process, len(ps))
	argvOf := map[uint32]string{}
	for i, p := range ps {
		argv := p.argv
		src := lineage.SourceKernel
		if p.fork {
			argv, src = argvOf[p.creator], lineage.SourceInherited
		}
		argvOf[p.pid] = argv
		words := strings.Fields(argv)
		im := lineage.Image{Filename: words[0], Argv: words, Source: src}
		switch p.stdio {
		case "pipe":
			im.Stdio = lineage.Stdio{In: lineage.FilePipe, Out: lineage.FilePipe}
		case "socket":
			im.Stdio = lineage.Stdio{In: lineage.FileSocket, Out: lineage.FileSocket}
		case "null":
			im.Stdio = lineage.Stdio{In: lineage.FileChar, Out: lineage.FilePipe}
		}
		start := uint64(p.pid) * 1_000_000_000
		out[i] = lineage.Process{ID: lineage.ID{PID: p.pid, Start: start}, Comm: procmatch.TruncComm(words[0][strings.LastIndexByte(words[0], '/')+1:]), Images: []lineage.Image{im}}
		if p.creator != 0 {
			out[i].Creator = lineage.ID{PID: p.creator, Start: uint64(p.creator) * 1_000_000_000}
		}
		if p.livedMS > 0 {
			out[i].Exited, out[i].ExitTime = true, start+p.livedMS*1_000_000
		}
	}
	return out
}

// want is what each pid of a tree is: a role, and for a server its name.
type want map[uint32]string

func checkTree(t *testing.T, host string, ps []proc, w want) {
	t.Helper()
	procs := tree(ps)
	ms := roles.ClassifyHost(procs[0].ID, Table(host, nil), procs)
	for i, m := range ms {
		exp, ok := w[procs[i].ID.PID]
		if !ok {
			continue
		}
		got := m.Role.String()
		if m.Role == roles.Server {
			got += " " + m.Server
		}
		if got != exp {
			t.Errorf("%s: pid %d (%s): %q, want %q", host, procs[i].ID.PID, strings.Join(procs[i].Current().Argv, " "), got, exp)
		}
	}
}

const (
	nm      = "/tmp/h/node_modules"
	mcphost = "/w/e2e/testdata/mcphost"
	fsName  = "server @modelcontextprotocol/server-filesystem"
	stub    = "server mcptrace-e2e-stubborn-server"
)

// The two servers every recorded host started: a launcher that leaves a
// setsid'd sleep behind and execs npx for the filesystem server, and the
// stubborn server through npx.
func servers(host uint32, stdio string) []proc {
	b := host * 100
	return []proc{
		{b + 1, host, stdio, 0, false, "/bin/sh /tmp/bin/leaky-launch"},
		{b + 2, b + 1, "null", 0, false, "sleep 3607"},
		{b + 3, b + 1, stdio, 0, true, ""},
		{b + 4, b + 3, stdio, 0, false, "sh -c mcp-server-filesystem /tmp"},
		{b + 5, b + 4, stdio, 0, false, "node " + mcphost + "/node_modules/.bin/mcp-server-filesystem /tmp"},
		{b + 6, host, stdio, 0, false, "/usr/bin/env node /usr/bin/npx --prefix " + mcphost + " --no-install mcptrace-e2e-stubborn-server --h32=x"},
		{b + 7, b + 6, stdio, 0, false, "sh -c mcptrace-e2e-stubborn-server --h32=x"},
		{b + 8, b + 7, stdio, 0, false, "node " + mcphost + "/node_modules/.bin/mcptrace-e2e-stubborn-server --h32=x"},
	}
}

// fixLauncher makes the launcher's process exec npx after its fork, as
// the real one does (`exec npx …` in the script).
func fixLauncher(ps []proc, host uint32) []proc {
	b := host * 100
	for i := range ps {
		if ps[i].pid == b+1 {
			ps[i].argv = "/usr/bin/env node /usr/bin/npx --no-install @modelcontextprotocol/server-filesystem /tmp"
		}
		if ps[i].pid == b+3 {
			ps[i] = proc{b + 3, b + 1, ps[i].stdio, 0, false, "npm exec @modelcontextprotocol/server-filesystem /tmp"}
		}
	}
	return ps
}

func serverWants(host uint32) want {
	b := host * 100
	return want{b + 1: "wrapper", b + 2: "other", b + 5: fsName, b + 6: "wrapper", b + 8: stub}
}

func merge(ws ...want) want {
	out := want{}
	for _, w := range ws {
		for k, v := range w {
			out[k] = v
		}
	}
	return out
}

// Trees recorded from the real hosts (pids renumbered, paths shortened):
// the host's native child is the host, its own commands are tools, the
// launcher's helper is no server, and the two servers are named by their
// packages.
func TestTablesReadEachRecordedHostTreeRight(t *testing.T) {
	t.Run("codex", func(t *testing.T) {
		ps := []proc{
			{1, 0, "", 0, false, "node " + nm + "/.bin/codex exec --skip-git-repo-check hello"},
			{2, 1, "", 0, false, nm + "/@openai/codex-linux-x64/vendor/x86_64-unknown-linux-musl/bin/codex exec --skip-git-repo-check hello"},
			{3, 2, "null", 270, false, "/bin/sh /usr/bin/lsb_release -a"},
			{4, 3, "null", 20, false, "getopt --name lsb_release -o hvidrcas -- -a"},
			{5, 3, "null", 30, true, ""},
			{6, 5, "pipe", 10, false, "tr [:upper:] [:lower:]"},
			{7, 2, "null", 20, false, "getconf LONG_BIT"},
			{8, 2, "null", 840, false, "/bin/bash -lc if [ -z ${BASH_ENV-} ]; then . ~/.bashrc; fi"},
			{9, 8, "null", 10, false, "id -u"},
			{10, 2, "null", 600, false, "/usr/bin/git -c safe.bareRepository=explicit ls-remote https://github.com/openai/plugins.git"},
			{11, 2, "pipe", 0, true, ""},
			{12, 2, "null", 790, false, "/bin/bash -c set -e; . /h/.codex/shell_snapshots/x.sh"},
		}
		ps = append(ps, fixLauncher(servers(2, "pipe"), 2)...)
		checkTree(t, "codex", ps, merge(want{1: "host", 2: "host", 3: "tool", 4: "tool", 5: "tool", 6: "tool", 7: "tool", 8: "tool", 9: "tool", 10: "tool", 11: "host", 12: "tool"}, serverWants(2)))
	})
	t.Run("copilot", func(t *testing.T) {
		ps := []proc{
			{1, 0, "", 0, false, "node " + nm + "/.bin/copilot --allow-all-tools"},
			{2, 1, "", 0, false, nm + "/@github/copilot-linux-x64/copilot --allow-all-tools"},
			{3, 2, "null", 1600, false, nm + "/@github/copilot-linux-x64/copilot --binary-version"},
			{4, 2, "", 5, true, ""},
			{5, 2, "", 7, true, ""},
			{6, 2, "socket", 4, false, "tmux list-clients -t %0 -F #{client_termname}"},
			{7, 2, "null", 30, false, "git --no-optional-locks -c core.fsmonitor=false rev-parse --show-toplevel"},
			{8, 2, "null", 30, false, "pgrep -P 2"},
			{9, 2, "", 0, true, ""},
		}
		ps = append(ps, fixLauncher(servers(2, "pipe"), 2)...)
		checkTree(t, "copilot", ps, merge(want{1: "host", 2: "host", 3: "host", 4: "host", 5: "host", 6: "tool", 7: "tool", 8: "tool", 9: "host"}, serverWants(2)))
	})
	t.Run("claude", func(t *testing.T) {
		ps := []proc{
			{1, 0, "", 0, false, nm + "/.bin/claude -p hello"},
			{2, 1, "socket", 20, false, "/usr/bin/git -c core.askPass= -c protocol.ext.allow=never status --porcelain"},
			{3, 1, "socket", 0, false, "/usr/bin/git -c core.askPass= log -n 5"}, // alive while sampled
			{4, 1, "socket", 40, false, "rg --files --hidden"},
			{5, 1, "", 3000, true, ""},
			{6, 1, "", 0, false, "/tmp/bin/mcptrace mark destroy"},
		}
		ps = append(ps, fixLauncher(servers(1, "socket"), 1)...)
		checkTree(t, "claude", ps, merge(want{1: "host", 2: "tool", 3: "tool", 4: "tool", 5: "host", 6: "tool"}, serverWants(1)))
	})
	t.Run("gemini", func(t *testing.T) {
		ps := []proc{
			{1, 0, "", 0, false, "node " + nm + "/.bin/gemini mcp list"},
			{2, 1, "", 0, false, "/usr/bin/node --max-old-space-size=12052 " + nm + "/.bin/gemini mcp list"},
			{3, 2, "socket", 40, false, "git rev-parse --show-toplevel"},
		}
		ps = append(ps, fixLauncher(servers(2, "socket"), 2)...)
		checkTree(t, "gemini", ps, merge(want{1: "host", 2: "host", 3: "tool"}, serverWants(2)))
	})
	t.Run("opencode", func(t *testing.T) {
		ps := []proc{
			{1, 0, "", 0, false, nm + "/.bin/opencode mcp list"},
			{2, 1, "null", 50, false, "pgrep -P 207"},
		}
		ps = append(ps, fixLauncher(servers(1, "socket"), 1)...)
		checkTree(t, "opencode", ps, merge(want{1: "host", 2: "tool"}, serverWants(1)))
	})
	t.Run("cline", func(t *testing.T) {
		ps := []proc{
			{1, 0, "", 0, false, nm + "/.bin/cline -P openai -k sk-x say-hi"},
			{2, 1, "socket", 60, false, "/bin/sh -c ( cat /var/lib/dbus/machine-id /etc/machine-id 2> /dev/null || hostname ) | head -n 1 || :"},
			{3, 2, "pipe", 20, false, "head -n 1"},
			{4, 1, "socket", 30, false, "git rev-parse --is-inside-work-tree"},
			{5, 1, "null", 0, false, nm + "/@cline/cli-linux-x64/bin/cline --cline-hub-daemon --cwd /w --port 1"},
		}
		ps = append(ps, fixLauncher(servers(1, "socket"), 1)...)
		checkTree(t, "cline", ps, merge(want{1: "host", 2: "tool", 3: "tool", 4: "tool", 5: "host"}, serverWants(1)))
	})
	t.Run("inspector", func(t *testing.T) {
		ps := []proc{
			{1, 0, "", 0, false, "node " + nm + "/.bin/mcp-inspector --cli npx --prefix " + mcphost + " --no-install mcptrace-e2e-stubborn-server --method tools/list"},
			{2, 1, "socket", 0, false, "/usr/bin/env node /usr/bin/npx --prefix " + mcphost + " --no-install mcptrace-e2e-stubborn-server"},
			{3, 2, "socket", 0, false, "sh -c mcptrace-e2e-stubborn-server"},
			{4, 3, "socket", 0, false, "node " + mcphost + "/node_modules/.bin/mcptrace-e2e-stubborn-server"},
		}
		checkTree(t, "mcp-inspector", ps, want{1: "host", 2: "wrapper", 4: stub})
	})
}

// A session begun otherwise than by a rule (`mcptrace run -- codex`)
// reads its host's table by the root's image; a shell the user runs in
// `mcptrace run` starts no server when its commands read a terminal.
func TestTableFallsBackToTheRootsImage(t *testing.T) {
	ps := []proc{
		{1, 0, "", 0, false, "node " + nm + "/.bin/codex exec hello"},
		{2, 1, "", 0, false, nm + "/@openai/codex-linux-x64/vendor/x86_64-unknown-linux-musl/bin/codex exec hello"},
	}
	procs := tree(ps)
	ms := roles.ClassifyHost(procs[0].ID, Table("run", &procs[0]), procs)
	if ms[1].Role != roles.Host {
		t.Errorf("codex's native child under `mcptrace run`: %v, want host", ms[1].Role)
	}
	shell := tree([]proc{
		{1, 0, "", 0, false, "bash"},
		{2, 1, "", 0, false, "sh -c sleep 40"},
		{3, 2, "", 0, false, "sleep 40"},
	})
	tty := lineage.Stdio{In: lineage.FileChar, Out: lineage.FileChar}
	shell[1].Images[0].Stdio, shell[2].Images[0].Stdio = tty, tty
	for i, m := range roles.ClassifyHost(shell[0].ID, Table("run", &shell[0]), shell) {
		if m.Role == roles.Server || m.Role == roles.Wrapper {
			t.Errorf("%s on a terminal is a %v", shell[i].Current().Argv, m.Role)
		}
	}
}
