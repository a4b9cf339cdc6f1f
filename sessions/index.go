package sessions

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"

	"github.com/mcptrace/mcptrace/internal/ratelog"
	"github.com/mcptrace/mcptrace/lineage"
)

// Indexes of the active sessions, quotas and the log limiter: what keeps
// the tracker's work per begin, tag, marker and end independent of how
// many sessions there are (it runs under the lock the event consumer
// needs), and one user's churn from costing another user anything.

// addActive registers s, active, in every index.
func (t *Tracker) addActive(s *session) {
	t.active[s.Ref()] = s
	k := tagKey{s.Owner, s.Tag}
	t.tags[k] = append(t.tags[k], s)
	t.names[s.ID] = append(t.names[s.ID], s)
	if s.Tag != s.ID {
		t.names[s.Tag] = append(t.names[s.Tag], s)
	}
	t.activePerUID[s.Owner]++
	if s.Parent != "" {
		t.addChild(s.ParentRef(), s)
	}
}

// removeActive takes s out of every index of the active sessions.
func (t *Tracker) removeActive(s *session) {
	if t.active[s.Ref()] == s {
		delete(t.active, s.Ref())
	}
	k := tagKey{s.Owner, s.Tag}
	unlist(t.tags, k, s)
	if len(t.tags[k]) == 0 {
		delete(t.suffix, Ref{s.Owner, s.Tag})
	}
	unlist(t.names, s.ID, s)
	if s.Tag != s.ID {
		unlist(t.names, s.Tag, s)
	}
	if len(t.suffix) > len(t.active)+1024 {
		clear(t.suffix) // bases whose tag was never in use (rule IDs)
	}
	if t.activePerUID[s.Owner]--; t.activePerUID[s.Owner] <= 0 {
		delete(t.activePerUID, s.Owner)
	}
	if s.Parent != "" {
		t.removeChild(s.ParentRef(), s)
	}
	if len(t.children[s.Ref()]) == 0 {
		delete(t.children, s.Ref())
	}
}

// unlist takes s out of the list index m keeps under k, and k out of m
// when its list is empty.
func unlist[K comparable](m map[K][]*session, k K, s *session) {
	list := m[k]
	if i := slices.Index(list, s); i >= 0 {
		list = slices.Delete(list, i, i+1)
	}
	if len(list) == 0 {
		delete(m, k)
	} else {
		m[k] = list
	}
}

func (t *Tracker) addChild(parent Ref, s *session) {
	set := t.children[parent]
	if set == nil {
		set = make(map[*session]struct{})
		t.children[parent] = set
	}
	set[s] = struct{}{}
}

func (t *Tracker) removeChild(parent Ref, s *session) {
	if set := t.children[parent]; set != nil {
		delete(set, s)
		if len(set) == 0 {
			delete(t.children, parent)
		}
	}
}

// setParent nests the active session s in parent (ID "": at top level).
func (t *Tracker) setParent(s *session, parent Ref) {
	if s.ParentRef() == parent {
		return
	}
	if s.State == Active && s.Parent != "" {
		t.removeChild(s.ParentRef(), s)
	}
	s.Parent, s.ParentOwner = parent.ID, parent.Owner
	if parent.ID == "" {
		s.ParentOwner = 0
	}
	if s.State == Active && parent.ID != "" {
		t.addChild(s.ParentRef(), s)
	}
}

// adoptBelow nests in s the active sessions that began earlier below its
// root, at s's level: it walks the root's proven descendants (for the
// exec of a tag, the process alone), never the other sessions.
func (t *Tracker) adoptBelow(s *session) {
	desc := t.g.Descendants(s.Root)
	if len(desc) <= 1 {
		return
	}
	in := map[lineage.ID]bool{desc[0].ID: true}
	for _, p := range desc[1:] {
		if p.Gaps&lineage.GapUnknownCreator != 0 || !in[p.Creator] {
			continue
		}
		in[p.ID] = true
		if c := t.rootSession(p.ID, true); c != nil && c != s && c.ParentRef() == s.ParentRef() {
			t.setParent(c, s.Ref())
		}
	}
}

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

// targets returns the sessions sid names for a caller of uid. IDs and
// tags are scoped by owner, so a name resolves among one owner's sessions
// (its namespace):
//   - owner's, when the caller names one (whether it may end them is
//     authorize's to say);
//   - else the caller's own uid's;
//   - else, for a caller other than root, the namespace of an active
//     session of that ID or tag it is related to by creation: rooted at
//     the caller or one of its creators (a host that changed uid after
//     its session began), or at a process the caller created (a session
//     begun under sudo by the user's own host), whose ending authorize
//     allows;
//   - else, for root, the namespace of the one owner using that ID or
//     tag (not by creation: root's processes created everyone's).
//
// ErrAmbiguous, naming the owners, when several namespaces qualify.
//
// What one user's sessions are called so never changes what another
// user's name resolves to. In a namespace: see named. ErrNoSession when
// it names nothing.
func (t *Tracker) targets(caller lineage.ID, known bool, uid uint32, sid string, owner *uint32) (targets []*session, dup bool, err error) {
	if owner != nil {
		return t.named(*owner, sid)
	}
	if targets, dup, err = t.named(uid, sid); err == nil {
		return targets, dup, nil
	}
	var owners []uint32
	add := func(s *session) {
		if (s.ID == sid || s.Tag == sid) && !slices.Contains(owners, s.Owner) {
			owners = append(owners, s.Owner)
		}
	}
	switch {
	case uid != 0 && known:
		for _, s := range t.names[sid] {
			if t.inChain(caller, s.Root) || t.inChain(s.Root, caller) {
				add(s)
			}
		}
	case uid == 0:
		// Not by creation: root's processes (init, sshd, a root shell)
		// created everyone's sessions.
		for _, s := range t.names[sid] {
			add(s)
		}
		if len(owners) == 0 {
			for _, s := range t.ended {
				add(s)
			}
		}
	}
	switch len(owners) {
	case 0:
		return nil, false, fmt.Errorf("%w: %q", ErrNoSession, sid)
	case 1:
		return t.named(owners[0], sid)
	}
	slices.Sort(owners)
	return nil, false, fmt.Errorf("%w: %q is a session of uids %s; say whose (--owner UID, ?owner=UID)", ErrAmbiguous, sid, joinUIDs(owners))
}

// named resolves sid among owner's sessions: the active ones tagged sid;
// failing those, the active session with the ID sid and the sessions
// owner tagged sid; failing those, the most recently ended one of that
// tag or ID (dup). ErrNoSession when it names nothing.
func (t *Tracker) named(owner uint32, sid string) (targets []*session, dup bool, err error) {
	if own := t.tags[tagKey{owner, sid}]; len(own) > 0 {
		targets = slices.Clone(own)
	} else if s := t.active[Ref{owner, sid}]; s != nil {
		targets = slices.Clone(t.tags[tagKey{owner, sid}])
		if !slices.Contains(targets, s) {
			targets = append(targets, s)
		}
	}
	slices.SortFunc(targets, cmpSessions)
	if len(targets) == 0 {
		for i := len(t.ended) - 1; i >= 0; i-- {
			if s := t.ended[i]; s.Owner == owner && (s.Tag == sid || s.ID == sid) {
				return []*session{s}, true, nil
			}
		}
		return nil, false, fmt.Errorf("%w: %q", ErrNoSession, sid)
	}
	return targets, false, nil
}

func joinUIDs(uids []uint32) string {
	parts := make([]string, len(uids))
	for i, u := range uids {
		parts[i] = strconv.FormatUint(uint64(u), 10)
	}
	return strings.Join(parts, ", ")
}

// retain keeps s, just ended, among the retained ended sessions. An owner
// over Config.MaxEndedPerUID loses its own oldest; at Config.MaxEnded the
// owner holding the most loses its oldest: one user's churn never pushes
// out another user's sessions while it holds more than they do.
func (t *Tracker) retain(s *session) {
	t.ended = append(t.ended, s)
	t.endedPerUID[s.Owner]++
	for t.endedPerUID[s.Owner] > t.maxEndedPerUID {
		t.dropOldestOf(s.Owner)
	}
	for len(t.ended) > t.maxEnded {
		t.dropOldestOf(t.largestHolder())
	}
}

// dropOldestOf forgets the oldest retained ended session of owner.
func (t *Tracker) dropOldestOf(owner uint32) {
	for i, s := range t.ended {
		if s.Owner == owner {
			t.drop(i)
			t.st.droppedQuota++
			return
		}
	}
}

// largestHolder is the owner with the most retained ended sessions (the
// lowest uid among equals, so that a replay decides the same).
func (t *Tracker) largestHolder() uint32 {
	var best uint32
	n := -1
	for uid, c := range t.endedPerUID {
		if c > n || c == n && uid < best {
			best, n = uid, c
		}
	}
	return best
}

// Per-owner log limits: a burst of logBurst per-session logs, then one
// per logEvery of event time; what is held back is counted and said with
// the next log of that owner.
const (
	logBurst   = 20
	logEvery   = uint64(1_000_000_000) // ns
	maxLogUIDs = 4096
)

func newLogLimiter() *ratelog.Limiter[uint32] {
	return ratelog.New[uint32](logBurst, logEvery, maxLogUIDs)
}

// logFor logs a per-session message of owner's, at most as often as the
// limiter allows. Errors are never held back.
func (t *Tracker) logFor(owner uint32, level slog.Level, msg string, args ...any) {
	if !t.log.Enabled(context.Background(), level) {
		return
	}
	t.logs.Log(t.log, level, owner, t.clock, msg, args...)
}

// AllowLog reports whether a per-session log line about session id of
// owner (an enforcer's report, the agent's notes) may be written now
// under the owner's rate limit; what is held back is counted in
// Stats.LogsSuppressed. Without the owner, the one owner with a session
// of that ID is taken; sessions the tracker no longer lists (or an ID
// several owners use) share one limit (unknownOwner), so dropping them
// does not lift it. Callers never ask it about an error.
func (t *Tracker) AllowLog(id string, owner *uint32) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	key := unknownOwner
	switch {
	case owner != nil:
		if t.get(Ref{*owner, id}) != nil {
			key = *owner
		}
	default:
		var found *session
		for _, s := range t.names[id] { // the active sessions named id, by ID or tag
			if s.ID == id {
				if found != nil {
					found = nil
					break
				}
				found = s
			}
		}
		if found != nil {
			key = found.Owner
		}
	}
	ok, _ := t.logs.Allow(key, t.now())
	return ok
}

// unknownOwner is the log-limit key of sessions the tracker no longer
// lists (no uid is 2^32-1: it is the kernel's "no uid").
const unknownOwner = ^uint32(0)
