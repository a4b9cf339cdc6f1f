// Package orphans finds the MCP servers a node has leaked outside every
// session: the backlog a node holds on the day mcptrace is installed, and
// whatever leaks later outside the sessions it watches.
//
// It is pure: the agent reads the processes (lineage graph, procfs), and
// Find decides, from what it is given, which are leaked and how sure that
// is. A wrong end is worse than a leak: half the daemons of a developer's
// machine (web servers, workers, dev servers, editors' language servers)
// run a named package with a pipe for stdin whose writer died, so neither
// a name nor a stdin proves anything on its own.
//
// # What proves an MCP server
//
// A process is taken for an MCP server only when it has an MCP server's
// shape — the first program below its starter past the wrappers
// (roles.Classify), whose package a wrapper or its argv names, or whose
// script lies inside an npm package (roles.Packaged, Member.Named), in
// no systemd service's or container's cgroup, matched by no spare rule,
// and running as one uid (real, effective and saved, as /proc says now:
// the graph keeps the uid of its last exec or fork) — and one of these
// proves it (Proof):
//
//   - ProofLineage: the agent saw a recognised host (a host rule matched
//     a process above it, alive or exited, as the kernel reported its
//     exec) or `mcptrace run|exec` start its chain. Such a chain is
//     unowned only once its session is forgotten (retention) or was
//     never begun (refused); the history is not searched.
//   - ProofNameAndStdio, for processes whose lineage the agent did not
//     see (older than the agent, or started by a program no rule names):
//     a name of the MCP ecosystem (MCPName: @modelcontextprotocol/*, a
//     name with the word "mcp" such as mcp-server-*, *-mcp, mcp_server_*,
//     or the shipped list mcpnames.txt; never the MCP Inspector or an
//     SDK), together with stdio evidence that ordinary programs lack: its
//     stdin and its stdout are both a pipe or a unix socket (a host's
//     stdio, not a file, a tty, /dev/null or a network socket: an
//     inetd-style service is not a stdio server), from one host (the
//     socketpairs' peers made by the same process), and either both are
//     cut off (no writer of its stdin, no reader of its stdout, as the
//     kernel counts them: procfs.ReadStdio) or its live starter holds the
//     other end of both and superseded it.
//
// Editors' stdio language servers (typescript-language-server --stdio,
// pyright-langserver --stdio, pylsp) have exactly that stdio; they are
// told apart by their names, so the shipped list holds only servers
// checked to be MCP servers.
//
// # What proves a leak
//
//   - HostGone: its stdin (and, for ProofNameAndStdio, its stdout) has
//     been cut off for Input.ConfirmAfter: whoever started it can never
//     talk to it again.
//   - Superseded: its starter is alive and started the same server (same
//     identity, same command line) again later, and this older instance
//     has been idle (no I/O) for Input.IdleAfter.
//
// # What certain promises
//
// Certain means both: it is an MCP server (a Proof above), and nothing
// can ever use it again — its stdin has no writer, its stdout no reader
// (or is no pipe or socket anyone reads), and its leaked chain was
// reparented (to init or a subreaper), so its host is gone. Everything
// else that is listed is Likely: a superseded server (its host still
// holds it), a cut-off server whose parent still runs. `mcptrace orphans
// --end` ends only certain ones unless asked to include likely ones.
//
// Candidates are MCP servers whose leak evidence is still being
// gathered (a superseded server idle 3 of 30 minutes, a stdio cut off 2
// of 10 seconds): shown at once, so that day one is not silent, never
// ended.
//
// A container is listed (ClientGone) when all of these hold: no session
// claims it; it was created to read its client's stdin once (`docker run
// -i`, how MCP clients run a stdio server in a container: a container
// started any other way, detached, by compose or by an orchestrator, is
// never listed); the kernel saw which client sent the start of this very
// instance, and saw that client exit (a closed stdin says nothing of the
// client: a `docker run -i` whose own input ended still runs and waits
// for the output); no other client of it runs; and its first process's
// stdin has had no writer for Input.ConfirmAfter. It is Certain when it
// is an MCP server too (its image has an MCP name, or a recognised host
// started its client), Likely otherwise. A container whose client is not
// known is not listed.
//
// It is not the exporter's "orphaned" processes: those are live members
// of sessions that ended, which the enforcer is already ending. These
// belong to no session at all.
//
// Orphan.Top is where a leaked chain begins: the server, or the live
// wrappers above it that read the same stdin, of its uid, neither spared
// nor a daemon's, and above no other server. A server's name comes from
// its package as the kernel's exec record names it; a command line read
// from /proc that the program overwrote with a title (npm's "npm exec PKG
// ARGS…") is read as the words it shows (Untitled), and chain elements
// are short program names, never arguments.
//
// What it does not do: read /proc, end anything (the agent ends the
// chain from Orphan.Top to the server and what the server started in its
// own session, through the enforcer, with the caller's own authority,
// refusing any process that changed since it was listed; a container
// through the engine), or ask the engine anything.
package orphans
