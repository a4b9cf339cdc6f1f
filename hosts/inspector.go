package hosts

import "github.com/mcptrace/mcptrace/procmatch"

// inspector is the MCP Inspector (@modelcontextprotocol/inspector) in
// client mode: `mcp-inspector --cli CMD ARGS… --method tools/list` (and
// the terminal UI, --tui) connects to one server it starts over stdio,
// in the same node process ("#!/usr/bin/env node"
// clients/launcher/build/index.js). Often run through npx: `npx
// @modelcontextprotocol/inspector --cli node build/index.js`, whose
// npm exec → sh -c → node chain ends in the same process. The default
// web mode (--web, or no mode flag) is a proxy the browser drives, not
// matched: it starts servers only when asked from the page.
//
// Run here (2.12.0, --cli): the server, through npx, on a socketpair.
func inspector() Host {
	return Host{
		Rule: procmatch.Rule{
			Name: "mcp-inspector",
			Argv: []string{
				`^(?:\S*/)?mcp-inspector --(?:cli|tui)(?: |$)`,
				`^(?:\S*/)?(?:env(?: -\S+)* (?:\S*/)?)?(?:node|nodejs|bun)(?: -\S+)* (?:\S*/)?(?:mcp-inspector|\S*/@modelcontextprotocol/inspector/\S+\.m?js) --(?:cli|tui)(?: |$)`,
			},
		},
		Verified: "run",
	}
}
