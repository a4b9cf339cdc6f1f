// Package roles says what each member of an agent session is: the host,
// a wrapper that only starts another program (npx, uvx, sh -c, env, a
// docker run client), an MCP server, or something else (a server's own
// helpers, a host's forks), and names each server with a bounded identity
// fit for a metric label or a log line: "@modelcontextprotocol/server-filesystem",
// "mcp-server-fetch", "ghcr.io/github/github-mcp-server", "mcp_server_time".
//
// Classify takes the member list of one session (sessions.Tracker.MembersOf)
// and returns, for each member, its Role, the identity of the server it is,
// wraps or runs under, the chain of wrappers that started a server, and
// the lineage.ID of that server, so that callers can sum a server's
// subtree. It costs time linear in the number of members. Identity reads
// one image's argv the way the wrapper it names would; Name is the
// fallback identity of a server whose command line names none (its npm
// package, python module or basename).
//
// An identity is never more than a package, module, image or basename:
// never an argument, never an environment value. Every name is at most 128
// bytes of [A-Za-z0-9@/._:+-] and '_' (other bytes become '_'), or
// redact.Marker when the redact package would hide the name or the argv
// element it came from, or when it contains an element of its argv that
// redact hides. A wrapper's argv names nothing when an option before the
// name is one the wrapper is not known to have (it may take the next
// element as its value), and a name is only read from a spec that fits
// the grammar of what it names: an npm package name, a GitHub shorthand's
// repository, the last path element of a path or URL (never its user
// info or host), a Python distribution or module, an image reference.
//
// What roles does not do: read /proc or any other state (it is pure and
// platform-neutral; callers pass what the lineage graph holds), decide
// what to end or kill (sessions and enforcer do), or keep metrics (the
// exporter counts roles and sums a server's subtree). The Container role
// is reserved: nothing produces it yet.
//
// All functions are safe to call concurrently; none keeps state.
package roles
