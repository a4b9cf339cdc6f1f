package hosts

import "github.com/mcptrace/mcptrace/procmatch"

// claude is Claude Code. Native install: ~/.local/bin/claude is a
// symlink to ~/.local/share/claude/versions/<version> (an executable), so
// the kernel sees filename …/claude and argv[0] "claude", and
// /proc/PID/exe resolves into claude/versions/. npm install (2.1.x): the
// package's bin is a native binary from a per-platform package, run in
// the same process; older npm builds linked /usr/local/bin/claude to
// @anthropic-ai/claude-code/cli.js with a "#!/usr/bin/env node" shebang:
// the first exec has filename …/claude (argv "/usr/bin/env node
// /usr/local/bin/claude …"), then env execs node in the same process;
// IDE plugins and npx run "node …/@anthropic-ai/claude-code/cli.js". The
// node build sets process.title to "claude". `claude mcp serve` is
// Claude Code acting as an MCP server, not a host.
//
// Run here (2.1.332, `claude -p` and `claude mcp list`): it starts each
// stdio server directly, on a socketpair, and in a git work tree runs
// git on a socketpair too, many times a minute: git, rg, ps and grep are
// its own commands.
func claude() Host {
	return Host{
		Rule: procmatch.Rule{
			Name: "claude",
			Comm: []string{"claude"},
			Exe:  []string{"claude", "claude/versions/*"},
			Argv: []string{
				argv0("claude"),
				nodeScript(`\S*/@anthropic-ai/claude-code/cli\.m?js|(?:\S*/)?claude`),
			},
			Not: []string{`(?:^| )mcp serve(?: |$)`},
		},
		Tools:    []procmatch.Rule{commonTools()},
		Verified: "run",
	}
}
