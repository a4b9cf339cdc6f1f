package sessions

import (
	"log/slog"

	"github.com/mcptrace/mcptrace/internal/ratelog"
	"github.com/mcptrace/mcptrace/lineage"
)

// Scan: rules and tags applied to processes the graph knows from /proc
// (at start-up and after a repair), each tag refusal counted once.

// Scan matches rules and tags on the processes already in the graph: call it
// at start-up once the graph is seeded from /proc, and after every repair
// (it is idempotent). It also ends the active sessions whose root the graph
// now shows exited or no longer knows (exit events lost), and nests
// top-level sessions whose root's creator became known.
//
// A live process is matched on its images: the last `mcptrace run|exec`
// image (from a kernel event or /proc) tags it, and the rules are matched
// on its current image. Images a child only inherited from its creator
// (forked, not exec'd) are ignored. A process that was the root of a
// session that ended is never made a root again by Scan or by a rule.
func (t *Tracker) Scan() []Action {
	t.mu.Lock()
	defer t.mu.Unlock()
	at := t.now()
	acts := t.sweepRoots(at, nil)
	// Only live processes can begin sessions: exited ones are not copied.
	procs := t.g.ProcessesWhere(func(p lineage.Process) bool { return !p.Exited && rootable(p) })
	alive := make(map[lineage.ID]bool)
	for _, p := range procs {
		if !t.inScope(p.ID) {
			continue
		}
		alive[p.ID] = true
		if cmd, truncated, ok := lastTag(p.Images); ok && !t.refused[p.ID] {
			if err := t.tag(p, cmd, truncated, at, tagScan); err != nil {
				t.refusedTag(p.ID)
				t.logFor(p.UID, slog.LevelWarn, "session tag refused", "via", "scan", "pid", p.ID.PID, "uid", p.UID, "session", LogID(cmd.id), "err", ratelog.Field(err.Error()))
			}
		}
		cur := p.Current()
		if cur.Source == lineage.SourceInherited {
			continue
		}
		if r := matchRules(t.rules, Image{Filename: cur.Filename, Comm: p.Comm, Argv: cur.Argv}); r != nil {
			t.ruleRoot(p, r.Rule().Name, at, true)
		}
	}
	for id := range t.refused {
		if !alive[id] {
			delete(t.refused, id)
		}
	}
	for _, s := range t.active {
		if s.Parent == "" {
			t.reattach(s)
		}
	}
	return acts
}

// maxRefused bounds the processes remembered as refused between Scans.
const maxRefused = 4096

// refusedTag remembers that p's tag was refused (counted and logged),
// seen as an exec or by Scan, so that a later Scan does not count and log
// it again while p lives. Past maxRefused the entries of processes that
// exited go; if all are alive, the oldest state is forgotten (a rescan
// then counts those again, never misses a tag).
func (t *Tracker) refusedTag(p lineage.ID) {
	if len(t.refused) >= maxRefused {
		for id := range t.refused {
			if q, ok := t.g.Get(id); !ok || q.Exited {
				delete(t.refused, id)
			}
		}
		if len(t.refused) >= maxRefused {
			clear(t.refused)
		}
	}
	t.refused[p] = true
}

// lastTag finds the last `mcptrace run|exec` image a process exec'd or
// shows in /proc.
func lastTag(ims []lineage.Image) (command, bool, bool) {
	for i := len(ims) - 1; i >= 0; i-- {
		im := ims[i]
		if im.Source == lineage.SourceInherited {
			continue
		}
		if c := parseCommand(im.Argv, im.ArgvTruncated); c.kind == cmdRun || c.kind == cmdExec {
			return c, im.ArgvTruncated, true
		}
	}
	return command{}, false, false
}
