package hosts

import "github.com/mcptrace/mcptrace/procmatch"

// codex is the OpenAI Codex CLI. npm's bin/codex.js (node, shebang)
// spawns the native binary vendor/<triple>/bin/codex (older:
// vendor/<triple>/codex/codex, in @openai/codex or its per-platform
// package @openai/codex-linux-x64) as a CHILD and waits: both match, the
// native child is the host too (it starts the servers), and inside the
// wrapper's session of this same rule it becomes no second session.
// Standalone installs (brew, release tarball) and the IDE extensions'
// `codex app-server` run the native binary directly. `codex mcp-server`
// (and `codex mcp` of early versions) is Codex serving MCP to another
// host. The Linux sandbox helper runs as argv[0] "codex-linux-sandbox"
// and does not match: it runs the shell tool's commands.
//
// Run here (0.171, `codex exec`): the native binary forks and execs each
// stdio server on pipes; at start it runs lsb_release, getconf, id and
// `bash -lc` (its shell snapshot, with sed, wc, tr) on /dev/null.
func codex() Host {
	return Host{
		Rule: procmatch.Rule{
			Name: "codex",
			Exe:  []string{"codex"},
			Argv: []string{
				argv0("codex"),
				nodeScript(`\S*/@openai/codex/bin/codex\.js|(?:\S*/)?codex`),
			},
			Not: []string{`(?:^|[ /])codex(?:\.js)? (?:mcp-server|mcp)(?: |$)`},
		},
		Tools: []procmatch.Rule{
			commonTools(),
			{Name: "shell", Argv: []string{
				`^(?:\S*/)?(?:bash|zsh|sh) -lc `,
				argv0("codex-linux-sandbox"),
				argv0("codex-execve-wrapper"),
			}},
		},
		Verified: "run",
	}
}
