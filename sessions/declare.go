package sessions

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/mcptrace/mcptrace/internal/ratelog"
	"github.com/mcptrace/mcptrace/lineage"
)

// How sessions begin: host rules matched at exec, `mcptrace run|exec`
// tags, and Begin from the API; and the IDs they get.

// MatchRule returns the name of the first rule in effect that matches im,
// for diagnostics ("why is my host not a session?").
func (t *Tracker) MatchRule(im Image) (string, bool) {
	if r := matchRules(t.rules, im); r != nil {
		return r.Rule().Name, true
	}
	return "", false
}

func (t *Tracker) observeExec(ev lineage.Event, acts []Action) []Action {
	if !t.inScope(ev.Proc) {
		return acts
	}
	switch cmd := parseCommand(ev.Argv, ev.ArgvTruncated); cmd.kind {
	case cmdRun, cmdExec:
		p, ok := t.g.Get(ev.Proc)
		if !ok {
			return acts
		}
		if err := t.tag(p, cmd, ev.ArgvTruncated, ev.Time, tagExec); err != nil {
			t.refusedTag(p.ID)
			// Never the argv: what follows "--" may carry secrets.
			t.logFor(p.UID, slog.LevelWarn, "session tag refused", "pid", p.ID.PID, "uid", p.UID, "session", LogID(cmd.id), "err", ratelog.Field(err.Error()))
			return acts
		}
		return t.endIfExited(p.ID, ev.Time, acts)
	case cmdMark:
		if cmd.bad || (cmd.idLast && ev.ArgvTruncated) {
			t.st.markersUnmatched++
			t.logFor(ev.UID, slog.LevelWarn, "destroy marker ignored: unusable --session", "pid", ev.Proc.PID, "uid", ev.UID, "argv_truncated", ev.ArgvTruncated)
			return acts
		}
		res, err := t.mark(ev.Proc, ev.UID, cmd.id, nil, ev.Time, "exec")
		if err != nil {
			t.logFor(ev.UID, slog.LevelWarn, "destroy marker not applied", "via", "exec", "pid", ev.Proc.PID, "uid", ev.UID, "session", LogID(cmd.id), "err", ratelog.Field(err.Error()))
		}
		if res.Duplicate {
			return acts
		}
		return append(acts, res.Actions...)
	case cmdOther:
		return acts
	}
	r := matchRules(t.rules, Image{Filename: ev.Filename, Comm: ev.Comm, Argv: ev.Argv})
	if r == nil {
		return acts
	}
	p, ok := t.g.Get(ev.Proc)
	if !ok {
		return acts
	}
	if t.ruleRoot(p, r.Rule().Name, ev.Time, false) {
		acts = t.endIfExited(p.ID, ev.Time, acts)
	}
	return acts
}

// ruleRoot begins a session for rule on p unless p is already a root or
// sits inside an active session of the same rule. It reports whether it
// began one. scan: p was found by Scan, not seen exec'ing.
func (t *Tracker) ruleRoot(p lineage.Process, name string, at uint64, scan bool) bool {
	if s := t.rootSession(p.ID, false); s != nil {
		// Already a root. Remember the host it runs, for deduplication.
		// The root of an ended session is never re-rooted by a rule: an
		// enforcer is ending it, or was told not to.
		if s.State == Active && s.rule == "" {
			s.rule = name
		}
		return false
	}
	if !rootable(p) || p.Exited && scan {
		return false
	}
	chain := t.chain(p.ID)
	if len(chain) == 0 {
		return false // retired meanwhile
	}
	for _, a := range chain[1:] {
		if s := t.rootSession(a, true); s != nil && s.rule == name {
			t.st.deduplicated++
			t.log.Debug("rule match inside a session of the same rule", "rule", name, "pid", p.ID.PID, "session", s.ID)
			return false
		}
	}
	if err := t.admit(p.UID); err != nil {
		t.st.refusedCap++
		t.logFor(p.UID, slog.LevelWarn, "host matched a rule but no session began", "rule", name, "pid", p.ID.PID, "uid", p.UID, "err", err)
		return false
	}
	id := t.generatedID(p, name)
	t.start(p, chain, id, id, OriginRule+name, name, at)
	return true
}

// How a tag comes to the tracker: the exec of the command line, a Scan of
// the processes, or the CLI asking before it execs CMD (Begin), whose
// refusal was counted at the exec.
type tagVia uint8

const (
	tagExec tagVia = iota
	tagScan
	tagAsk
)

// tag applies a `mcptrace run|exec` command line seen in p's image.
func (t *Tracker) tag(p lineage.Process, cmd command, truncated bool, at uint64, via tagVia) error {
	origin := OriginRun
	if cmd.kind == cmdExec {
		origin = OriginExec
	}
	scan := via == tagScan
	refuse := func(err error) error {
		if via != tagAsk {
			t.st.tagsRefused++
			if errors.Is(err, ErrTooManySessions) {
				t.st.refusedCap++
			}
		}
		return err
	}
	if s := t.rootSession(p.ID, false); s != nil {
		if s.Origin == origin && (cmd.id == "" || s.Tag == cmd.id) || scan {
			return nil // the same tag seen again (duplicate event, rescan)
		}
		if s.State == Active {
			return refuse(fmt.Errorf("%w: pid %d is the root of session %q", ErrAlreadyRoot, p.ID.PID, s.ID))
		}
	}
	switch {
	case cmd.bad:
		return refuse(fmt.Errorf("%w: --session without a value", ErrBadID))
	case cmd.idLast && truncated:
		return refuse(fmt.Errorf("%w: argv was truncated at the session id", ErrBadID))
	case cmd.id != "" && !ValidID(cmd.id):
		return refuse(fmt.Errorf("%w: %s", ErrBadID, LogID(cmd.id)))
	case !rootable(p):
		return refuse(fmt.Errorf("%w: pid %d", ErrNotRootable, p.ID.PID))
	}
	if err := t.admit(p.UID); err != nil {
		return refuse(err)
	}
	tagID := cmd.id
	if tagID == "" {
		tagID = t.generatedID(p, origin)
	}
	id, err := t.allocate(p.UID, tagID, origin)
	if err != nil {
		return refuse(err)
	}
	t.start(p, t.chain(p.ID), id, tagID, origin, "", at)
	return nil
}

// Begin declares root the root of a session (the API: `mcptrace session begin
// --pid PID [--id ID]`). id "" generates "<origin>-<pid>"; an ID in use is
// an error, except for origin "exec", which joins the tag as Tag.N. origin
// is "api" when empty, else "run", "exec", "api" or "rule:<name>". The
// session is nested in the innermost active session containing root.
// Callers authorize the request (root, or the owner of the process).
func (t *Tracker) Begin(root lineage.ID, id, origin string) (Session, error) {
	_, res, err := t.Do(Op{Kind: OpBegin, Root: root, Session: id, Origin: origin})
	return res.Session, err
}

func (t *Tracker) begin(root lineage.ID, id, origin string, at uint64) (Session, error) {
	if origin == "" {
		origin = OriginAPI
	}
	host := ""
	switch {
	case origin == OriginAPI || origin == OriginRun || origin == OriginExec:
	case strings.HasPrefix(origin, OriginRule) && ruleNamePattern.MatchString(strings.TrimPrefix(origin, OriginRule)):
		host = strings.TrimPrefix(origin, OriginRule)
	default:
		return Session{}, fmt.Errorf("unknown session origin %q", origin)
	}
	if id != "" && !ValidID(id) {
		return Session{}, fmt.Errorf("%w: %s", ErrBadID, LogID(id))
	}
	p, ok := t.g.Get(root)
	switch {
	case !ok:
		return Session{}, fmt.Errorf("%w: %v", ErrUnknownProcess, root)
	case !t.inScope(p.ID):
		return Session{}, fmt.Errorf("%w: pid %d", ErrOutOfScope, p.ID.PID)
	case !rootable(p):
		return Session{}, fmt.Errorf("%w: pid %d", ErrNotRootable, p.ID.PID)
	case p.Exited:
		return Session{}, fmt.Errorf("%w: pid %d", ErrExited, p.ID.PID)
	}
	if origin == OriginAPI {
		// `mcptrace run|exec` asking, before it execs CMD, whether the
		// exec of its own command line declared the session: the answer
		// is the tag's, applied again if it was refused (a refusal is
		// then explained to the CLI, which does not exec).
		if cur := p.Current(); cur.Source != lineage.SourceInherited {
			if cmd := parseCommand(cur.Argv, cur.ArgvTruncated); (cmd.kind == cmdRun || cmd.kind == cmdExec) && cmd.id == id {
				if err := t.tag(p, cmd, cur.ArgvTruncated, at, tagAsk); err != nil {
					return Session{}, err
				}
				if s := t.rootSession(p.ID, true); s != nil {
					return s.snapshot(), nil
				}
			}
		}
	}
	if s := t.rootSession(p.ID, true); s != nil {
		return Session{}, fmt.Errorf("%w: pid %d is the root of session %q", ErrAlreadyRoot, p.ID.PID, s.ID)
	}
	if err := t.admit(p.UID); err != nil {
		t.st.refusedCap++
		return Session{}, err
	}
	tagID := id
	if tagID == "" {
		tagID = t.generatedID(p, strings.TrimPrefix(origin, OriginRule))
	}
	sid, err := t.allocate(p.UID, tagID, origin)
	if err != nil {
		return Session{}, err
	}
	s := t.start(p, t.chain(p.ID), sid, tagID, origin, host, at)
	return s.snapshot(), nil
}

// rootable: never PID 1 (it would make the whole node a session) nor a
// kernel thread.
func rootable(p lineage.Process) bool { return p.ID.PID > 1 && !p.Kernel }

// start registers a new active session rooted at p. chain is p's creator
// chain from t.chain (p first).
func (t *Tracker) start(p lineage.Process, chain []lineage.ID, id, tag, origin, ruleName string, at uint64) *session {
	s := &session{
		Session: Session{
			ID: id, Tag: tag, Root: p.ID, Owner: p.UID, Origin: origin,
			State: Active, Began: at, Generation: 1,
		},
		rule: ruleName,
	}
	if enc := t.enclosing(chain); enc != nil {
		s.Parent, s.ParentOwner = enc.ID, enc.Owner
	}
	t.addActive(s)
	t.adoptBelow(s)
	t.byPID[p.ID.PID] = append(t.byPID[p.ID.PID], s)
	t.g.Claim(p.ID) // its session is walked from it: never folded, its exited members kept (drop unclaims)
	t.st.begun[origin]++
	t.logFor(p.UID, slog.LevelInfo, "session began", "session", id, "tag", tag, "root_pid", p.ID.PID, "owner_uid", p.UID, "origin", origin, "parent", s.Parent, "parent_owner_uid", s.ParentOwner)
	if t.began != nil {
		t.began(s.snapshot())
	}
	return s
}

// reattach gives a top-level session the enclosing session its root's
// creator chain now shows, if any.
func (t *Tracker) reattach(s *session) {
	chain := t.chain(s.Root)
	if len(chain) == 0 {
		return
	}
	if enc := t.enclosing(chain); enc != nil && enc != s {
		t.setParent(s, enc.Ref())
		t.log.Debug("session nested after its root's creator became known", "session", s.ID, "parent", enc.ID)
	}
}

// enclosing returns the innermost active session whose root is a strict
// ancestor in chain (chain[0] is the process itself).
func (t *Tracker) enclosing(chain []lineage.ID) *session {
	for i := 1; i < len(chain); i++ {
		if s := t.rootSession(chain[i], true); s != nil {
			return s
		}
	}
	return nil
}
