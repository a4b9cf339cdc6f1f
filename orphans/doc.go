// Package orphans finds the MCP servers a node has leaked outside every
// session: the backlog a node holds on the day mcptrace is installed, and
// whatever leaks later outside the sessions it watches.
//
// It is pure: the agent reads the processes (lineage graph, procfs), and
// Find decides, from what it is given, which are leaked and how sure that
// is. A process is listed only when all of these hold:
//
//   - no session owns it (the agent passes only such processes), it is
//     alive, not a kernel thread, and no spare rule protects it;
//   - it is not a daemon the operator runs on purpose: not in a systemd
//     service's cgroup (a leaf "….service"), not in a container's cgroup;
//   - it is an MCP server: the first program below its starter past the
//     wrappers (roles.Classify), and what it runs proves which program it
//     is beyond its basename (a package a wrapper or its argv names, a
//     script inside an npm package: roles.Packaged, Member.Named). A
//     process is never listed by its name alone;
//   - and there is evidence it leaked, of one of two kinds:
//     HostGone: its standard input is a pipe or a unix socket (a Node.js
//     host's stdio is a socketpair) that nothing can write any more, as
//     the kernel counts writers (procfs.StdinCutOff), and has stayed so
//     for Input.ConfirmAfter: whoever started it can never talk to it
//     again (a stdio MCP server's host holds that end while it lives);
//     Superseded: its starter is alive and started the same server (same
//     identity, same command line) again later, and this older instance
//     has been idle (no I/O) for the given time or its stdin is cut off.
//
// A container is listed (ClientGone) when all of these hold: no session
// claims it; it was created to read its client's stdin once (`docker run
// -i`, how MCP clients run a stdio server in a container: a container
// started any other way, detached, by compose or by an orchestrator, is
// never listed); the kernel saw the start request of the client that
// started its running instance (Container.Client: one client, verified
// against the instance's first process) and saw that client exit, and no
// other client of it runs; and its first process's stdin has had no
// writer for Input.ConfirmAfter. A cut stdin alone is never evidence: a
// `docker run -i` fed from a pipe has its container's stdin closed when
// the pipe ends, while the client still runs and waits for the output. A
// container whose client is not known (it started before the agent
// watched) is never listed.
//
// Confidence is Certain only for HostGone when the leaked chain was
// reparented (to init or a subreaper): the host is gone and nothing can
// use the server; and for ClientGone, always (its client's exit is the
// kernel's word). Every other listing is Likely.
//
// It is not the exporter's "orphaned" processes: those are live members
// of sessions that ended, which the enforcer is already ending. These
// belong to no session at all.
//
// Orphan.Top is where a leaked chain begins: the server, or the live
// wrappers above it that read the same stdin, of its uid, neither spared
// nor a daemon's, and above no other server.
//
// What it does not do: read /proc, end anything (the agent ends the
// chain from Orphan.Top to the server and what the server started in its
// own session, through the enforcer, with the caller's own authority; a
// container through the engine), or ask the engine anything.
package orphans
