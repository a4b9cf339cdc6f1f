package roles

import (
	"testing"

	"github.com/mcptrace/mcptrace/lineage"
)

func withStdio(im lineage.Image, in, out lineage.FileKind) lineage.Image {
	im.Stdio = lineage.Stdio{In: in, Out: out}
	return im
}

func lived(p lineage.Process, ms uint64) lineage.Process {
	p.Exited, p.ExitTime = true, p.ID.Start+ms*1_000_000
	return p
}

// A server speaks MCP over stdio with its host: what the host started on
// /dev/null or a terminal is its own command (a Tool, with all it
// started), a wrapper's child on /dev/null is a helper (Other), and
// unrecorded stdio is no evidence either way.
func TestStdioAtExecTellsServersFromToolsAndHelpers(t *testing.T) {
	pipe, null, tty := lineage.FilePipe, lineage.FileChar, lineage.FileChar
	npx := withStdio(exe("/usr/bin/npx", "npx", "-y", "pkg"), pipe, pipe)
	procs := []lineage.Process{
		mk(100, 1, hostImage),
		mk(101, 100, npx),
		mk(102, 101, withStdio(exe("/usr/bin/node", "node", "/n/node_modules/pkg/cli.js"), pipe, pipe)),
		mk(103, 101, withStdio(exe("/usr/bin/sleep", "sleep", "3600"), null, null)), // the launcher's helper
		mk(110, 100, withStdio(exe("/bin/bash", "bash", "-lc", "git status"), null, pipe)),
		mk(111, 110, withStdio(exe("/usr/bin/git", "git", "status"), null, pipe)),
		mk(120, 100, withStdio(exe("/bin/sh", "sh", "-c", "sleep 40"), tty, tty)),
		mk(121, 120, withStdio(exe("/bin/sleep", "sleep", "40"), tty, tty)),
		mk(130, 100, exe("/usr/local/bin/some-server", "some-server")), // unrecorded
		mk(140, 100, withStdio(exe("/usr/local/bin/mcptrace", "mcptrace", "mark", "destroy"), null, pipe)),
		mk(141, 100, exe("/usr/local/bin/mcptrace", "mcptrace", "mark", "destroy")),
	}
	checkMembers(t, byPID(100, true, procs), map[uint32]Member{
		101: {Role: Wrapper, Server: "pkg"},
		102: {Role: Server, Server: "pkg", Chain: []string{"npx", "node"}, ServerID: id(102), Named: true},
		103: {Role: Other},
		110: {Role: Tool},
		111: {Role: Tool},
		120: {Role: Tool},
		121: {Role: Tool},
		130: {Role: Server, Server: "some-server", Chain: []string{"some-server"}, ServerID: id(130)},
		140: {Role: Tool},
		141: {Role: Tool},
	})
}

// A branch below the host that exited within ShortLived with nothing in
// it alive is the host's own command, whatever its stdio was, unless it
// held a server that names its package (a health check's server).
func TestShortBranchesBelowTheHostAreTools(t *testing.T) {
	sock := lineage.FileSocket
	s := func(im lineage.Image) lineage.Image { return withStdio(im, sock, sock) }
	procs := []lineage.Process{
		mk(100, 1, hostImage),
		lived(mk(101, 100, s(exe("/usr/bin/git", "git", "rev-parse"))), 30),
		lived(mk(102, 100, s(exe("/usr/bin/npx", "npx", "-y", "pkg"))), 900),
		lived(mk(103, 102, s(exe("/usr/bin/node", "node", "/n/node_modules/pkg/cli.js"))), 800),
		lived(mk(104, 100, s(exe("/x/slow", "slow"))), 5000),
		lived(mk(105, 100, s(exe("/bin/sh", "sh", "-c", "x"))), 100),
		mk(106, 105, s(exe("/x/alive", "alive"))),
	}
	checkMembers(t, byPID(100, true, procs), map[uint32]Member{
		101: {Role: Tool},
		102: {Role: Wrapper, Server: "pkg"},
		103: {Role: Server, Server: "pkg", Chain: []string{"npx", "node"}, ServerID: id(103), Named: true},
		104: {Role: Server, Server: "slow", Chain: []string{"slow"}, ServerID: id(104)},
		105: {Role: Wrapper, Server: "alive"},
		106: {Role: Server, Server: "alive", Chain: []string{"sh", "alive"}, ServerID: id(106)},
	})
}
