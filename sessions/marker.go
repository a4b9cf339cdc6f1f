package sessions

import (
	"fmt"
	"log/slog"
	"slices"

	"github.com/mcptrace/mcptrace/lineage"
)

// Destroy markers and `session end`: who may end what, and what a marker
// ends (a generation below a host, or a whole `mcptrace exec` sub-session).

// OpKind names an Op.
type OpKind string

const (
	OpBegin OpKind = "begin" // declare a root (`mcptrace session begin`)
	OpMark  OpKind = "mark"  // a destroy marker sent through the API
	OpEnd   OpKind = "end"   // end a session whole (`mcptrace session end`)
)

// Op is a request to the tracker from outside the kernel's event stream:
// the API's. An Op carries its time, so an agent that journals the Ops it
// applied (as returned by Do, with At filled in) and applies them again
// after a restart, in the same order among the events, gets the same
// outcome.
type Op struct {
	Kind OpKind `json:"kind"`
	// At is when the Op takes effect, CLOCK_BOOTTIME ns; 0 means now
	// (Config.Now, else the newest time seen).
	At uint64 `json:"at_ns"`
	// Caller is the process that asked (mark, end), resolved in the graph,
	// and UID its uid from the socket's credentials.
	Caller lineage.ID `json:"caller,omitzero"`
	UID    uint32     `json:"uid"`
	// Session is the target of a mark ("" for the session whose root
	// created the caller) or an end, and the requested ID of a begin.
	Session string `json:"session,omitempty"`
	// Owner, when set, names whose session Session is (mark, end): IDs
	// are scoped by owner. Unset: the caller's own, failing that one
	// rooted at the caller or its creators, failing that (root only) the
	// one owner's that has it.
	Owner *uint32 `json:"owner,omitempty"`
	// Root and Origin: begin only.
	Root   lineage.ID `json:"root,omitzero"`
	Origin string     `json:"origin,omitempty"`
}

// Result is what an Op did.
type Result struct {
	// Actions are the sessions and generations it ended.
	Actions []Action
	// Session is the session a begin declared.
	Session Session
	// Duplicate: the marker had already been delivered — the API call of
	// a `mcptrace mark destroy` whose exec the tracker saw first, or a
	// marker for a session that had already ended. Actions then lists what
	// the first delivery ended, if the tracker still knows it.
	Duplicate bool
}

// Do applies op and returns it as applied (At filled in) with its result.
// Errors wrap ErrNotAuthorized, ErrNoSession, ErrOutOfScope and the errors
// of Begin.
func (t *Tracker) Do(op Op) (Op, Result, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if op.At == 0 {
		op.At = t.now()
	} else {
		t.clock = max(t.clock, op.At)
	}
	var (
		res Result
		err error
	)
	switch op.Kind {
	case OpBegin:
		res.Session, err = t.begin(op.Root, op.Session, op.Origin, op.At)
	case OpMark:
		res, err = t.mark(op.Caller, op.UID, op.Session, op.Owner, op.At, "api")
	case OpEnd:
		res, err = t.endOp(op.Caller, op.UID, op.Session, op.Owner, op.At)
	default:
		err = fmt.Errorf("unknown tracker operation %q", op.Kind)
	}
	return op, res, err
}

// Mark applies a destroy marker sent through the API by caller (from the
// socket's credentials, resolved in the graph) with uid callerUID.
//
// Without sessionID it ends what the session whose root created the caller
// marks for ending, provided callerUID is 0 or that session's owner
// (otherwise it is refused, counted, and answered as ErrNoSession, as if
// there were none); with it, the caller's own active sessions declared
// with that tag (see Session.Tag; tags are scoped by owner), failing
// those the active session with that ID and its owner's sessions of that
// tag — all or none. Each must allow the caller, who must be uid 0, the
// session's owner, or the session's root or one of the root's creators. A
// refusal returns an error wrapping ErrNotAuthorized and is counted.
//
// What a marker ends: for a session rooted at a host (Session.SparesRoot),
// the generation in force below the root — every process the root created
// before the marker, and everything those created — while the root and
// the session carry on with the next generation (Marker); for a
// sub-session of `mcptrace exec`, the whole sub-session. Sessions nested in
// what ends end too, never a parent or a sibling.
//
// The same marker delivered twice is applied once: the API call of a
// `mcptrace mark destroy` whose exec the tracker already saw, or a marker
// for a session that already ended, returns no action and no error.
func (t *Tracker) Mark(caller lineage.ID, callerUID uint32, sessionID string) ([]Action, error) {
	_, res, err := t.Do(Op{Kind: OpMark, Caller: caller, UID: callerUID, Session: sessionID})
	if res.Duplicate {
		return nil, err
	}
	return res.Actions, err
}

// End ends the session sessionID whole, its root included, with every
// session nested in it (`mcptrace session end`); a tag ends every active
// session declared with it. The caller is authorized as for Mark with a
// session ID. Ending a session that already ended returns no action and no
// error.
func (t *Tracker) End(caller lineage.ID, callerUID uint32, sessionID string) ([]Action, error) {
	_, res, err := t.Do(Op{Kind: OpEnd, Caller: caller, UID: callerUID, Session: sessionID})
	return res.Actions, err
}

// markRecord remembers what a marker seen as an exec did, so that the same
// marker arriving again (its API call, a duplicate event) is recognised.
type markRecord struct {
	Sender lineage.ID `json:"sender"`
	At     uint64     `json:"at_ns"`
	Ended  []Action   `json:"ended,omitempty"`
}

// maxMarkRecords bounds the remembered exec markers: a marker's API call
// follows its exec within the CLI's run, so only recent ones matter.
const maxMarkRecords = 256

func (t *Tracker) findMark(sender lineage.ID, at uint64) *markRecord {
	for i := len(t.marks) - 1; i >= 0; i-- {
		if m := &t.marks[i]; m.Sender == sender && m.At == at {
			return m
		}
	}
	return nil
}

func (t *Tracker) rememberMark(sender lineage.ID, at uint64, res Result) {
	t.marks = append(t.marks, markRecord{Sender: sender, At: at, Ended: res.Actions})
	if len(t.marks) > maxMarkRecords {
		t.marks = slices.Delete(t.marks, 0, len(t.marks)-maxMarkRecords)
	}
}

// replay gives the result a remembered marker had. Only markers that
// succeeded are remembered (mark).
func (m *markRecord) replay() (Result, error) {
	return Result{Actions: m.Ended, Duplicate: true}, nil
}

// mark applies a destroy marker from caller (uid) for sid at time at, seen
// via "exec" or "api".
func (t *Tracker) mark(caller lineage.ID, uid uint32, sid string, owner *uint32, at uint64, via string) (Result, error) {
	cp, known := t.g.Get(caller)
	if known {
		caller = cp.ID
	}
	switch via {
	case "exec":
		if m := t.findMark(caller, at); m != nil {
			t.st.markersDuplicate++
			return m.replay() // the same exec event applied twice
		}
	case "api":
		// The API call of `mcptrace mark destroy` itself: the process's
		// exec, with this marker in its argv, was applied before (the
		// agent applies the kernel's events up to a request before it
		// asks), unless the kernel lost it. Either way the marker takes
		// effect at its exec: applied a second time it is recognised by
		// its sender and time (session.hasMarker), and applied for the
		// first time it ends what its exec would have.
		if cur := cp.Current(); known && cur.Source == lineage.SourceKernel {
			if c := parseCommand(cur.Argv, cur.ArgvTruncated); c.kind == cmdMark && c.id == sid {
				if m := t.findMark(caller, cur.Time); m != nil {
					t.st.markersDuplicate++
					return m.replay()
				}
				at = cur.Time
			}
		}
	}
	res, err := t.markTargets(caller, cp, known, uid, sid, owner, at, via)
	if via == "exec" && err == nil && !res.Duplicate {
		// Only markers that ended something are remembered: refusals
		// cannot push a user's marker out of the table.
		t.rememberMark(caller, at, res)
	}
	return res, err
}

func (t *Tracker) markTargets(caller lineage.ID, cp lineage.Process, known bool, uid uint32, sid string, owner *uint32, at uint64, via string) (Result, error) {
	who := fmt.Sprintf("pid %d uid %d", caller.PID, uid)
	if !t.inScope(caller) {
		t.st.markersRefused++
		return Result{}, fmt.Errorf("%w: %w: the caller (%s)", ErrNotAuthorized, ErrOutOfScope, who)
	}
	if sid == "" {
		// The caller's own creator: none known, or one folded out of the
		// chain (an exited process, never a session's pinned root).
		if !known || cp.Creator.IsZero() || cp.Gaps&lineage.GapUnknownCreator != 0 || cp.CreatorsElided > 0 {
			t.st.markersUnmatched++
			return Result{}, fmt.Errorf("%w: the creator of the caller (%s) is not known", ErrNoSession, who)
		}
		s := t.rootSession(cp.Creator, false)
		if s == nil {
			t.st.markersUnmatched++
			return Result{}, fmt.Errorf("%w: the caller (%s) was not created by a session root; name the session with --session", ErrNoSession, who)
		}
		if uid != 0 && uid != s.Owner {
			// A tenant's tool run by a root-owned host (a gateway that
			// runs tools as per-tenant uids) does not end the host's
			// session. Refused as if there were no session.
			t.st.markersRefused++
			t.logFor(uid, slog.LevelWarn, "destroy marker refused: the caller's uid is neither root nor the session owner's",
				"via", via, "pid", caller.PID, "uid", uid, "session", s.ID, "owner_uid", s.Owner)
			return Result{}, fmt.Errorf("%w: the caller (%s) was not created by a session root; name the session with --session", ErrNoSession, who)
		}
		if s.State != Active || s.hasMarker(caller, at) {
			t.st.markersDuplicate++
			return Result{Duplicate: true}, nil
		}
		t.st.markersAccepted++
		detail := fmt.Sprintf("destroy marker (%s) from %s, a child of the root", via, who)
		return Result{Actions: t.markSession(s, detail, caller, uid, at, via, nil)}, nil
	}
	targets, dup, err := t.targets(caller, known, uid, sid, owner)
	if err != nil {
		t.st.markersUnmatched++
		return Result{}, err
	}
	if err := t.authorize(targets, caller, known, uid, who); err != nil {
		t.st.markersRefused++
		return Result{}, err
	}
	if dup || !slices.ContainsFunc(targets, func(s *session) bool { return !s.hasMarker(caller, at) }) {
		t.st.markersDuplicate++
		return Result{Duplicate: true}, nil
	}
	t.st.markersAccepted++
	var acts []Action
	detail := fmt.Sprintf("destroy marker (%s) for %q from %s", via, sid, who)
	for _, s := range targets {
		// A tag's earlier target may have ended a later one.
		if s.State == Active && !s.hasMarker(caller, at) {
			acts = t.markSession(s, detail, caller, uid, at, via, acts)
		}
	}
	return Result{Actions: acts}, nil
}

// markSession applies a marker to one active session: a new generation
// where the root is spared, else the end of the session.
func (t *Tracker) markSession(s *session, detail string, sender lineage.ID, uid uint32, at uint64, via string, acts []Action) []Action {
	if !s.SparesRoot() {
		return t.end(s, ReasonMarker, detail, at, acts)
	}
	return t.newGeneration(s, detail, sender, uid, at, via, acts)
}

// authorize allows a caller to end every one of targets: uid 0, the
// session's owner, or the session's root or one of its creators.
func (t *Tracker) authorize(targets []*session, caller lineage.ID, known bool, uid uint32, who string) error {
	for _, s := range targets {
		if uid == 0 || uid == s.Owner || known && t.inChain(caller, s.Root) {
			continue
		}
		return fmt.Errorf("%w: %s may not end session %q (owner uid %d, root pid %d): not root, not the owner, not the root or one of its creators",
			ErrNotAuthorized, who, s.ID, s.Owner, s.Root.PID)
	}
	return nil
}

// endOp ends the sessions sid names, roots included.
func (t *Tracker) endOp(caller lineage.ID, uid uint32, sid string, owner *uint32, at uint64) (Result, error) {
	cp, known := t.g.Get(caller)
	if known {
		caller = cp.ID
	}
	who := fmt.Sprintf("pid %d uid %d", caller.PID, uid)
	if uid != 0 && !t.inScope(caller) {
		return Result{}, fmt.Errorf("%w: %w: the caller (%s)", ErrNotAuthorized, ErrOutOfScope, who)
	}
	targets, dup, err := t.targets(caller, known, uid, sid, owner)
	if err != nil {
		return Result{}, err
	}
	if err := t.authorize(targets, caller, known, uid, who); err != nil {
		return Result{}, err
	}
	if dup {
		return Result{Duplicate: true}, nil
	}
	var acts []Action
	for _, s := range targets {
		acts = t.end(s, ReasonSessionEnd, fmt.Sprintf("`session end %s` from %s", sid, who), at, acts)
	}
	return Result{Actions: acts}, nil
}
