package roles

import (
	"time"

	"github.com/mcptrace/mcptrace/lineage"
	"github.com/mcptrace/mcptrace/procmatch"
)

// HostTable is what Classify knows of the agent host that began a session,
// beyond its root process: which programs are the host itself and which
// commands it runs for itself. Package hosts keeps one per host it
// knows, as data beside the host's rule; the zero HostTable knows nothing and
// Classify then goes by the process tree and stdio evidence alone.
type HostTable struct {
	// Self matches the host's own programs (its rule, its native binary,
	// its helpers): a process created by the host's own processes and
	// running one of these is the host too (the npm launcher of Codex or
	// Copilot starts the native binary as a child, and that child starts
	// the servers).
	Self []*procmatch.Matcher
	// Tools matches the commands the host runs for itself (git, rg, ps,
	// its shell tool's shell): such a process below the host or its
	// wrappers, and everything it starts, is a Tool, never a server.
	Tools []*procmatch.Matcher
}

// ShortLived is how long a command the host ran may have lived to count
// as a short one: a branch below the host that exited within it, with
// nothing in it alive and no server that names its package, is a Tool
// (a host's git, lsb_release or shell snapshot). An MCP server started
// and stopped that fast (a health check) names its package through npx,
// uvx or its path in node_modules and stays a server.
const ShortLived = 2 * time.Second

// Short reports whether p exited after living less than ShortLived.
func Short(p *lineage.Process) bool {
	return p.Exited && p.ExitTime != 0 && p.ExitTime >= p.ID.Start && p.ExitTime-p.ID.Start < uint64(ShortLived)
}

// matchCurrent reports whether one of ms matches p's current image, with
// p's process name.
func matchCurrent(ms []*procmatch.Matcher, p *lineage.Process) bool {
	im := p.Current()
	if len(ms) == 0 || (im.Filename == "" && len(im.Argv) == 0) {
		return false
	}
	return procmatch.First(ms, procmatch.Image{Filename: im.Filename, Comm: p.Comm, Argv: im.Argv}) != nil
}
