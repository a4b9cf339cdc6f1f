package hosts

import "github.com/mcptrace/mcptrace/procmatch"

// copilotSDK is the Copilot CLI started by the GitHub Copilot SDK as a
// server for many logical sessions: the SDKs run `<cli> --headless
// --no-auto-update … --stdio|--port N`, where <cli> is the copilot
// binary they bundle or download (~/.cache/github-copilot-sdk/cli/
// <version>/copilot) or `node …/@github/copilot-<os>-<arch>/index.js`.
// Listed before "copilot" so the session says which one it is; give each
// SDK session its servers through `mcptrace exec --session ID`.
func copilotSDK() Host {
	h := copilot()
	h.Rule = procmatch.Rule{
		Name: "copilot-sdk",
		Argv: []string{
			`^(?:\S*/)?copilot(?: .*)? --headless(?: |$)`,
			`^(?:\S*/)?(?:node|nodejs|bun)(?: -\S+)* \S*/@github/copilot(?:-[a-z]+-[a-z0-9]+)?/[^/\s]+\.m?js(?: .*)? --headless(?: |$)`,
		},
	}
	h.Verified = "docs"
	return h
}

// copilot is the GitHub Copilot CLI (interactive or `copilot -p`). npm's
// @github/copilot is a node loader (npm-loader.js, "#!/usr/bin/env
// node", so the first exec has filename …/copilot) that runs the native
// binary of @github/copilot-<os>-<arch> as a child with the same
// arguments; the install script puts the native binary in
// ~/.local/bin/copilot. The native child is the host too, and so are the
// children it forks without an exec (≈ 85 a second, named
// copilot-runtime). The AWS Copilot CLI is also called copilot; its
// subcommands veto the rule.
//
// Run here (1.0.102, interactive in tmux): the native binary starts each
// stdio server on pipes; it runs git and pgrep on /dev/null and `tmux
// list-clients` on a socketpair.
func copilot() Host {
	return Host{
		Rule: procmatch.Rule{
			Name: "copilot",
			Exe:  []string{"copilot"},
			Argv: []string{
				argv0("copilot"),
				nodeScript(`\S*/@github/copilot(?:-(?:linux|linuxmusl|darwin|win32)-(?:x64|arm64))?/[^/\s]+\.m?js|(?:\S*/)?copilot`),
			},
			Not: []string{`^(?:\S*/)?copilot (?:app|env|svc|job|pipeline|task|storage|secret|deploy|init|run|docs|completion|version)(?: |$)`},
		},
		Tools:    []procmatch.Rule{commonTools()},
		Verified: "run",
	}
}
