// Package treeview renders process lineage as text for people: the forest
// of creator edges (Tree) and one process's ancestors (Chain), in the spirit
// of ps --forest but for a graph that also remembers exited processes.
//
// Each line shows the tree drawing, the PID, the state (alive, exited N,
// killed SIGKILL, signal SIGTERM), the age of a live process or the lifetime
// of an exited one, the user ID and the redacted command line (see package
// redact), shortened to fit the width. Exec chains, reparenting, gaps in the
// record, reused PIDs and argv the kernel cut short are marked:
//
//	812 alive 2h05m uid=1000 -bash [seeded]
//	└─ 4242 alive 12m03s uid=1000 node /usr/local/bin/claude --resume
//	   └─ 4300 exited 0 lived 1.2s uid=1000 npm exec -y @modelcontextprotocol/server-github
//	      └─ 4310 exited 0 lived 1.1s uid=1000 sh -c mcp-server-github
//	         └─ 4311 alive 12m00s uid=1000 node /home/…/mcp-server-github --toolsets repos [reparented to 1]
//	5000 exited 0 lived 4ms uid=1000 sh -c 'env FOO=bar GITHUB_TOKEN=<redacted> true' → env … → true
//
// Kernel threads are shown by name in brackets; several childless ones
// under the same parent share one line ("142 kernel threads: …"), and
// Options.HideKernel leaves them out.
//
// Output is deterministic: children are sorted by start time, then PID.
// Machine-readable output is not this package's job: encode the
// []lineage.Process with encoding/json.
package treeview
