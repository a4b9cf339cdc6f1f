package sessions

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/mcptrace/mcptrace/lineage"
)

// State says whether a session is running.
type State uint8

const (
	// Active: the session's root was not seen to end and no marker ended it.
	Active State = iota + 1
	// Ended: the session is over; its members are what an enforcer ends.
	Ended
)

func (s State) String() string {
	switch s {
	case Active:
		return "active"
	case Ended:
		return "ended"
	}
	return fmt.Sprintf("state(%d)", uint8(s))
}

// MarshalText gives "active" or "ended".
func (s State) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText reads "active" or "ended".
func (s *State) UnmarshalText(b []byte) error {
	switch string(b) {
	case "active":
		*s = Active
	case "ended":
		*s = Ended
	default:
		return fmt.Errorf("unknown session state %q", b)
	}
	return nil
}

// Origins: how a session was declared. Rule sessions have the origin
// OriginRule + the rule's name, e.g. "rule:claude".
const (
	OriginRule = "rule:"
	OriginRun  = "run"  // exec of `mcptrace run`
	OriginExec = "exec" // exec of `mcptrace exec`
	OriginAPI  = "api"  // Tracker.Begin (`mcptrace session begin`)
)

// End reasons (Session.EndReason).
const (
	// ReasonRootExit: the kernel reported the root's exit.
	ReasonRootExit = "root-exit"
	// ReasonRootGone: the graph found the root exited or gone without an
	// exit event (lost event, PID reused, absent from /proc on repair).
	ReasonRootGone = "root-gone"
	// ReasonMarker: a destroy marker ended the session (a sub-session of
	// `mcptrace exec`, whose root is the server itself).
	ReasonMarker = "marker"
	// ReasonSessionEnd: `mcptrace session end` ended the session, root
	// included.
	ReasonSessionEnd = "session-end"
	// ReasonParentEnded: the enclosing session ended.
	ReasonParentEnded = "parent-ended"
)

// Session is one agent session: a root process and everything it created,
// at any depth, by creator edge.
type Session struct {
	// ID is unique among the owner's active sessions: IDs are scoped by
	// owner, so two users may both have `work` or `claude-1234`, and what
	// one user's sessions are called never changes what another's are
	// (see Ref).
	ID string `json:"id"`
	// Tag is the ID the session was declared with. It differs from ID only
	// for `mcptrace exec` sub-sessions whose ID was already taken: servers
	// started with the same --session get IDs Tag, Tag.2, Tag.3… and a
	// marker naming Tag ends them all.
	Tag string `json:"tag"`
	// Root is the process whose descendants are the session.
	Root lineage.ID `json:"root"`
	// Parent is the ID of the innermost session enclosing Root when the
	// session began (or when the graph later learned Root's creator), ""
	// at top level; ParentOwner is that session's owner.
	Parent      string `json:"parent,omitempty"`
	ParentOwner uint32 `json:"parent_owner_uid,omitempty"`
	// Owner is the root's uid.
	Owner uint32 `json:"owner_uid"`
	// Origin is "rule:<name>", "run", "exec" or "api".
	Origin string `json:"origin"`
	State  State  `json:"state"`
	// Began and EndedAt are CLOCK_BOOTTIME ns.
	Began   uint64 `json:"began_ns"`
	EndedAt uint64 `json:"ended_ns,omitempty"`
	// EndReason is one of the Reason constants once the session ended.
	EndReason string `json:"end_reason,omitempty"`
	// Generation is 1 plus the number of destroy markers the session
	// survived: a marker ends the generation in force and everything
	// older, and what the root creates from then on is the next one (see
	// Marker). Sessions of `mcptrace exec` end on a marker instead.
	Generation uint32 `json:"generation"`
	// Markers are the destroy markers that ended generations, oldest
	// first; at most MaxMarkers are kept, MarkersDropped counts the older.
	Markers        []Marker `json:"markers,omitempty"`
	MarkersDropped uint32   `json:"markers_dropped,omitempty"`
}

// Ref names a session on the node: its owner and its ID, which is unique
// among that owner's sessions only.
type Ref struct {
	Owner uint32
	ID    string
}

// String is "UID/ID" ('/' is in no ID).
func (r Ref) String() string { return strconv.FormatUint(uint64(r.Owner), 10) + "/" + r.ID }

// Ref names s.
func (s Session) Ref() Ref { return Ref{s.Owner, s.ID} }

// ParentRef names the enclosing session; its ID is "" at top level.
func (s Session) ParentRef() Ref { return Ref{s.ParentOwner, s.Parent} }

// SparesRoot reports whether a destroy marker spares the session's root:
// it does for sessions rooted at a host (`mcptrace run`, `session begin`,
// host rules), whose marker ends the generation below the root; it does
// not for a sub-session of `mcptrace exec`, rooted at the server itself,
// which a marker ends whole.
func (s Session) SparesRoot() bool { return s.Origin != OriginExec }

// Marker is one destroy marker that ended generations of a session whose
// root it spared.
//
// A marker takes effect at At, a time on the clock of process start times
// (CLOCK_BOOTTIME ns): the kernel's time of the exec of `mcptrace mark
// destroy`, or the agent's clock when it applied a marker sent through the
// API. Every process the root created (forked) before At belongs to the
// generations the marker ended, together with everything those processes
// created, then or later; every process the root created at or after At
// belongs to the next generation, with everything it creates. A start time
// is fixed when the kernel creates the process, so this order is total and
// never changes; see Tracker.MembersBefore for how a start time known only
// to the clock tick is treated.
type Marker struct {
	// Ended is the generation the marker ended (older generations still
	// alive then ended with it).
	Ended uint32 `json:"ended_generation"`
	// At is when the marker took effect, CLOCK_BOOTTIME ns.
	At uint64 `json:"at_ns"`
	// Via is "exec" (seen as the kernel's exec event) or "api".
	Via string `json:"via"`
	// Sender is the process that sent the marker, and SenderUID its uid.
	Sender    lineage.ID `json:"sender"`
	SenderUID uint32     `json:"sender_uid"`
}

// MaxMarkers bounds Session.Markers.
const MaxMarkers = 64

// Action is what the agent must do after an event or call: end the
// session End (already marked Ended here) by ending its members
// (Tracker.Members). When a session ends, every active sub-session nested
// in it ends too, each with its own Action, innermost first and the
// session itself last; each Action's members include those of the
// sub-sessions nested in it, so an enforcer may act on each in turn or on
// the last one only.
//
// A destroy marker for a session that spares its root (Session.SparesRoot)
// leaves the session active: its Action has Generation set, and the
// processes to end are Tracker.MembersBefore(End.ID, Cutoff), the root
// excluded. Sessions nested in the ended generations end with their own
// Actions before it.
type Action struct {
	End Session `json:"session"`
	// Reason says in words why, for logs: who marked it, how the root ended.
	Reason string `json:"reason"`
	// Generation, when not 0, says the action ends generations up to this
	// one of an active session, not the session (see Marker).
	Generation uint32 `json:"generation,omitempty"`
	// Cutoff is the marker's time for a generation action: the root's
	// children started before it, and what they created, are ended.
	Cutoff uint64 `json:"cutoff_ns,omitempty"`
	// Sender is the process that sent the marker, zero when none did. It
	// belongs to what the marker ends; an enforcer may end it last, so
	// that `mcptrace mark destroy` can report the marker's result.
	Sender lineage.ID `json:"sender,omitzero"`
	// Within is the Key of the Action that ended this session because its
	// enclosing session (or a generation of it) ended, "" otherwise. That
	// Action's members include this one's: an enforcer that runs it needs
	// not run this one.
	Within string `json:"within,omitempty"`
}

// Key names what an Action ends: one session instance (its owner, its ID
// and when it began: an ID can be declared again once its session ended)
// and, for a generation action, the generation. Endings and their reports
// are kept by it. See EndingKey.
func (a Action) Key() string { return EndingKey(a.End, a.Generation) }

// EndingKey is the Key of the ending of session s (gen 0) or of its
// generation gen: "UID/ID@began" or "UID/ID@began#gen". Agents before IDs
// were scoped by owner saved "ID@began[#gen]" (see LegacyEndingKey).
func EndingKey(s Session, gen uint32) string {
	return strconv.FormatUint(uint64(s.Owner), 10) + "/" + LegacyEndingKey(s, gen)
}

// LegacyEndingKey is the key agents saved for the same ending before IDs
// were scoped by owner: "ID@began" or "ID@began#gen".
func LegacyEndingKey(s Session, gen uint32) string {
	k := s.ID + "@" + strconv.FormatUint(s.Began, 10)
	if gen != 0 {
		k += "#" + strconv.FormatUint(uint64(gen), 10)
	}
	return k
}

// Errors returned by Begin and Mark, wrapped with the details.
var (
	ErrNotAuthorized = errors.New("not authorized")
	ErrNoSession     = errors.New("no such session")
	// ErrAmbiguous: root named a session ID that several owners use
	// without saying whose (IDs are scoped by owner).
	ErrAmbiguous      = errors.New("session ID used by several owners")
	ErrIDInUse        = errors.New("session id in use")
	ErrBadID          = errors.New("invalid session id")
	ErrAlreadyRoot    = errors.New("process is already a session root")
	ErrUnknownProcess = errors.New("process not in the lineage graph")
	ErrExited         = errors.New("process has exited")
	ErrNotRootable    = errors.New("process cannot be a session root")
	ErrOutOfScope     = errors.New("process is outside the subtree this agent watches (sessions.within-pid)")
	// ErrTooManySessions: the owner has Config.MaxActivePerUID active
	// sessions.
	ErrTooManySessions = errors.New("too many active sessions")
)

// Defaults for a zero Config.
const (
	DefaultRetention = 15 * time.Minute
	DefaultMaxEnded  = 1000
	// DefaultMaxActivePerUID bounds the active sessions of one owner.
	DefaultMaxActivePerUID = 1024
	// DefaultMaxEndedPerUID bounds the retained ended sessions of one
	// owner.
	DefaultMaxEndedPerUID = 200
)

// Config tunes a Tracker.
//
// Rules in effect: DefaultRules() when DefaultRules is set, followed by
// Rules; the first rule that matches names the session. The zero Config has
// no rules at all — only `mcptrace run|exec` tags, markers and Begin declare
// sessions — which is what tests and CI want: nothing on the machine but
// their own processes becomes a session. The agent sets DefaultRules.
type Config struct {
	// DefaultRules puts DefaultRules() before Rules.
	DefaultRules bool
	// Rules are matched after the default rules, if any.
	Rules []Rule
	// WithinPID, when not 0, narrows the tracker to one subtree: only the
	// process with this PID (the one alive when the tracker first looks)
	// and the processes it created, at any depth by creator edge, begin
	// sessions (rules, tags, Begin) or send destroy markers; everything
	// else on the node is ignored. Tests narrow their agents to
	// themselves with it, so an agent never ends another test's session.
	WithinPID uint32
	// Retention is how long an ended session stays listed. Default 15m.
	Retention time.Duration
	// MaxEnded bounds how many ended sessions are kept on the node; past
	// it the owner holding the most loses its oldest. Default 1000.
	MaxEnded int
	// MaxEndedPerUID bounds how many ended sessions of one owner are kept
	// (its oldest dropped first), so that no user's churn evicts another
	// user's (sessions.max-ended-per-uid). Default 200.
	MaxEndedPerUID int
	// MaxActivePerUID bounds the active sessions of one owner: a further
	// declaration (rule, tag, Begin) is refused with ErrTooManySessions
	// and counted (sessions.max-active-per-uid). Default 1024.
	MaxActivePerUID int
	// Now returns CLOCK_BOOTTIME ns, used for Begin, Mark, Scan and Sweep
	// times. Nil: the newest time seen in an event or passed to Sweep. It
	// is called with the Tracker's lock held and must not call the Tracker.
	Now func() uint64
}

// Stats counts what a Tracker did. Active and Retained are current; the
// other counters only grow.
type Stats struct {
	Active   int `json:"active"`
	Retained int `json:"retained_ended"` // ended sessions still listed
	// Begun and Ended count sessions by origin ("rule:claude", "run", …).
	Begun map[string]uint64 `json:"begun_total"`
	Ended map[string]uint64 `json:"ended_total"`
	// EndReasons counts ended sessions by reason.
	EndReasons map[string]uint64 `json:"end_reasons_total"`
	// Dropped counts ended sessions forgotten after Retention or MaxEnded.
	Dropped uint64 `json:"dropped_total"`
	// Markers: accepted (ended something), duplicate (authorized, but the
	// session had already ended — a marker arrives both as an exec and as
	// an API call), refused (not authorized), unmatched (no such session,
	// or the caller's creator is no session root).
	MarkersAccepted  uint64 `json:"markers_accepted_total"`
	MarkersDuplicate uint64 `json:"markers_duplicate_total"`
	MarkersRefused   uint64 `json:"markers_refused_total"`
	MarkersUnmatched uint64 `json:"markers_unmatched_total"`
	// Generations counts generations ended by markers (the root spared).
	Generations uint64 `json:"generations_ended_total"`
	// GenerationUnknown counts children of a root whose start time, known
	// only to the clock tick, fell in the tick of a marker: they are left
	// to the next generation (never killed on a guess) and end with the
	// session.
	GenerationUnknown uint64 `json:"generation_unknown_total"`
	// TagsRefused counts `mcptrace run|exec` tags that declared nothing:
	// invalid or truncated ID, ID in use (run), process already a root.
	TagsRefused uint64 `json:"tags_refused_total"`
	// RefusedOverCap counts declarations (rule, tag, Begin) refused
	// because their owner had Config.MaxActivePerUID active sessions.
	RefusedOverCap uint64 `json:"refused_over_cap_total"`
	// DroppedOverQuota counts ended sessions forgotten before their
	// retention because their owner was over Config.MaxEndedPerUID, or
	// held the most at Config.MaxEnded (also counted in Dropped).
	DroppedOverQuota uint64 `json:"dropped_over_quota_total"`
	// LogsSuppressed counts per-session logs held back by the per-owner
	// rate limit (errors never are).
	LogsSuppressed uint64 `json:"logs_suppressed_total"`
	// Deduplicated counts rule matches inside an active session of the
	// same rule, which begin no session.
	Deduplicated uint64 `json:"deduplicated_total"`
	// Containers is the number of container claims held; claims made,
	// contested (a start of what another active session tree started
	// too: only a start that started what runs counts, and if both
	// can, neither ends it), refused (over MaxContainers or
	// MaxContainersPerUID) and ignored (a start sent from no session) are
	// counted.
	Containers          int    `json:"containers"`
	ContainersClaimed   uint64 `json:"containers_claimed_total"`
	ContainersContested uint64 `json:"containers_contested_total"`
	ContainersRefused   uint64 `json:"containers_refused_total"`
	ContainersIgnored   uint64 `json:"containers_ignored_total"`
	// ContainerStarts is the number of starts sent from no session held
	// for `mcptrace orphans` (starts.go); StartsUnkept counts those not
	// kept (over MaxStarts or MaxStartsPerUID).
	ContainerStarts int    `json:"container_starts"`
	StartsUnkept    uint64 `json:"starts_unkept_total"`
}
