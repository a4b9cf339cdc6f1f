package sessions

import (
	"strings"
	"testing"

	"github.com/mcptrace/mcptrace/procmatch"
)

// img builds an image from a filename and an argv; comm is what the kernel
// derives from the filename unless given.
func img(filename, argv string) Image {
	base := filename[strings.LastIndexByte(filename, '/')+1:]
	return Image{Filename: filename, Comm: procmatch.TruncComm(base), Argv: strings.Fields(argv)}
}

// winImg builds a Windows image: the filename as Windows gives it, the
// argv as the command line splits, comm the filename's last component.
func winImg(filename string, argv ...string) Image {
	return Image{Filename: filename, Comm: filename[strings.LastIndexByte(filename, '\\')+1:], Argv: argv}
}

func TestDefaultRulesMatchHosts(t *testing.T) {
	tr, err := NewTracker(nil, Config{DefaultRules: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		im   Image
		want string
	}{
		// Claude Code.
		{"claude native via PATH symlink", img("/home/u/.local/bin/claude", "claude --dangerously-skip-permissions"), "claude"},
		{"claude native in /proc (exe resolved into versions)", Image{Filename: "/home/u/.local/share/claude/versions/2.0.14", Comm: "claude", Argv: []string{"claude"}}, "claude"},
		{"claude npm shim: first exec of the shebang script", img("/usr/local/bin/claude", "/usr/bin/env node /usr/local/bin/claude -p hello"), "claude"},
		{"claude npm shim: env execs node", img("/usr/bin/node", "node /usr/local/bin/claude -p hello"), "claude"},
		{"claude cli.js run by node directly", img("/usr/bin/node", "/usr/bin/node --no-warnings /usr/lib/node_modules/@anthropic-ai/claude-code/cli.js --output-format stream-json"), "claude"},
		{"claude node build after process.title in /proc", Image{Filename: "/usr/bin/node", Comm: "claude", Argv: []string{"claude"}}, "claude"},
		{"claude binary of the VS Code extension", img("/home/u/.vscode/extensions/anthropic.claude-code-2.0.14-linux-x64/resources/native-binary/claude", "/home/u/.vscode/extensions/anthropic.claude-code-2.0.14-linux-x64/resources/native-binary/claude --output-format stream-json --input-format stream-json"), "claude"},
		// Codex.
		{"codex npm shim", img("/usr/local/bin/codex", "/usr/bin/env node /usr/local/bin/codex"), "codex"},
		{"codex.js run by node", img("/usr/bin/node", "node /usr/lib/node_modules/@openai/codex/bin/codex.js exec fix-the-tests"), "codex"},
		{"codex native binary the wrapper spawns", img("/usr/lib/node_modules/@openai/codex/vendor/x86_64-unknown-linux-musl/codex/codex", "/usr/lib/node_modules/@openai/codex/vendor/x86_64-unknown-linux-musl/codex/codex"), "codex"},
		{"codex standalone exec", img("/usr/local/bin/codex", "codex exec --full-auto task"), "codex"},
		{"codex app-server of the IDE extension", img("/home/u/.vscode/extensions/openai.chatgpt-0.4.1-linux-x64/bin/linux-x86_64/codex", "/home/u/.vscode/extensions/openai.chatgpt-0.4.1-linux-x64/bin/linux-x86_64/codex app-server"), "codex"},
		// Copilot SDK server and Copilot CLI.
		{"copilot SDK server, downloaded binary", img("/home/u/.cache/github-copilot-sdk/cli/1.0.64/copilot", "/home/u/.cache/github-copilot-sdk/cli/1.0.64/copilot --headless --no-auto-update --log-level info --stdio"), "copilot-sdk"},
		{"copilot SDK server, node platform package", img("/usr/bin/node", "/usr/bin/node /app/node_modules/@github/copilot-linux-x64/index.js --headless --no-auto-update --port 4321"), "copilot-sdk"},
		{"copilot CLI npm shim", img("/usr/local/bin/copilot", "/usr/bin/env node /usr/local/bin/copilot --allow-all-tools"), "copilot"},
		{"copilot CLI loader run by node", img("/usr/bin/node", "node /usr/local/lib/node_modules/@github/copilot/npm-loader.js"), "copilot"},
		{"copilot CLI native", img("/home/u/.local/bin/copilot", "copilot -p fix-it --allow-all-tools"), "copilot"},
		// Cursor.
		{"cursor-agent launcher script", img("/home/u/.local/bin/cursor-agent", "/usr/bin/env bash /home/u/.local/bin/cursor-agent"), "cursor-agent"},
		{"cursor-agent bundled node on index.js", img("/home/u/.local/share/cursor-agent/versions/2025.09.18-7ae6800/node", "/home/u/.local/share/cursor-agent/versions/2025.09.18-7ae6800/node --use-system-ca /home/u/.local/share/cursor-agent/versions/2025.09.18-7ae6800/index.js -p hi"), "cursor-agent"},
		{"cursor extension host (utility process)", img("/usr/share/cursor/cursor", "/usr/share/cursor/cursor --type=utility --utility-sub-type=node.mojom.NodeService --lang=en-US --service-sandbox-type=none --dns-result-order=ipv4first --vscode-utility-kind=extensionHost --user-data-dir=/home/u/.config/Cursor"), "cursor"},
		{"cursor remote extension host", img("/home/u/.cursor-server/bin/0f3e2d/node", "/home/u/.cursor-server/bin/0f3e2d/node /home/u/.cursor-server/bin/0f3e2d/out/bootstrap-fork --type=extensionHost --transformURIs --useHostProxy=false"), "cursor"},
		// VS Code.
		{"vscode desktop extension host (utility process)", img("/usr/share/code/code", "/usr/share/code/code --type=utility --utility-sub-type=node.mojom.NodeService --lang=en-US --service-sandbox-type=none --dns-result-order=ipv4first --inspect-port=0 --vscode-utility-kind=extensionHost --crashpad-handler-pid=2211"), "vscode"},
		{"vscode desktop extension host (forked node)", img("/usr/share/code/code", "/usr/share/code/code --ms-enable-electron-run-as-node --inspect-port=0 /usr/share/code/resources/app/out/bootstrap-fork --type=extensionHost --skipWorkspaceStorageLock"), "vscode"},
		{"vscode server extension host", img("/home/u/.vscode-server/bin/e170252f/node", "/home/u/.vscode-server/bin/e170252f/node /home/u/.vscode-server/bin/e170252f/out/bootstrap-fork --type=extensionHost --transformURIs --useHostProxy=false"), "vscode"},
		// goose.
		{"goose bare", img("/usr/local/bin/goose", "goose"), "goose"},
		{"goose session", img("/usr/local/bin/goose", "goose session --resume"), "goose"},
		{"goose run", img("/home/u/.local/bin/goose", "/home/u/.local/bin/goose run -t summarize"), "goose"},
		{"goosed agent of the desktop app", img("/usr/lib/goose/resources/bin/goosed", "/usr/lib/goose/resources/bin/goosed agent"), "goosed"},
		// OpenClaw.
		{"openclaw gateway foreground via shim", img("/usr/local/bin/openclaw", "/usr/bin/env node /usr/local/bin/openclaw gateway --port 18789"), "openclaw"},
		{"openclaw gateway run", img("/usr/local/bin/openclaw", "openclaw gateway run --bind loopback"), "openclaw"},
		{"openclaw gateway systemd service", img("/usr/bin/node", "/usr/bin/node /home/u/.npm-global/lib/node_modules/openclaw/dist/index.js gateway --port 18789"), "openclaw"},
		{"openclaw gateway after process.title in /proc", Image{Filename: "/usr/bin/node", Comm: "openclaw-gatewa", Argv: []string{"openclaw-gateway"}}, "openclaw"},
		// Windows: the same rules read Windows names (procmatch/windows.go).
		{"windows claude.exe native", winImg(`C:\Users\u\.local\bin\claude.exe`, `C:\Users\u\.local\bin\claude.exe`, "--dangerously-skip-permissions"), "claude"},
		{"windows claude.exe in capitals", winImg(`C:\Tools\Claude.EXE`, "Claude"), "claude"},
		{"windows claude cli.js under Program Files node", winImg(`C:\Program Files\nodejs\node.exe`, `C:\Program Files\nodejs\node.exe`, `C:\Users\u\AppData\Roaming\npm\node_modules\@anthropic-ai\claude-code\cli.js`, "-p", "hi"), "claude"},
		{"windows claude from an ETW start (NT path, command line unread)", Image{Filename: `\Device\HarddiskVolume3\Users\u\.local\bin\claude.exe`, Comm: "claude.exe"}, "claude"},
		{"windows codex app-server of the npm package", winImg(`C:\Users\u\AppData\Roaming\npm\node_modules\@openai\codex\vendor\x86_64-pc-windows-msvc\codex\codex.exe`, `C:\Users\u\AppData\Roaming\npm\node_modules\@openai\codex\vendor\x86_64-pc-windows-msvc\codex\codex.exe`, "app-server"), "codex"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := tr.MatchRule(tt.im)
			if !ok || got != tt.want {
				t.Errorf("MatchRule(%q, %q) = %q, %v; want %q", tt.im.Filename, strings.Join(tt.im.Argv, " "), got, ok, tt.want)
			}
		})
	}
}

func TestDefaultRulesIgnoreServersToolsAndLaunchers(t *testing.T) {
	tr, err := NewTracker(nil, Config{DefaultRules: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		im   Image
	}{
		// MCP servers and their wrappers.
		{"npx server-filesystem", img("/usr/bin/npx", "npx -y @modelcontextprotocol/server-filesystem /tmp")},
		{"npx shebang exec", img("/usr/bin/npx", "/usr/bin/env node /usr/bin/npx -y @modelcontextprotocol/server-filesystem /tmp")},
		{"npm exec", img("/usr/bin/node", "npm exec @modelcontextprotocol/server-filesystem /tmp")},
		{"sh -c wrapper", img("/bin/sh", "sh -c mcp-server-filesystem /tmp")},
		{"node server-github", img("/usr/bin/node", "node /home/u/.npm/_npx/5c8d/node_modules/@modelcontextprotocol/server-github/dist/index.js")},
		{"uvx mcp-server-fetch", img("/home/u/.local/bin/uvx", "uvx mcp-server-fetch")},
		{"python mcp-server-fetch", img("/home/u/.cache/uv/archive-v0/x/bin/python", "/home/u/.cache/uv/archive-v0/x/bin/python /home/u/.cache/uv/archive-v0/x/bin/mcp-server-fetch")},
		{"docker github-mcp-server", img("/usr/bin/docker", "docker run -i --rm -e GITHUB_PERSONAL_ACCESS_TOKEN ghcr.io/github/github-mcp-server")},
		{"github-mcp-server binary", img("/home/u/.local/bin/github-mcp-server", "github-mcp-server stdio --toolsets actions,issues")},
		// Hosts in their MCP-server modes.
		{"claude mcp serve", img("/home/u/.local/bin/claude", "claude mcp serve")},
		{"claude cli.js mcp serve", img("/usr/bin/node", "node /usr/lib/node_modules/@anthropic-ai/claude-code/cli.js mcp serve")},
		{"codex mcp-server", img("/usr/local/bin/codex", "codex mcp-server")},
		{"codex shim mcp-server", img("/usr/local/bin/codex", "/usr/bin/env node /usr/local/bin/codex mcp-server")},
		{"codex early mcp", img("/usr/local/bin/codex", "codex mcp")},
		{"goose builtin mcp", img("/usr/local/bin/goose", "goose mcp developer")},
		{"goosed builtin mcp", img("/usr/lib/goose/resources/bin/goosed", "/usr/lib/goose/resources/bin/goosed mcp developer")},
		// Helpers of hosts.
		{"codex linux sandbox", img("/tmp/.codex-arg0/codex-linux-sandbox", "codex-linux-sandbox --sandbox-policy-cwd /w -- bash -lc ls")},
		{"vscode pty host", img("/usr/share/code/code", "/usr/share/code/code --type=utility --utility-sub-type=node.mojom.NodeService --vscode-utility-kind=ptyHost")},
		{"vscode renderer", img("/usr/share/code/code", "/usr/share/code/code --type=renderer --vscode-window-config=vscode:abc")},
		// Launchers that start an application and exit.
		{"code launcher", img("/usr/bin/code", "code .")},
		{"vscode main process", img("/usr/share/code/code", "/usr/share/code/code .")},
		{"cursor launcher", img("/usr/bin/cursor", "cursor .")},
		{"openclaw gateway start", img("/usr/local/bin/openclaw", "openclaw gateway start")},
		{"openclaw gateway status", img("/usr/local/bin/openclaw", "/usr/bin/env node /usr/local/bin/openclaw gateway status")},
		// Namesakes.
		{"pressly goose migration", img("/usr/local/bin/goose", "goose postgres user=app up")},
		{"pressly goose with env driver", img("/home/u/go/bin/goose", "goose up")},
		{"aws copilot", img("/usr/local/bin/copilot", "copilot svc deploy --name api")},
		// Tools naming a host in an argument.
		{"grep", img("/usr/bin/grep", "grep -r claude .")},
		{"editor on the shim", img("/usr/bin/vim", "vim /usr/local/bin/claude")},
		{"cat cli.js", img("/usr/bin/cat", "cat /usr/lib/node_modules/@anthropic-ai/claude-code/cli.js")},
		{"pkill", img("/usr/bin/pkill", "pkill -f codex")},
		{"less on notes", img("/usr/bin/less", "less codex.md")},
		{"shell running a host", img("/bin/bash", "bash -c claude -p hi")},
		// mcptrace itself, whatever it runs.
		{"mcptrace run", img("/usr/local/bin/mcptrace", "mcptrace run --session s1 -- claude")},
		{"mcptrace exec", img("/usr/local/bin/mcptrace", "mcptrace exec --session a -- codex")},
		{"mcptrace agent", img("/usr/local/bin/mcptrace", "/usr/local/bin/mcptrace agent")},
		{"mcptrace renamed argv0", img("/usr/local/bin/mcptrace", "claude")},
		// Windows.
		{"windows codex.exe mcp-server", winImg(`C:\Users\u\bin\codex.exe`, "codex.exe", "mcp-server")},
		{"windows claude.exe mcp serve", winImg(`C:\Users\u\.local\bin\claude.exe`, `C:\Users\u\.local\bin\claude.exe`, "mcp", "serve")},
		{"windows cmd /c npx server", winImg(`C:\Windows\System32\cmd.exe`, "cmd.exe", "/c", "npx", "-y", "@modelcontextprotocol/server-filesystem", `C:\tmp`)},
		{"windows npx.cmd server", winImg(`C:\Program Files\nodejs\npx.cmd`, `C:\Program Files\nodejs\npx.cmd`, "-y", "@modelcontextprotocol/server-github")},
		{"windows mcptrace.exe run", winImg(`C:\Tools\mcptrace.exe`, "mcptrace.exe", "run", "--", "claude")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got, ok := tr.MatchRule(tt.im); ok {
				t.Errorf("MatchRule(%q, %q) = %q, want no match", tt.im.Filename, strings.Join(tt.im.Argv, " "), got)
			}
		})
	}
}

func TestRulesAreOffUnlessAsked(t *testing.T) {
	claude := img("/home/u/.local/bin/claude", "claude")
	mine := Rule{Name: "test-host", Argv: []string{`^\S*/test-host(?: |$)`}}
	tests := []struct {
		name string
		cfg  Config
		im   Image
		want string
	}{
		{"zero config matches nothing", Config{}, claude, ""},
		{"own rules only", Config{Rules: []Rule{mine}}, claude, ""},
		{"own rule matches", Config{Rules: []Rule{mine}}, img("/tmp/x/test-host", "/tmp/x/test-host --serve"), "test-host"},
		{"defaults on", Config{DefaultRules: true}, claude, "claude"},
		{"defaults before own rules", Config{DefaultRules: true, Rules: []Rule{{Name: "mine", Exe: []string{"claude"}}}}, claude, "claude"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr, err := NewTracker(nil, tt.cfg, nil)
			if err != nil {
				t.Fatal(err)
			}
			if got, _ := tr.MatchRule(tt.im); got != tt.want {
				t.Errorf("MatchRule = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestInvalidRulesAreRejected(t *testing.T) {
	tests := []struct {
		name string
		rule Rule
	}{
		{"no name", Rule{Exe: []string{"x"}}},
		{"name with spaces", Rule{Name: "my host", Exe: []string{"x"}}},
		{"no pattern", Rule{Name: "x"}},
		{"bad glob", Rule{Name: "x", Exe: []string{"[x"}}},
		{"bad argv regexp", Rule{Name: "x", Argv: []string{"("}}},
		{"bad not regexp", Rule{Name: "x", Exe: []string{"x"}, Not: []string{"["}}},
		{"empty comm", Rule{Name: "x", Comm: []string{""}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := CompileRules([]Rule{tt.rule}); err == nil {
				t.Error("CompileRules accepted it")
			}
			if _, err := NewTracker(nil, Config{Rules: []Rule{tt.rule}}, nil); err == nil {
				t.Error("NewTracker accepted it")
			}
		})
	}
	if err := CompileRules(DefaultRules()); err != nil {
		t.Errorf("DefaultRules: %v", err)
	}
}

// The agent reads mcptrace command lines as the CLI does: a line the CLI
// would refuse is neither a tag nor a marker.
func TestParseCommand(t *testing.T) {
	tests := []struct {
		argv string
		want command
	}{
		{"mcptrace run --session s1 -- node host.js", command{kind: cmdRun, id: "s1"}},
		{"/usr/local/bin/mcptrace run --session=s1 -- node host.js", command{kind: cmdRun, id: "s1"}},
		{"mcptrace run -- node host.js --session x", command{kind: cmdRun}},
		{"mcptrace run --config /etc/c.yaml --session s1 -- node", command{kind: cmdRun, id: "s1"}},
		{"mcptrace run --session= -- node", command{kind: cmdRun}},
		{"mcptrace exec --session a -- node server.js", command{kind: cmdExec, id: "a"}},
		{"mcptrace exec --session", command{kind: cmdExec, bad: true, idLast: true}},
		{"mcptrace exec --session= -- x", command{kind: cmdExec, bad: true}},
		{"mcptrace exec -- x", command{kind: cmdExec, bad: true}},
		{"mcptrace mark destroy", command{kind: cmdMark}},
		{"mcptrace mark destroy --session b", command{kind: cmdMark, id: "b", idLast: true}},
		{"mcptrace mark destroy --session=b", command{kind: cmdMark, id: "b", idLast: true}},
		{"mcptrace mark destroy --config /etc/c.yaml --session foo", command{kind: cmdMark, id: "foo", idLast: true}},
		{"mcptrace mark destroy --api.socket /x --kernel-only --session foo --", command{kind: cmdMark, id: "foo"}},
		{"mcptrace mark destroy --kernel-only=true", command{kind: cmdMark}},
		{"mcptrace mark", command{kind: cmdOther}},
		{"mcptrace agent --log-level debug", command{kind: cmdOther}},
		{"mcptrace --socket /x run -- y", command{kind: cmdOther}},
		{"mcptrace.test run --session s1", command{}},
		{"node mcptrace run --session s1", command{}},
		// What the CLI refuses is nothing.
		{"mcptrace run node host.js", command{kind: cmdOther}},
		{"mcptrace run --session s1", command{kind: cmdOther}},
		{"mcptrace run --verbose --session s1 -- node", command{kind: cmdOther}},
		{"mcptrace run --help", command{kind: cmdOther}},
		{"mcptrace run -h -- x", command{kind: cmdOther}},
		{"mcptrace mark destroy extra", command{kind: cmdOther}},
		{"mcptrace mark destroy -- extra", command{kind: cmdOther}},
		{"mcptrace mark destroy --config", command{kind: cmdOther}},
		{"mcptrace mark destroy --bogus --session b", command{kind: cmdOther}},
		// Flags before the subcommand's name, as cobra takes them.
		{"mcptrace --config /etc/c.yaml run --session s1 -- node", command{kind: cmdRun, id: "s1"}},
		{"mcptrace --config=/etc/c.yaml run --session s1 -- node", command{kind: cmdRun, id: "s1"}},
		{"mcptrace --session s1 run -- node", command{kind: cmdRun, id: "s1"}},
		{"mcptrace --config /c.yaml exec --session a -- node", command{kind: cmdExec, id: "a"}},
		{"mcptrace mark --session b destroy", command{kind: cmdMark, id: "b"}},
		{"mcptrace --config /c.yaml mark destroy --session b", command{kind: cmdMark, id: "b", idLast: true}},
		{"mcptrace run --api.socket /x --session s1 -- node", command{kind: cmdRun, id: "s1"}},
		{"mcptrace --config run run --session s1 -- node", command{kind: cmdRun, id: "s1"}},
		{"mcptrace -c run --session s1 -- node", command{kind: cmdOther}},
		{"mcptrace -- run --session s1 -- node", command{kind: cmdOther}},
		{"mcptrace help run", command{kind: cmdOther}},
		{"mcptrace mark destroy --kernel-only=maybe", command{kind: cmdOther}},
		{"mcptrace mark destroy --kernel-only=0 --session b", command{kind: cmdMark, id: "b", idLast: true}},
	}
	t.Run("an argv the kernel cut is read as far as it goes", func(t *testing.T) {
		for argv, want := range map[string]command{
			"mcptrace run --session tak":  {kind: cmdRun, id: "tak", idLast: true},
			"mcptrace exec --session a":   {kind: cmdExec, id: "a", idLast: true},
			"mcptrace run --config":       {kind: cmdRun},
			"mcptrace mark destroy --ses": {kind: cmdOther},
		} {
			if got := parseCommand(strings.Fields(argv), true); got != want {
				t.Errorf("%s: parseCommand = %+v, want %+v", argv, got, want)
			}
		}
	})
	for _, tt := range tests {
		t.Run(tt.argv, func(t *testing.T) {
			if got := parseCommand(strings.Fields(tt.argv), false); got != tt.want {
				t.Errorf("parseCommand = %+v, want %+v", got, tt.want)
			}
		})
	}
}
