// Package api is the agent's local interface: JSON over HTTP on a unix
// socket, for the mcptrace CLI and for scripts.
//
// Every request is authorized from the caller's peer credentials
// (SO_PEERCRED), read by the server from the connection itself, not from
// anything the client says. Root (uid 0) sees the whole node; any other
// user sees only processes of their own uid, because the argv of other
// users' processes can hold secrets. The socket file is therefore
// world-connectable (mode 0666 by default): the file mode only decides who
// may ask, the peer credentials decide what each caller may see.
//
// The package does not render anything for people; see package treeview.
package api
