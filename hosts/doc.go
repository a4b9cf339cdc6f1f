// Package hosts is what mcptrace knows of each real agent host, as data:
// one file per host (claude.go, codex.go, …) with the rule that makes
// the host's long-lived process a session root (sessions.default-rules)
// and the table roles needs to read the host's tree (roles.HostTable):
// which programs are the host itself (a native binary its npm launcher
// starts as a child) and which commands the host runs for itself (git,
// rg, lsb_release, its shell tool), never MCP servers. Each file's tests
// read argv recorded from the real program (hosts that install from npm
// and were run here) or shown in the host's documentation (those that do
// not install here); Verified says which.
//
// Defaults lists the hosts, most specific first (the first matching
// rule names the session); Rules gives their session rules; Table gives
// the compiled table of a session's host, by the rule that began it or,
// for sessions begun otherwise (`mcptrace run -- codex`), by the root's
// image.
//
// What hosts does not do: match processes (procmatch does), decide
// sessions (sessions does: a name that matches is never proof of
// anything the enforcer acts on), or classify members (roles does, with
// the table).
package hosts
