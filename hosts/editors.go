package hosts

import "github.com/mcptrace/mcptrace/procmatch"

// cursorAgent is Cursor's CLI agent. The installer links
// ~/.local/bin/cursor-agent to ~/.local/share/cursor-agent/versions/
// <version>/cursor-agent, a shell script that execs the bundled node on
// index.js in the same process.
func cursorAgent() Host {
	return Host{
		Rule: procmatch.Rule{
			Name: "cursor-agent",
			Exe:  []string{"cursor-agent"},
			Argv: []string{
				argv0("cursor-agent"),
				nodeScript(`\S*/cursor-agent/versions/[^/\s]+/index\.m?js`),
			},
		},
		Tools:    []procmatch.Rule{commonTools()},
		Verified: "docs",
	}
}

// cursor is the Cursor editor, which spawns MCP servers from its
// extension host, a VS Code extension host run by the cursor binary
// (/usr/share/cursor/cursor, or usr/share/cursor/cursor inside the
// AppImage mount) or, for remote workspaces, by the node of
// ~/.cursor-server. The `cursor` launcher itself is never matched: it
// starts the app and exits. Listed before "vscode", which would match
// the same processes.
func cursor() Host {
	return Host{
		Rule: procmatch.Rule{
			Name: "cursor",
			Argv: []string{
				`^(?:\S*/)?[Cc]ursor(?: .*)? --(?:type|vscode-utility-kind)=extensionHost(?: |$)`,
				`^\S*/\.cursor-server/\S*/node(?: .*)? --type=extensionHost(?: |$)`,
			},
		},
		Verified: "docs",
	}
}

// vscode is VS Code's extension host, which runs the stdio MCP servers
// of VS Code's MCP support and of extensions. Desktop builds run it as
// an Electron utility process ("code --type=utility …
// --vscode-utility-kind=extensionHost"); older desktop builds and every
// server build (Remote-SSH, WSL, dev containers, code-server) fork "node
// …/out/bootstrap-fork --type=extensionHost". Matches VS Code forks too
// (Insiders, VSCodium, Windsurf). Not the main `code` process: it also
// runs the integrated terminals, and the `code` launcher exits.
func vscode() Host {
	return Host{
		Rule: procmatch.Rule{
			Name: "vscode",
			Argv: []string{
				`(?:^| )--type=extensionHost(?: |$)`,
				`(?:^| )--vscode-utility-kind=extensionHost(?: |$)`,
			},
		},
		Verified: "docs",
	}
}
