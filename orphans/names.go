package orphans

import (
	_ "embed"
	"strings"

	"github.com/mcptrace/mcptrace/redact"
)

// mcpNames is the shipped list of MCP servers whose names carry no MCP
// word, and of MCP programs that are not servers (see the file).
//
//go:embed mcpnames.txt
var mcpNames string

var listedServers, listedNotServers = parseNames(mcpNames)

// parseNames reads mcpnames.txt: one name a line, "!" before a name
// that is not a server, "#" comments.
func parseNames(s string) (servers, not map[string]bool) {
	servers, not = map[string]bool{}, map[string]bool{}
	for line := range strings.Lines(s) {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if n, ok := strings.CutPrefix(line, "!"); ok {
			not[strings.ToLower(n)] = true
		} else {
			servers[strings.ToLower(line)] = true
		}
	}
	return servers, not
}

// MCPName reports whether name, a server's identity as package roles
// names it (an npm package, a Python distribution or module, an image),
// is a name of the MCP ecosystem: under @modelcontextprotocol/, or with
// "mcp" as one of its words (mcp-server-fetch, mcp_server_time,
// github-mcp-server, @playwright/mcp, @upstash/context7-mcp), or in the
// shipped list (mcpnames.txt); and not a client or SDK the list names
// (the MCP Inspector). A name is never proof on its own: Find takes a
// process for an MCP server by its name only with stdio evidence.
func MCPName(name string) bool {
	n := strings.ToLower(name)
	if n == "" || n == strings.ToLower(redact.Marker) || listedNotServers[n] {
		return false
	}
	if listedServers[n] || strings.HasPrefix(n, "@modelcontextprotocol/") {
		return true
	}
	for _, w := range strings.FieldsFunc(n, func(r rune) bool {
		return r == '/' || r == '-' || r == '_' || r == '.' || r == '@' || r == ':'
	}) {
		if w == "mcp" {
			return true
		}
	}
	return false
}
