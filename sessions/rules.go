package sessions

import (
	"errors"
	"fmt"
	"regexp"

	"github.com/mcptrace/mcptrace/procmatch"
)

// Rule recognises the process of an agent host by the image it executes.
// It is procmatch's rule, compiled with procmatch.Any: a rule matches a
// process image when ANY of its Comm, Exe or Argv patterns matches and
// NONE of its Not patterns does (procmatch documents the fields). Matching
// looks at one image: the filename and argv the kernel captured at exec
// (or, for processes that predate the agent, what /proc shows: the
// resolved /proc/PID/exe, the current cmdline and comm, which a program
// may have rewritten with process.title). An image whose argv[0] or
// filename has the basename "mcptrace" never matches any rule: the
// mcptrace CLI is tags and markers, never a host.
//
// The Name identifies the host in origins ("rule:<name>") and generated
// session IDs ("<name>-<pid>"): lower case letters, digits, '.', '_' and
// '-'. Rules that share a Name describe the same host: they give the same
// origin, and a process inside an active session of a rule never becomes
// the root of a second session of that rule (a wrapper that starts the
// real binary as a child is one session, not two).
type Rule = procmatch.Rule

// Image is what a rule is matched against.
type Image = procmatch.Image

var ruleNamePattern = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]*$`)

// CompileRules checks rules the way NewTracker does and reports every
// invalid one; configuration loaders call it to fail early.
func CompileRules(rules []Rule) error {
	_, err := compileRules(rules)
	return err
}

func compileRules(rules []Rule) ([]*procmatch.Matcher, error) {
	out, err := procmatch.CompileAll(rules, procmatch.Any)
	errs := []error{err}
	for _, r := range rules {
		if !ruleNamePattern.MatchString(r.Name) {
			errs = append(errs, fmt.Errorf("rule %q: name must match %s", r.Name, ruleNamePattern))
		}
	}
	return out, errors.Join(errs...)
}

// isMcptrace reports whether the image is the mcptrace CLI.
func isMcptrace(filename string, argv []string) bool {
	if IsCLI(filename) {
		return true
	}
	return len(argv) > 0 && IsCLI(argv[0])
}

// matchRules returns the first rule matching the image, or nil.
func matchRules(rules []*procmatch.Matcher, im Image) *procmatch.Matcher {
	if isMcptrace(im.Filename, im.Argv) {
		return nil
	}
	return procmatch.First(rules, im)
}

// Pattern helpers for DefaultRules. All work on argv joined with spaces.

// argv0 matches an argv whose first element has the given basename.
func argv0(name string) string {
	return `^(?:\S*/)?` + regexp.QuoteMeta(name) + `(?: |$)`
}

// nodeScript matches a JavaScript runtime running script (a regexp for one
// argv element), directly or through a "#!/usr/bin/env node" shebang, with
// runtime flags before the script: "node --flag /x/cli.js …",
// "/usr/bin/env node /usr/local/bin/claude …".
func nodeScript(script string) string {
	return `^(?:\S*/)?(?:env(?: -\S+)* (?:\S*/)?)?(?:node|nodejs|bun)(?: -\S+)* (?:` + script + `)(?: |$)`
}

// DefaultRules returns the built-in rules for the agent hosts mcptrace knows,
// most specific first (the first matching rule names the session). Each
// call returns a fresh slice the caller may modify.
//
// The rules match the long-lived process that spawns MCP servers, never a
// launcher that starts an application and exits (`code .`, `cursor .`,
// `openclaw gateway start`): a launcher's exit would end the session and
// get the application it started killed.
func DefaultRules() []Rule {
	return []Rule{
		// Claude Code. Native install: ~/.local/bin/claude is a symlink to
		// ~/.local/share/claude/versions/<version> (an executable), so the
		// kernel sees filename …/claude and argv[0] "claude", and /proc/PID/exe
		// resolves into claude/versions/. npm install: /usr/local/bin/claude
		// links to @anthropic-ai/claude-code/cli.js with a "#!/usr/bin/env node"
		// shebang: the first exec has filename …/claude (argv "/usr/bin/env
		// node /usr/local/bin/claude …"), then env execs node in the same
		// process ("node /usr/local/bin/claude …"); IDE plugins and npx run
		// "node …/@anthropic-ai/claude-code/cli.js" directly. The node build
		// sets process.title to "claude", so a host that predates the agent
		// shows comm and cmdline "claude" in /proc. `claude mcp serve` is
		// Claude Code acting as an MCP server, not a host.
		{
			Name: "claude",
			Comm: []string{"claude"},
			Exe:  []string{"claude", "claude/versions/*"},
			Argv: []string{
				argv0("claude"),
				nodeScript(`\S*/@anthropic-ai/claude-code/cli\.m?js|(?:\S*/)?claude`),
			},
			Not: []string{`(?:^| )mcp serve(?: |$)`},
		},
		// OpenAI Codex CLI. npm's bin/codex.js (node, shebang) spawns the
		// native binary vendor/<triple>/codex/codex as a CHILD and waits: both
		// match, and the native child, inside the wrapper's session of this
		// same rule, becomes no second session. Standalone installs (brew,
		// release tarball) and the IDE extensions' `codex app-server` run the
		// native binary directly. `codex mcp-server` (and `codex mcp` of early
		// versions) is Codex serving MCP to another host. The Linux sandbox
		// helper runs as argv[0] "codex-linux-sandbox" and does not match.
		{
			Name: "codex",
			Exe:  []string{"codex"},
			Argv: []string{
				argv0("codex"),
				nodeScript(`\S*/@openai/codex/bin/codex\.js|(?:\S*/)?codex`),
			},
			Not: []string{`(?:^|[ /])codex(?:\.js)? (?:mcp-server|mcp)(?: |$)`},
		},
		// The Copilot CLI started by the GitHub Copilot SDK as a server for
		// many logical sessions: the SDKs run `<cli> --headless
		// --no-auto-update … --stdio|--port N`, where <cli> is the copilot
		// binary they bundle or download (~/.cache/github-copilot-sdk/cli/
		// <version>/copilot) or `node …/@github/copilot-<os>-<arch>/index.js`.
		// Listed before "copilot" so the session says which one it is; give
		// each SDK session its servers through `mcptrace exec --session ID`.
		{
			Name: "copilot-sdk",
			Argv: []string{
				`^(?:\S*/)?copilot(?: .*)? --headless(?: |$)`,
				`^(?:\S*/)?(?:node|nodejs|bun)(?: -\S+)* \S*/@github/copilot(?:-[a-z]+-[a-z0-9]+)?/[^/\s]+\.m?js(?: .*)? --headless(?: |$)`,
			},
		},
		// GitHub Copilot CLI (interactive or `copilot -p`). npm's @github/copilot
		// is a node loader ("#!/usr/bin/env node", so the first exec has
		// filename …/copilot) for a platform package @github/copilot-<os>-<arch>
		// holding index.js and a native copilot binary; the install script puts
		// the native binary in ~/.local/bin/copilot. A loader that starts the
		// native binary as a child stays one session. The AWS Copilot CLI is
		// also called copilot; its subcommands veto the rule.
		{
			Name: "copilot",
			Exe:  []string{"copilot"},
			Argv: []string{
				argv0("copilot"),
				nodeScript(`\S*/@github/copilot(?:-(?:linux|linuxmusl|darwin|win32)-(?:x64|arm64))?/[^/\s]+\.m?js|(?:\S*/)?copilot`),
			},
			Not: []string{`^(?:\S*/)?copilot (?:app|env|svc|job|pipeline|task|storage|secret|deploy|init|run|docs|completion|version)(?: |$)`},
		},
		// Cursor's CLI agent. The installer links ~/.local/bin/cursor-agent to
		// ~/.local/share/cursor-agent/versions/<version>/cursor-agent, a shell
		// script that execs the bundled node on index.js in the same process.
		{
			Name: "cursor-agent",
			Exe:  []string{"cursor-agent"},
			Argv: []string{
				argv0("cursor-agent"),
				nodeScript(`\S*/cursor-agent/versions/[^/\s]+/index\.m?js`),
			},
		},
		// The Cursor editor spawns MCP servers from its extension host, a VS
		// Code extension host run by the cursor binary (/usr/share/cursor/
		// cursor, or usr/share/cursor/cursor inside the AppImage mount) or, for
		// remote workspaces, by the node of ~/.cursor-server. The `cursor`
		// launcher itself is never matched: it starts the app and exits.
		// Listed before "vscode", which would match the same processes.
		{
			Name: "cursor",
			Argv: []string{
				`^(?:\S*/)?[Cc]ursor(?: .*)? --(?:type|vscode-utility-kind)=extensionHost(?: |$)`,
				`^\S*/\.cursor-server/\S*/node(?: .*)? --type=extensionHost(?: |$)`,
			},
		},
		// VS Code's extension host, which runs the stdio MCP servers of VS
		// Code's MCP support and of extensions. Desktop builds run it as an
		// Electron utility process ("code --type=utility … --vscode-utility-
		// kind=extensionHost"); older desktop builds and every server build
		// (Remote-SSH, WSL, dev containers, code-server) fork "node …/out/
		// bootstrap-fork --type=extensionHost". Matches VS Code forks too
		// (Insiders, VSCodium, Windsurf). Not the main `code` process: it
		// also runs the integrated terminals, and the `code` launcher exits.
		{
			Name: "vscode",
			Argv: []string{
				`(?:^| )--type=extensionHost(?: |$)`,
				`(?:^| )--vscode-utility-kind=extensionHost(?: |$)`,
			},
		},
		// Block's goose CLI: a bare `goose` or `goose session|s|run|web|acp`
		// runs an agent that spawns its extensions' MCP servers. Not the
		// other subcommands: `goose mcp <name>` is goose's built-in MCP
		// server, and the pressly/goose database migration tool, also named
		// goose, runs `goose <driver> <dsn> up|status|…`.
		{
			Name: "goose",
			Argv: []string{`^(?:\S*/)?goose(?: (?:session|s|run|web|acp)(?: .*)?)?$`},
		},
		// goosed, the server the goose desktop app starts (`goosed agent`),
		// which spawns the MCP servers. `goosed mcp <name>` is a built-in
		// MCP server it starts, not a host.
		{
			Name: "goosed",
			Exe:  []string{"goosed"},
			Argv: []string{argv0("goosed")},
			Not:  []string{`^(?:\S*/)?goosed mcp(?: |$)`},
		},
		// The OpenClaw gateway, which runs the agents and their MCP servers:
		// `openclaw gateway [run] [--port N …]` in the foreground, or as the
		// systemd/launchd service "node …/openclaw/dist/index.js gateway
		// --port 18789" (also openclaw.mjs, dist/entry.js). `openclaw gateway
		// start|stop|status|install…` only talk to the service manager. The
		// gateway renames itself "openclaw-gateway" (process.title), which is
		// what /proc shows for a gateway that predates the agent.
		{
			Name: "openclaw",
			Comm: []string{"openclaw-gateway"},
			Argv: []string{
				`(?:^|[ /])openclaw(?:\.mjs|/dist/(?:index|entry)\.js)? gateway(?: run)?(?: -.*)?$`,
				argv0("openclaw-gateway"),
			},
		},
	}
}
