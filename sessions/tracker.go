package sessions

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/mcptrace/mcptrace/internal/ratelog"
	"github.com/mcptrace/mcptrace/lineage"
	"github.com/mcptrace/mcptrace/procmatch"
)

// Tracker keeps the sessions of one node over a lineage graph.
//
// It is safe for concurrent use: one mutex guards it and every method takes
// it for its whole run. Methods call the graph's queries while holding it
// (lock order tracker → graph; the graph never calls back). Values returned
// are copies.
type Tracker struct {
	g         *lineage.Graph
	log       *slog.Logger
	rules     []*procmatch.Matcher
	retention uint64
	maxEnded  int
	// maxActivePerUID and maxEndedPerUID: Config.MaxActivePerUID and
	// Config.MaxEndedPerUID, defaults filled in.
	maxActivePerUID int
	maxEndedPerUID  int
	nowFn           func() uint64
	// withinPID and within: Config.WithinPID and, once found in the
	// graph, that process's identity.
	withinPID uint32
	within    lineage.ID

	mu    sync.Mutex
	clock uint64 // newest time seen
	// active maps every active session's Ref (owner and ID: IDs are
	// scoped by owner) to it.
	active map[Ref]*session
	// Indexes of the active sessions, kept by addActive, removeActive
	// and setParent so that no begin, tag, marker or end scans them all:
	// tags by owner and tag (tags are scoped by owner), children by
	// their parent's Ref (top-level sessions are not indexed),
	// activePerUID counts them by owner, and suffix remembers the last
	// ".N" uniqueID gave an owner's base while its tag is in use.
	tags map[tagKey][]*session
	// names lists the active sessions by ID and by tag, across owners:
	// for a caller naming a session it is related to by creation, and for
	// root naming an ID without its owner.
	names        map[string][]*session
	children     map[Ref]map[*session]struct{}
	activePerUID map[uint32]int
	suffix       map[Ref]int
	// ended lists the retained ended sessions, oldest end first, and
	// endedPerUID counts them by owner.
	ended       []*session
	endedPerUID map[uint32]int
	// logs rate-limits the per-session info logs of each owner.
	logs *ratelog.Limiter[uint32]
	// byPID lists active and retained ended sessions by root PID.
	byPID map[uint32][]*session
	// refused remembers processes whose tag was refused, seen as an exec
	// or by Scan, so that a Scan does not log and count them again while
	// they live. Pruned on each Scan, bounded by maxRefused.
	refused map[lineage.ID]bool
	// marks remembers recent markers seen as execs (see markRecord).
	marks []markRecord
	st    counters
}

// tagKey names a tag: tags are scoped by the owner's uid, so two users
// may both declare `work` and neither's refuses the other's.
type tagKey struct {
	owner uint32
	tag   string
}

type session struct {
	Session
	// rule is the name of the rule the root's image matched, if any, even
	// for a session of another origin (`mcptrace run -- codex`): a process
	// inside an active session with this rule begins no second one.
	rule string
}

type counters struct {
	begun, ended, reasons map[string]uint64
	dropped               uint64
	markersAccepted       uint64
	markersDuplicate      uint64
	markersRefused        uint64
	markersUnmatched      uint64
	tagsRefused           uint64
	refusedCap            uint64
	droppedQuota          uint64
	deduplicated          uint64
	generations           uint64
	generationUnknown     uint64
}

// NewTracker returns a tracker over g. It fails only when a rule of
// cfg.Rules is invalid. A nil log discards.
func NewTracker(g *lineage.Graph, cfg Config, log *slog.Logger) (*Tracker, error) {
	var all []Rule
	if cfg.DefaultRules {
		all = DefaultRules()
	}
	all = append(all, cfg.Rules...)
	rules, err := compileRules(all)
	if err != nil {
		return nil, fmt.Errorf("session rules: %w", err)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	t := &Tracker{
		g:               g,
		log:             log,
		rules:           rules,
		retention:       uint64(DefaultRetention),
		maxEnded:        DefaultMaxEnded,
		maxActivePerUID: DefaultMaxActivePerUID,
		maxEndedPerUID:  DefaultMaxEndedPerUID,
		nowFn:           cfg.Now,
		withinPID:       cfg.WithinPID,
		active:          make(map[Ref]*session),
		tags:            make(map[tagKey][]*session),
		children:        make(map[Ref]map[*session]struct{}),
		activePerUID:    make(map[uint32]int),
		suffix:          make(map[Ref]int),
		names:           make(map[string][]*session),
		endedPerUID:     make(map[uint32]int),
		byPID:           make(map[uint32][]*session),
		refused:         make(map[lineage.ID]bool),
		logs:            newLogLimiter(),
		st: counters{
			begun:   make(map[string]uint64),
			ended:   make(map[string]uint64),
			reasons: make(map[string]uint64),
		},
	}
	if cfg.Retention > 0 {
		t.retention = uint64(cfg.Retention)
	}
	if cfg.MaxEnded > 0 {
		t.maxEnded = cfg.MaxEnded
	}
	if cfg.MaxActivePerUID > 0 {
		t.maxActivePerUID = cfg.MaxActivePerUID
	}
	if cfg.MaxEndedPerUID > 0 {
		t.maxEndedPerUID = cfg.MaxEndedPerUID
	}
	return t, nil
}

// SetLogger replaces the tracker's logger: an agent that replays a
// journal through a restored tracker keeps it quiet until it is done.
func (t *Tracker) SetLogger(log *slog.Logger) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	t.log = log
}

// MatchRule returns the name of the first rule in effect that matches im,
// for diagnostics ("why is my host not a session?").
func (t *Tracker) MatchRule(im Image) (string, bool) {
	if r := matchRules(t.rules, im); r != nil {
		return r.Rule().Name, true
	}
	return "", false
}

func (t *Tracker) now() uint64 {
	if t.nowFn != nil {
		t.clock = max(t.clock, t.nowFn())
	}
	return t.clock
}

// Observe reacts to one kernel event. Call it after g.Apply(ev), for every
// event, in the order applied. It
//   - ends the session whose root ev reports exited (or that the graph
//     inferred dead because its PID now names another process);
//   - on exec: takes `mcptrace run|exec` as tags, `mcptrace mark destroy`
//     as a marker from ev.Proc (authorized as Mark is; a refusal is logged
//     and counted), and otherwise matches the rules on the new image.
//
// A root that the graph already shows exited (events out of order) begins
// and ends at once, so its members are still reported.
func (t *Tracker) Observe(ev lineage.Event) []Action {
	if ev.Proc.PID == 0 {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.clock = max(t.clock, ev.Time)
	var acts []Action
	if len(t.byPID[ev.Proc.PID]) > 0 {
		acts = t.checkRoots(ev, acts)
	}
	if ev.Kind == lineage.KindExec {
		acts = t.observeExec(ev, acts)
	}
	return acts
}

// checkRoots looks at the active sessions rooted at ev.Proc.PID.
func (t *Tracker) checkRoots(ev lineage.Event, acts []Action) []Action {
	for _, s := range slices.Clone(t.byPID[ev.Proc.PID]) {
		if s.State != Active {
			continue
		}
		p, ok := t.g.Get(s.Root)
		if !ok {
			acts = t.end(s, ReasonRootGone, fmt.Sprintf("root %v is no longer in the graph", s.Root), ev.Time, acts)
			continue
		}
		s.Root = p.ID
		self := p.ID == ev.Proc
		switch {
		case self && ev.Kind == lineage.KindExit:
			acts = t.end(s, ReasonRootExit, exitDetail(p), ev.Time, acts)
		case p.Exited:
			acts = t.end(s, rootEndReason(p), exitDetail(p), ev.Time, acts)
		case self && ev.Kind == lineage.KindFork && s.Parent == "":
			// The fork arrived after the session began: the root may now
			// have a creator, and with it an enclosing session.
			t.reattach(s)
		}
	}
	return acts
}

func rootEndReason(p lineage.Process) string {
	if p.Gaps&lineage.GapNoExit != 0 {
		return ReasonRootGone
	}
	return ReasonRootExit
}

func exitDetail(p lineage.Process) string {
	switch {
	case p.Gaps&lineage.GapNoExit != 0:
		return fmt.Sprintf("root pid %d ended without an exit event (lost, or its PID was reused)", p.ID.PID)
	case p.Signal != 0:
		return fmt.Sprintf("root pid %d killed by signal %d", p.ID.PID, p.Signal)
	}
	return fmt.Sprintf("root pid %d exited with code %d", p.ID.PID, p.ExitCode)
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
			t.logFor(p.UID, slog.LevelWarn, "session tag refused", "pid", p.ID.PID, "uid", p.UID, "session", ratelog.Field(cmd.id), "err", ratelog.Field(err.Error()))
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
			t.logFor(ev.UID, slog.LevelWarn, "destroy marker not applied", "via", "exec", "pid", ev.Proc.PID, "uid", ev.UID, "session", ratelog.Field(cmd.id), "err", ratelog.Field(err.Error()))
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

// endIfExited ends the active session rooted at id if the graph already
// shows id exited.
func (t *Tracker) endIfExited(id lineage.ID, at uint64, acts []Action) []Action {
	s := t.rootSession(id, true)
	if s == nil {
		return acts
	}
	if p, ok := t.g.Get(id); ok && p.Exited {
		acts = t.end(s, rootEndReason(p), exitDetail(p), at, acts)
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
		if s := t.rootSession(a.ID, true); s != nil && s.rule == name {
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
	id := t.uniqueID(p.UID, name+"-"+strconv.FormatUint(uint64(p.ID.PID), 10))
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
		return refuse(fmt.Errorf("%w: argv was truncated at the session id %q", ErrBadID, cmd.id))
	case cmd.id != "" && !ValidID(cmd.id):
		return refuse(fmt.Errorf("%w: %q", ErrBadID, cmd.id))
	case !rootable(p):
		return refuse(fmt.Errorf("%w: pid %d", ErrNotRootable, p.ID.PID))
	}
	if err := t.admit(p.UID); err != nil {
		return refuse(err)
	}
	tagID := cmd.id
	if tagID == "" {
		tagID = t.uniqueID(p.UID, origin+"-"+strconv.FormatUint(uint64(p.ID.PID), 10))
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
		return Session{}, fmt.Errorf("%w: %q", ErrBadID, id)
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
		prefix := strings.TrimPrefix(origin, OriginRule)
		tagID = t.uniqueID(p.UID, prefix+"-"+strconv.FormatUint(uint64(p.ID.PID), 10))
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
func (t *Tracker) start(p lineage.Process, chain []lineage.Process, id, tag, origin, ruleName string, at uint64) *session {
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
	t.st.begun[origin]++
	t.logFor(p.UID, slog.LevelInfo, "session began", "session", id, "tag", tag, "root_pid", p.ID.PID, "owner_uid", p.UID, "origin", origin, "parent", s.Parent, "parent_owner_uid", s.ParentOwner)
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
func (t *Tracker) enclosing(chain []lineage.Process) *session {
	for i := 1; i < len(chain); i++ {
		if s := t.rootSession(chain[i].ID, true); s != nil {
			return s
		}
	}
	return nil
}

// chain returns id's process and its creators, innermost first, as far as
// the graph proves them: it stops at a process flagged GapUnknownCreator,
// whose creator the graph only stands in for. Nil when id is unknown.
func (t *Tracker) chain(id lineage.ID) []lineage.Process {
	anc := t.g.Ancestors(id)
	for i, a := range anc {
		if a.Gaps&lineage.GapUnknownCreator != 0 {
			return anc[:i+1]
		}
	}
	return anc
}

// inScope reports whether id is within Config.WithinPID's subtree (always,
// when it is 0). The scope's identity is fixed the first time its PID is
// found alive in the graph, so a recycled PID never widens it; a chain
// the graph cannot prove (unknown creator) is outside.
func (t *Tracker) inScope(id lineage.ID) bool {
	if t.withinPID == 0 {
		return true
	}
	if t.within.IsZero() {
		p, ok := t.g.Lookup(t.withinPID)
		if !ok || p.Exited {
			return false
		}
		t.within = p.ID
	}
	for _, a := range t.chain(id) {
		if a.ID == t.within {
			return true
		}
		if a.ID.PID == t.within.PID {
			// The graph may have refined a /proc identity to the kernel's
			// exact one since: resolve it as session roots are.
			if p, ok := t.g.Get(t.within); ok && p.ID == a.ID {
				t.within = a.ID
				return true
			}
			return false
		}
	}
	return false
}

// inChain reports whether x is root or one of root's proven creators.
func (t *Tracker) inChain(x, root lineage.ID) bool { return t.g.InCreatorChain(x, root) }

// rootSession returns the session rooted at the process id (a current
// graph identity): the active one, else (unless activeOnly) the newest
// retained ended one. Session roots are resolved through the graph, so a
// root seeded with a coarse identity matches its exact one, and a recycled
// PID never matches.
func (t *Tracker) rootSession(id lineage.ID, activeOnly bool) *session {
	var found *session
	for _, s := range t.byPID[id.PID] {
		if !t.isRoot(s, id) {
			continue
		}
		if s.State == Active {
			return s
		}
		if !activeOnly && (found == nil || s.EndedAt >= found.EndedAt) {
			found = s
		}
	}
	return found
}

func (t *Tracker) isRoot(s *session, id lineage.ID) bool {
	if s.Root == id {
		return true
	}
	if s.Root.PID != id.PID {
		return false
	}
	p, ok := t.g.Get(s.Root)
	if ok && p.ID == id {
		s.Root = id
		return true
	}
	return false
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

// end ends s and, first, every active session nested in it, appending one
// Action per session, innermost first.
func (t *Tracker) end(s *session, reason, detail string, at uint64, acts []Action) []Action {
	return t.endWithin(s, reason, detail, at, "", acts)
}

// endWithin is end for a session that ends because the ending keyed
// within ends ("" for a session that ends on its own).
func (t *Tracker) endWithin(s *session, reason, detail string, at uint64, within string, acts []Action) []Action {
	if s.State != Active {
		return acts
	}
	key := EndingKey(s.Session, 0)
	for _, c := range t.nested(s.Ref()) {
		acts = t.endWithin(c, ReasonParentEnded, fmt.Sprintf("enclosing session %q ended: %s", s.ID, detail), at, key, acts)
	}
	t.removeActive(s)
	s.State = Ended
	s.EndedAt = at
	s.EndReason = reason
	t.st.ended[s.Origin]++
	t.st.reasons[reason]++
	t.logFor(s.Owner, slog.LevelInfo, "session ended", "session", s.ID, "root_pid", s.Root.PID, "owner_uid", s.Owner, "reason", reason, "detail", detail)
	acts = append(acts, Action{End: s.snapshot(), Reason: detail, Within: within})
	t.retain(s)
	return acts
}

// nested returns the active sessions nested in r, by Began then ID.
func (t *Tracker) nested(r Ref) []*session {
	var out []*session
	for s := range t.children[r] {
		out = append(out, s)
	}
	slices.SortFunc(out, cmpSessions)
	return out
}

func cmpSessions(a, b *session) int {
	return cmp.Or(
		cmp.Compare(a.Began, b.Began),
		cmp.Compare(a.Root.Start, b.Root.Start),
		cmp.Compare(a.ID, b.ID),
	)
}

// drop forgets the i-th retained ended session.
func (t *Tracker) drop(i int) {
	s := t.ended[i]
	t.ended = slices.Delete(t.ended, i, i+1)
	if t.endedPerUID[s.Owner]--; t.endedPerUID[s.Owner] <= 0 {
		delete(t.endedPerUID, s.Owner)
	}
	list := t.byPID[s.Root.PID]
	if j := slices.Index(list, s); j >= 0 {
		list = slices.Delete(list, j, j+1)
	}
	if len(list) == 0 {
		delete(t.byPID, s.Root.PID)
	} else {
		t.byPID[s.Root.PID] = list
	}
	t.st.dropped++
}

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
	procs := t.g.Processes()
	alive := make(map[lineage.ID]bool)
	for _, p := range procs {
		if p.Exited || !rootable(p) || !t.inScope(p.ID) {
			continue
		}
		alive[p.ID] = true
		if cmd, truncated, ok := lastTag(p.Images); ok && !t.refused[p.ID] {
			if err := t.tag(p, cmd, truncated, at, tagScan); err != nil {
				t.refusedTag(p.ID)
				t.logFor(p.UID, slog.LevelWarn, "session tag refused", "via", "scan", "pid", p.ID.PID, "uid", p.UID, "session", ratelog.Field(cmd.id), "err", ratelog.Field(err.Error()))
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

// Sweep ends the active sessions whose root the graph shows exited or no
// longer knows (exit events lost), and forgets ended sessions older than
// the retention at now (CLOCK_BOOTTIME ns). Call it periodically, e.g.
// with Graph.Retire.
func (t *Tracker) Sweep(now uint64) []Action {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.clock = max(t.clock, now)
	acts := t.sweepRoots(now, nil)
	if now > t.retention {
		cutoff := now - t.retention
		for i := 0; i < len(t.ended); {
			if t.ended[i].EndedAt < cutoff {
				t.drop(i)
				continue
			}
			i++
		}
	}
	return acts
}

func (t *Tracker) sweepRoots(at uint64, acts []Action) []Action {
	var list []*session
	for _, s := range t.active {
		list = append(list, s)
	}
	slices.SortFunc(list, cmpSessions)
	for _, s := range list {
		if s.State != Active {
			continue // ended above, nested in another
		}
		p, ok := t.g.Get(s.Root)
		switch {
		case !ok:
			acts = t.end(s, ReasonRootGone, fmt.Sprintf("root %v is no longer in the graph", s.Root), at, acts)
		case p.Exited:
			s.Root = p.ID
			acts = t.end(s, rootEndReason(p), exitDetail(p), at, acts)
		}
	}
	return acts
}

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

// MembersOf is Members of one session instance (see Action.Key): the
// processes an ending of s kills, never those of a later session that
// took its ID.
func (t *Tracker) MembersOf(s Session) []lineage.Process {
	t.mu.Lock()
	defer t.mu.Unlock()
	if x := t.instance(s.Ref(), s.Began); x != nil {
		return t.members(x, true, func(lineage.Process) bool { return true })
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

// Members returns the session's root and everything it created at any
// depth, alive and exited, in the graph's pre-order (Graph.Descendants):
// including processes that daemonized, changed process group or were
// reparented, and those of the sessions nested in it. A process flagged
// lineage.GapUnknownCreator (the graph only stands in for its creator) is
// left out with everything below it. Processes seeded from /proc at agent
// start (lineage.GapSeeded) are taken with the creator the graph gives
// them: their parent at that time, so one that had already been reparented
// to init or a subreaper is not a member. For an ended session the list
// shrinks as the graph retires dead branches. Nil for an unknown ID.
func (t *Tracker) Members(r Ref) []lineage.Process {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.get(r)
	if s == nil {
		return nil
	}
	return t.members(s, true, func(lineage.Process) bool { return true })
}

// members returns the root of s (when withRoot) and its proven
// descendants in pre-order, keeping only the branches of the root's
// children that branch accepts. A process flagged GapUnknownCreator is
// left out with everything below it.
func (t *Tracker) members(s *session, withRoot bool, branch func(child lineage.Process) bool) []lineage.Process {
	f := memberFilter{withRoot: withRoot, branch: branch}
	var out []lineage.Process
	for _, p := range t.g.Descendants(s.Root) {
		if f.take(p) {
			out = append(out, p)
		}
	}
	return out
}

// memberFilter tells, for the processes of the subtree of a session's
// root in Descendants order, which are members (see Members): the root
// (when withRoot), and each process whose creator is a member, keeping
// only the branches of the root's children that branch accepts; a process
// flagged GapUnknownCreator is left out with everything below it.
type memberFilter struct {
	withRoot bool
	branch   func(child lineage.Process) bool
	root     lineage.ID
	in       map[lineage.ID]bool
}

func (f *memberFilter) take(p lineage.Process) bool {
	if f.in == nil { // the root comes first
		f.root, f.in = p.ID, map[lineage.ID]bool{p.ID: true}
		return f.withRoot
	}
	if p.Gaps&lineage.GapUnknownCreator != 0 || !f.in[p.Creator] || p.Creator == f.root && !f.branch(p) {
		return false
	}
	f.in[p.ID] = true
	return true
}

// Counted is a session with how many of its members (root included) a
// caller may see, and how many of those are alive.
type Counted struct {
	Session
	Members, Alive int
}

// SessionsCounted is Sessions narrowed to those keep accepts, each with
// the count of its members that count accepts, in O(sessions + their
// members) and without copying any member (count sees each without its
// Images). keep and count run with the Tracker's lock held and must not
// call it.
func (t *Tracker) SessionsCounted(keep func(Session) bool, count func(lineage.Process) bool) []Counted {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []Counted
	for _, s := range t.sorted() {
		snap := s.snapshot()
		if !keep(snap) {
			continue
		}
		c := Counted{Session: snap}
		f := memberFilter{withRoot: true, branch: func(lineage.Process) bool { return true }}
		t.g.WalkDescendants(s.Root, func(p lineage.Process) {
			if f.take(p) && count(p) {
				c.Members++
				if !p.Exited {
					c.Alive++
				}
			}
		})
		out = append(out, c)
	}
	return out
}

// SessionOf returns the innermost active session containing p: the session
// of the nearest process in p's proven creator chain (p included) that is
// an active root.
func (t *Tracker) SessionOf(p lineage.ID) (string, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, a := range t.chain(p) {
		if s := t.rootSession(a.ID, true); s != nil {
			return s.ID, true
		}
	}
	return "", false
}

// Stats returns the tracker's counters.
func (t *Tracker) Stats() Stats {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.stats()
}

func (t *Tracker) stats() Stats {
	return Stats{
		Active:            len(t.active),
		Retained:          len(t.ended),
		Begun:             cloneMap(t.st.begun),
		Ended:             cloneMap(t.st.ended),
		EndReasons:        cloneMap(t.st.reasons),
		Dropped:           t.st.dropped,
		MarkersAccepted:   t.st.markersAccepted,
		MarkersDuplicate:  t.st.markersDuplicate,
		MarkersRefused:    t.st.markersRefused,
		MarkersUnmatched:  t.st.markersUnmatched,
		Generations:       t.st.generations,
		GenerationUnknown: t.st.generationUnknown,
		TagsRefused:       t.st.tagsRefused,
		RefusedOverCap:    t.st.refusedCap,
		DroppedOverQuota:  t.st.droppedQuota,
		LogsSuppressed:    t.logs.Suppressed,
		Deduplicated:      t.st.deduplicated,
	}
}

func cloneMap(m map[string]uint64) map[string]uint64 {
	out := make(map[string]uint64, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}
