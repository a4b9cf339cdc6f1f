package sessions

import (
	"fmt"
	"strconv"

	"github.com/mcptrace/mcptrace/lineage"
)

// Session IDs: who gets which, and the per-owner cap of active sessions.

// admit refuses a new session of owner when it has Config.MaxActivePerUID
// active ones; callers count the refusal.
func (t *Tracker) admit(owner uint32) error {
	if n := t.activePerUID[owner]; n >= t.maxActivePerUID {
		return fmt.Errorf("%w: uid %d has %d active sessions, the most sessions.max-active-per-uid allows; end some (mcptrace sessions, mcptrace session end ID)",
			ErrTooManySessions, owner, n)
	}
	return nil
}

// allocate gives the ID of a new session of owner declared with tag:
// the tag itself when no session has that ID, else tag.N. A tag is
// scoped by its owner: another user's session of that ID or tag never
// refuses it. Only a tag of the same owner still active refuses a
// `mcptrace run` or `session begin` (ErrIDInUse); an `mcptrace exec`
// tag joins it (tag, tag.2, tag.3…).
func (t *Tracker) allocate(owner uint32, tag, origin string) (string, error) {
	if len(t.tags[tagKey{owner, tag}]) > 0 && origin != OriginExec {
		return "", fmt.Errorf("%w: %q", ErrIDInUse, tag)
	}
	return t.uniqueID(owner, tag), nil
}

// generatedID is the ID of a session nobody named: "<prefix>-<pid>" of
// its root (prefix: the rule's name, or the origin), made unique among
// the owner's sessions.
func (t *Tracker) generatedID(p lineage.Process, prefix string) string {
	return t.uniqueID(p.UID, prefix+"-"+strconv.FormatUint(uint64(p.ID.PID), 10))
}

// uniqueID returns base, or base.N with the N after the last one handed
// out for owner's base while its tag is in use: O(1) but for IDs the
// owner chose that are in the way. Only owner's sessions are looked at:
// what another user's sessions are called never changes the ID (nor
// tells the owner anything about them).
func (t *Tracker) uniqueID(owner uint32, base string) string {
	if _, taken := t.active[Ref{owner, base}]; !taken {
		return base
	}
	k := Ref{owner, base}
	for n := max(t.suffix[k], 1) + 1; ; n++ {
		id := base + "." + strconv.Itoa(n)
		if _, taken := t.active[Ref{owner, id}]; !taken {
			t.suffix[k] = n
			return id
		}
	}
}

// LogID is a session ID or tag as a log line or an error may show it: a
// valid one (or none) as it is, anything else (a caller's input, which may be any
// bytes, a secret pasted by mistake among them) by its length only.
func LogID(id string) string {
	if id == "" || ValidID(id) {
		return id
	}
	return fmt.Sprintf("(not a valid session id, %d bytes)", len(id))
}
