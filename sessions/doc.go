// Package sessions groups the processes of a node into agent sessions over
// the lineage graph, and decides when a session is over.
//
// A session is a root process and everything it created, at any depth, by
// creator edge (lineage.Graph.Descendants): processes that daemonized
// (setsid, double fork), changed process group, were reparented to init or
// a subreaper, or whose wrappers (npx → npm exec → sh -c → node, uvx,
// docker run) already exited all stay members. Only what the graph proves
// counts: a process whose creator is unknown, or only stood in for by the
// graph (lineage.GapUnknownCreator), is not a member, nor is anything it
// created. Processes seeded from /proc at agent start are taken with the
// creator the graph guessed from their parent at that time
// (lineage.GapSeeded).
//
// # Declaring roots
//
//   - Rules (Rule, DefaultRules, Config) recognise agent hosts — Claude Code,
//     Codex, Copilot CLI and the Copilot SDK server, Cursor, VS Code's
//     extension host, goose, the OpenClaw gateway — by the image they exec.
//     A match inside an active session of the same rule begins nothing (a
//     wrapper and the binary it starts are one session). The zero Config has
//     no rules.
//   - `mcptrace run [--session ID] -- CMD…`: the process that execs it is
//     the root (it then execs CMD, once the agent, when it answers, has
//     confirmed the session through Begin; a refusal is reported there).
//   - `mcptrace exec --session ID -- SERVER…`: the process is the root of a
//     sub-session nested in the session containing it. A host that runs
//     many logical sessions in one process (the Copilot SDK server) starts
//     each session's MCP servers this way so that each set ends on its own.
//     Servers started with the same ID get IDs ID, ID.2, ID.3…, all tagged
//     ID.
//   - Tracker.Begin, behind `mcptrace session begin --pid PID [--id ID]`.
//
// A session found inside another is nested in it (Session.Parent).
//
// Tags are scoped by the owner's uid: two users may both declare `work`,
// and neither's tag refuses or is named by the other's markers (the second
// gets a node-unique ID such as work.2). One owner has at most
// Config.MaxActivePerUID active sessions; a further declaration is refused
// (ErrTooManySessions, counted). Begin, tags, markers and ends cost no scan
// of all the sessions: they are indexed by ID, owner and tag, and parent.
//
// # Ending
//
// A session ends when its root exits (or the graph finds it gone: lost exit
// event, PID reused, missing on repair), or on a destroy marker (`mcptrace
// mark destroy [--session ID]`, seen as an exec or sent through the API;
// see Tracker.Mark for who may end what). Ending a session ends the
// sessions nested in it, never its parent or siblings. A marker without
// --session is refused (as if there were no session) unless its sender's
// uid is 0 or the session owner's. Ended sessions stay listed for
// Config.Retention, at most Config.MaxEndedPerUID of one owner and
// Config.MaxEnded in all (the owner holding the most loses its oldest), so
// no user's churn evicts another's. Per-session logs are rate-limited per
// owner (Stats.LogsSuppressed).
//
// Each end is returned as an Action; Tracker.Members gives the processes
// to end.
//
// # Where things are
//
//   - tracker.go: the Tracker, its state and counters, Observe (the event
//     loop: roots that exited, execs).
//   - declare.go: how sessions begin (rules at exec, tags, Begin);
//     ids.go: the IDs they get (generatedID, uniqueID, allocate) and the
//     per-owner cap of active sessions.
//   - rules.go: host rules (procmatch rules read with procmatch.Any) and
//     DefaultRules; command.go: mcptrace command lines as the CLI reads
//     them.
//   - scope.go: sessions.within-pid and creator chains.
//   - marker.go: destroy markers and who may send them; generation.go:
//     the generation a marker ends.
//   - ending.go: ending sessions, nested ones and the sweep of gone roots.
//   - scan.go: rules and tags applied to processes known from /proc.
//   - index.go: the indexes by owner and ID, name, tag and parent.
//   - resolve.go: finding a session by (owner, ID) or by name for a
//     caller, and the listing; members.go: a session's members.
//   - retain.go: ended sessions kept per owner; logs.go: per-session
//     logs limited per owner.
//   - session.go: the Session value and its keys; state.go: Dump and
//     Restore for the agent's checkpoint.
//
// # What it does not do
//
// The package never signals, kills or otherwise touches a process, and
// makes no system call: it reads the graph and answers. It does not read
// /proc or load BPF (the agent feeds the graph), does not know the time
// (events carry it; Config.Now or Sweep's argument give it otherwise),
// runs no goroutine or timer, and does not authenticate API callers (the
// API resolves SO_PEERCRED to a process and uid and passes them in).
// Ending the members of a session is the enforcer's job, and so is
// keeping its kill records (their per-owner bound is not here).
package sessions
