package hosts

import "github.com/mcptrace/mcptrace/procmatch"

// gemini is Google's Gemini CLI (@google/gemini-cli): its bin is
// bundle/gemini.js ("#!/usr/bin/env node"), which starts itself again as
// a child with a larger heap (`node --max-old-space-size=N …/gemini …`):
// the child is the host too, and starts the servers. Every mode that
// reads settings starts the configured stdio servers, `gemini mcp list`
// included (it health-checks them).
//
// Run here (0.61, `gemini mcp list`): servers on socketpairs, one after
// another; git on a socketpair.
func gemini() Host {
	return Host{
		Rule: procmatch.Rule{
			Name: "gemini",
			Argv: []string{
				argv0("gemini"),
				nodeScript(`\S*/@google/gemini-cli/\S+\.m?js|(?:\S*/)?gemini`),
			},
		},
		Tools:    []procmatch.Rule{commonTools()},
		Verified: "run",
	}
}

// qwen is Qwen Code (@qwen-code/qwen-code), a fork of the Gemini CLI:
// cli-entry.js ("#!/usr/bin/env node") starts itself again as a child,
// which starts the servers; `qwen mcp list` health-checks them.
//
// Run here (0.24.4, `qwen mcp list`): servers on socketpairs.
func qwen() Host {
	return Host{
		Rule: procmatch.Rule{
			Name: "qwen",
			Argv: []string{
				argv0("qwen"),
				nodeScript(`\S*/@qwen-code/qwen-code/\S+\.m?js|(?:\S*/)?qwen`),
			},
		},
		Tools:    []procmatch.Rule{commonTools()},
		Verified: "run",
	}
}
