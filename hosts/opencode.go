package hosts

import "github.com/mcptrace/mcptrace/procmatch"

// opencode is sst's opencode (npm opencode-ai): a native binary
// (opencode-ai/bin/opencode, from opencode-linux-x64) run in the same
// process, argv[0] …/opencode. The TUI, `opencode run`, `opencode serve`
// and `opencode mcp list` all start the configured local servers.
//
// Run here (1.18.33, `opencode mcp list`): servers on socketpairs; it
// ends each server's tree with `pgrep -P` on /dev/null.
func opencode() Host {
	return Host{
		Rule: procmatch.Rule{
			Name: "opencode",
			Exe:  []string{"opencode", "opencode.exe"},
			Argv: []string{
				argv0("opencode"),
				nodeScript(`\S*/opencode-ai/bin/opencode(?:\.js)?`),
			},
		},
		Tools:    []procmatch.Rule{commonTools()},
		Verified: "run",
	}
}

// amp is Sourcegraph's Amp CLI (npm @sourcegraph/amp, whose bin is the
// native @ampcode/cli/bin/amp.exe, run in the same process with argv[0]
// …/amp). Interactive `amp` and `amp -x PROMPT` start the configured
// servers before they reach the service; `amp mcp list` only lists
// them, and the account and orb commands start none.
//
// Run here (0.0.1790142911, `amp -x`): servers on socketpairs.
func amp() Host {
	return Host{
		Rule: procmatch.Rule{
			Name: "amp",
			Exe:  []string{"amp.exe"},
			Argv: []string{argv0("amp")},
			Not:  []string{`^(?:\S*/)?amp (?:login|logout|version|update|orb|orb-spawner|portal|net|mcp|permissions|tools|threads list|config)(?: |$)`},
		},
		Tools:    []procmatch.Rule{commonTools()},
		Verified: "run",
	}
}

// crush is Charm's Crush (a Go binary; npm @charmland/crush downloads
// it at install, which cannot run offline, so it was read, not run):
// interactive `crush` and `crush run PROMPT` start the stdio servers of
// crush.json's "mcp". Its logs, schema, update-providers, dirs and
// completion commands start none.
func crush() Host {
	return Host{
		Rule: procmatch.Rule{
			Name: "crush",
			Exe:  []string{"crush"},
			Argv: []string{argv0("crush")},
			Not:  []string{`^(?:\S*/)?crush (?:logs|schema|update-providers|dirs|completion|help)(?: |$)`},
		},
		Tools:    []procmatch.Rule{commonTools()},
		Verified: "docs",
	}
}

// cline is Cline's CLI (npm cline, whose bin is the native
// @cline/cli-<os>-<arch>/bin/cline, run in the same process): `cline
// PROMPT`, the TUI (-i), ACP mode (--acp) and its background hub
// (`cline --cline-hub-daemon`, which it starts as a child) run tasks and
// start the servers of ~/.cline/data/settings/cline_mcp_settings.json.
// Its management commands start none.
//
// Run here (3.0.65, `cline -P openai PROMPT`): servers on socketpairs,
// `sh -c` machine-id probes on a memfd, git on a socketpair.
func cline() Host {
	return Host{
		Rule: procmatch.Rule{
			Name: "cline",
			Exe:  []string{"cli-*/bin/cline"},
			Argv: []string{argv0("cline")},
			Not:  []string{`^(?:\S*/)?cline (?:auth|config|plugin|skill|connect|mcp|doctor|history|h|hook|schedule|update|version|dashboard)(?: |$)`},
		},
		Tools: []procmatch.Rule{
			commonTools(),
			{Name: "probes", Argv: []string{`^(?:\S*/)?sh -c \( cat /var/lib/dbus/machine-id `}},
		},
		Verified: "run",
	}
}

// kiro is the Kiro CLI (formerly Amazon Q Developer CLI; a native
// installer, not on npm, so it was read, not run): `kiro-cli` alone is
// `kiro-cli chat`, and chat, agent and acp sessions start the servers of
// ~/.kiro/settings/mcp.json; the chat runs in kiro-cli-chat, the binary
// installed beside it (Amazon Q's was qchat). login, logout, whoami,
// settings, doctor, update, theme, integrations, inline, translate,
// diagnostic, issue, version and mcp start none.
func kiro() Host {
	return Host{
		Rule: procmatch.Rule{
			Name: "kiro",
			Exe:  []string{"kiro-cli", "kiro-cli-chat"},
			Argv: []string{argv0("kiro-cli"), argv0("kiro-cli-chat")},
			Not:  []string{`^(?:\S*/)?kiro-cli(?:-chat)? (?:login|logout|whoami|settings|doctor|update|theme|integrations|inline|translate|diagnostic|issue|version|mcp)(?: |$)`},
		},
		Tools:    []procmatch.Rule{commonTools()},
		Verified: "docs",
	}
}
