package sessions

import (
	"fmt"
	"log/slog"
	"slices"
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
	// containers are the container claims by what their request named
	// (a full ID, a name or an ID prefix), oldest first (containers.go);
	// nContainers counts them, containersPerUID by owner.
	containers       map[string][]*Container
	nContainers      int
	containersPerUID map[uint32]int
	// starts are the container starts no session sent, by container ID
	// (starts.go), startsPerUID their count by client uid.
	starts       map[string][]Start
	startsPerUID map[uint32]int
	nStarts      int
	st           counters
	// began, when set, is told of every session that begins (OnBegin).
	began func(Session)
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
	containersClaimed     uint64
	containersContested   uint64
	containersRefused     uint64
	containersIgnored     uint64
	startsUnkept          uint64
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
		g:                g,
		log:              log,
		rules:            rules,
		retention:        uint64(DefaultRetention),
		maxEnded:         DefaultMaxEnded,
		maxActivePerUID:  DefaultMaxActivePerUID,
		maxEndedPerUID:   DefaultMaxEndedPerUID,
		nowFn:            cfg.Now,
		withinPID:        cfg.WithinPID,
		active:           make(map[Ref]*session),
		tags:             make(map[tagKey][]*session),
		children:         make(map[Ref]map[*session]struct{}),
		activePerUID:     make(map[uint32]int),
		suffix:           make(map[Ref]int),
		names:            make(map[string][]*session),
		endedPerUID:      make(map[uint32]int),
		byPID:            make(map[uint32][]*session),
		refused:          make(map[lineage.ID]bool),
		containers:       make(map[string][]*Container),
		containersPerUID: make(map[uint32]int),
		starts:           make(map[string][]Start),
		startsPerUID:     make(map[uint32]int),
		logs:             newLogLimiter(),
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

// OnBegin has f told of every session that begins from now on (a rule,
// a tag, Begin, Scan), with the tracker's lock held: f must not call the
// tracker, nor block. Ends and markers are the Actions the tracker
// returns. The agent sets it once a restored tracker has replayed its
// journal, so a replayed begin is not told twice.
func (t *Tracker) OnBegin(f func(Session)) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.began = f
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
	switch ev.Kind {
	case lineage.KindExec:
		acts = t.observeExec(ev, acts)
	case lineage.KindRequest:
		t.observeRequest(ev)
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

// Stats returns the tracker's counters.
func (t *Tracker) Stats() Stats {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.stats()
}

func (t *Tracker) stats() Stats {
	return Stats{
		Active:              len(t.active),
		Retained:            len(t.ended),
		Begun:               cloneMap(t.st.begun),
		Ended:               cloneMap(t.st.ended),
		EndReasons:          cloneMap(t.st.reasons),
		Dropped:             t.st.dropped,
		MarkersAccepted:     t.st.markersAccepted,
		MarkersDuplicate:    t.st.markersDuplicate,
		MarkersRefused:      t.st.markersRefused,
		MarkersUnmatched:    t.st.markersUnmatched,
		Generations:         t.st.generations,
		GenerationUnknown:   t.st.generationUnknown,
		TagsRefused:         t.st.tagsRefused,
		RefusedOverCap:      t.st.refusedCap,
		DroppedOverQuota:    t.st.droppedQuota,
		LogsSuppressed:      t.logs.Suppressed,
		Deduplicated:        t.st.deduplicated,
		Containers:          t.nContainers,
		ContainersClaimed:   t.st.containersClaimed,
		ContainersContested: t.st.containersContested,
		ContainersRefused:   t.st.containersRefused,
		ContainersIgnored:   t.st.containersIgnored,
		ContainerStarts:     t.nStarts,
		StartsUnkept:        t.st.startsUnkept,
	}
}

func cloneMap(m map[string]uint64) map[string]uint64 {
	out := make(map[string]uint64, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}
