package sessions

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/mcptrace/mcptrace/lineage"
)

// Resolving names: a session by (owner, ID), by ID for a caller, and the
// listing.

// Get returns the session r names: the active one, else the most
// recently ended one still retained.
func (t *Tracker) Get(r Ref) (Session, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if s := t.get(r); s != nil {
		return s.snapshot(), true
	}
	return Session{}, false
}

// Find returns the session with this ID when one owner has one (the
// active one, else the most recently ended): what root names without an
// owner (Resolve(0, id, nil)). Tests and logs use it; callers acting for
// a user use Resolve.
func (t *Tracker) Find(id string) (Session, bool) {
	s, err := t.Resolve(0, id, nil)
	return s, err == nil
}

// Resolve returns the session a caller of uid names id (IDs are scoped by
// owner): owner's when given, else the caller's own; root, naming no
// owner, gets the session of the one owner that has one of that ID (the
// active one first), or ErrAmbiguous naming the owners when several do.
// ErrNoSession when there is none. Whether the caller may see it is the
// caller's to decide (a non-root caller naming another owner gets that
// owner's session here).
func (t *Tracker) Resolve(uid uint32, id string, owner *uint32) (Session, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case owner != nil:
		uid = *owner
	case uid == 0:
		var found []*session
		for _, s := range t.active {
			if s.ID == id {
				found = append(found, s)
			}
		}
		if len(found) == 0 {
			for i := len(t.ended) - 1; i >= 0; i-- {
				if s := t.ended[i]; s.ID == id && !slices.ContainsFunc(found, func(f *session) bool { return f.Owner == s.Owner }) {
					found = append(found, s)
				}
			}
		}
		switch len(found) {
		case 0:
			return Session{}, fmt.Errorf("%w: %q", ErrNoSession, id)
		case 1:
			return found[0].snapshot(), nil
		}
		owners := make([]uint32, len(found))
		for i, s := range found {
			owners[i] = s.Owner
		}
		slices.Sort(owners)
		return Session{}, fmt.Errorf("%w: %q is a session of uids %s; say whose (--owner UID, ?owner=UID)", ErrAmbiguous, id, joinUIDs(owners))
	}
	if s := t.get(Ref{uid, id}); s != nil {
		return s.snapshot(), nil
	}
	return Session{}, fmt.Errorf("%w: %q", ErrNoSession, id)
}

// instance returns the session r names that began at began, active or
// retained ended; nil once it is forgotten. Endings address their session
// this way: its ID may name a newer session by then.
func (t *Tracker) instance(r Ref, began uint64) *session {
	if s := t.active[r]; s != nil && s.Began == began {
		return s
	}
	for i := len(t.ended) - 1; i >= 0; i-- {
		if s := t.ended[i]; s.Began == began && s.Ref() == r {
			return s
		}
	}
	return nil
}

// get returns the session r names: the active one, else the most recently
// ended one still retained.
func (t *Tracker) get(r Ref) *session {
	if s, ok := t.active[r]; ok {
		return s
	}
	for i := len(t.ended) - 1; i >= 0; i-- {
		if t.ended[i].Ref() == r {
			return t.ended[i]
		}
	}
	return nil
}

// Sessions returns the active and retained ended sessions sorted by Began
// (then root start, then ID).
func (t *Tracker) Sessions() []Session {
	t.mu.Lock()
	defer t.mu.Unlock()
	all := t.sorted()
	out := make([]Session, len(all))
	for i, s := range all {
		out[i] = s.snapshot()
	}
	return out
}

// sorted returns the active and retained ended sessions in Sessions'
// order.
func (t *Tracker) sorted() []*session {
	all := make([]*session, 0, len(t.active)+len(t.ended))
	for _, s := range t.active {
		all = append(all, s)
	}
	all = append(all, t.ended...)
	slices.SortFunc(all, cmpSessions)
	return all
}

// SessionOf returns the innermost active session containing p: the session
// of the nearest process in p's proven creator chain (p included) that is
// an active root.
func (t *Tracker) SessionOf(p lineage.ID) (string, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, a := range t.chain(p) {
		if s := t.rootSession(a, true); s != nil {
			return s.ID, true
		}
	}
	return "", false
}

// SessionContaining is SessionOf with the whole session: the innermost
// active session containing p, by p's proven creator chain.
func (t *Tracker) SessionContaining(p lineage.ID) (Session, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, a := range t.chain(p) {
		if s := t.rootSession(a, true); s != nil {
			return s.snapshot(), true
		}
	}
	return Session{}, false
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
