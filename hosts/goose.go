package hosts

import "github.com/mcptrace/mcptrace/procmatch"

// goose is Block's goose CLI (a native installer, not on npm: read, not
// run): a bare `goose` or `goose session|s|run|web|acp` runs an agent
// that spawns its extensions' MCP servers. Not the other subcommands:
// `goose mcp <name>` is goose's built-in MCP server, and the
// pressly/goose database migration tool, also named goose, runs `goose
// <driver> <dsn> up|status|…`.
func goose() Host {
	return Host{
		Rule: procmatch.Rule{
			Name: "goose",
			Argv: []string{`^(?:\S*/)?goose(?: (?:session|s|run|web|acp)(?: .*)?)?$`},
		},
		Tools:    []procmatch.Rule{commonTools()},
		Verified: "docs",
	}
}

// goosed is the server the goose desktop app starts (`goosed agent`),
// which spawns the MCP servers. `goosed mcp <name>` is a built-in MCP
// server it starts, not a host.
func goosed() Host {
	return Host{
		Rule: procmatch.Rule{
			Name: "goosed",
			Exe:  []string{"goosed"},
			Argv: []string{argv0("goosed")},
			Not:  []string{`^(?:\S*/)?goosed mcp(?: |$)`},
		},
		Tools:    []procmatch.Rule{commonTools()},
		Verified: "docs",
	}
}

// openclaw is the OpenClaw gateway, which runs the agents and their MCP
// servers: `openclaw gateway [run] [--port N …]` in the foreground, or
// as the systemd/launchd service "node …/openclaw/dist/index.js gateway
// --port 18789" (also openclaw.mjs, dist/entry.js). `openclaw gateway
// start|stop|status|install…` only talk to the service manager. The
// gateway renames itself "openclaw-gateway" (process.title), which is
// what /proc shows for a gateway that predates the agent.
func openclaw() Host {
	return Host{
		Rule: procmatch.Rule{
			Name: "openclaw",
			Comm: []string{"openclaw-gateway"},
			Argv: []string{
				`(?:^|[ /])openclaw(?:\.mjs|/dist/(?:index|entry)\.js)? gateway(?: run)?(?: -.*)?$`,
				argv0("openclaw-gateway"),
			},
		},
		Verified: "docs",
	}
}
