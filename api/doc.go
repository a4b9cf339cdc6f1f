// Package api is the agent's local interface: JSON over HTTP on a unix
// socket (a named pipe on Windows), for the mcptrace CLI and for scripts.
//
// Every request is authorized from the caller's peer credentials
// (SO_PEERCRED), read by the server from the connection itself, not from
// anything the client says. A connection is bound at accept to the process
// that opened it (a pidfd from SO_PEERPIDFD on Linux 6.5+, else its start
// time) and every request on it is refused once that process exited, its
// pid was reused or its uid changed. Root (uid 0) sees the whole node; any
// other user sees only processes of their own uid, only the images they
// executed under that uid, and argv redacted (package redact) — root gets
// raw argv only when it asks (?raw=1). A session another user may not see
// or end answers exactly like a session that does not exist. The socket
// file is therefore world-connectable (mode 0666 by default): the file mode
// only decides who may ask, the peer credentials decide what each caller
// may see.
//
// On Windows the API is served on a named pipe (\\.\pipe\mcptrace) that
// SYSTEM and administrators may use fully and authenticated users may
// connect to, but not serve (see Listen). A caller is identified the same
// way, from the pipe, not from what it says: its process by
// GetNamedPipeClientProcessId, opened at accept and held while the
// connection is open (so its PID names no other process meanwhile), and
// its uid by its token, read by impersonating the client at
// identification level (Client connects at that level, enough to be
// identified and no more) and numbered by the server's owners table
// (package windows/owners): an elevated or SYSTEM token is root, 0; any
// other user has a number of its own. Every request is refused once that
// process exited. A server without an owners table refuses every
// connection.
//
// Connections of non-root users are capped per uid and in total, headers
// and bodies are bounded, and FDReserve descriptors stay free for the
// enforcer. The package does not rate-limit requests on an admitted
// connection, and does not render anything for people; see package
// treeview.
package api
