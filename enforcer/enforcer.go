package enforcer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/mcptrace/mcptrace/lineage"
	"github.com/mcptrace/mcptrace/procfs"
	"github.com/mcptrace/mcptrace/procmatch"
	"github.com/mcptrace/mcptrace/redact"
	"github.com/mcptrace/mcptrace/windows/owners"
)

// Mode says whether the enforcer signals at all.
type Mode string

const (
	// ModeEnforce kills the members of an ended session.
	ModeEnforce Mode = "enforce"
	// ModeAudit does everything but the signal (and the doom): it records
	// "would-kill" for exactly the processes enforce would have signalled.
	ModeAudit Mode = "audit"
)

// Policy says how members are killed in enforce mode.
type Policy string

const (
	// PolicyGraceful sends SIGTERM to every live member at once, waits up to
	// Config.Grace for them to exit, then sends SIGKILL to the rest.
	PolicyGraceful Policy = "graceful"
	// PolicyImmediate sends SIGKILL at once.
	PolicyImmediate Policy = "immediate"
)

// Defaults for a zero Config.
const (
	DefaultGrace         = 2 * time.Second
	DefaultSweepInterval = 50 * time.Millisecond
	// DefaultSweepTimeout is how long a sweep goes on after the grace
	// period ends (the SIGKILL phase) before it reports survivors; a zero
	// Config.SweepTimeout is Grace plus this, so a long grace period still
	// ends in SIGKILL.
	DefaultSweepTimeout = 30 * time.Second
	// MaxGrace is the longest grace period Validate accepts: members of an
	// ended session outlive it by this much at most.
	MaxGrace = 10 * time.Minute
	// DefaultNice is the scheduling priority the agent runs at
	// (enforcer.nice; the agent applies it to all its threads): on a
	// node whose CPUs other users keep busy, the agent that ends
	// sessions is served first. Under issue 31's attacks on two cores,
	// root's API p99 went from 37-51 ms at nice 0 to 25-31 ms at -10
	// (TestHostileUsersSwitchNothingOff, docs/SECURITY.md). auditd
	// boosts itself the same way (priority_boost).
	DefaultNice = -10
)

// Results of a KillRecord. A refusal or a failure is "refused: <why>" or
// "failed: <error>" (see ResultRefused and ResultFailed).
const (
	ResultKilled             = "killed"
	ResultExitedBeforeSignal = "exited-before-signal"
	// ResultSpared: a spare rule matched. Every result that starts with it
	// is a spared member.
	ResultSpared = "spared"
	// ResultSparedPrivilege prefixes "spared: privilege boundary: <uids>":
	// the session's owner (not root) could not signal the member itself
	// (kill(2) rules), and Config.CrossUID is off.
	ResultSparedPrivilege = ResultSpared + ": privilege boundary"
	ResultWouldKill       = "would-kill"
	ResultRefused         = "refused" // prefix: "refused: <why>"
	ResultFailed          = "failed"  // prefix: "failed: <error>"
)

// ErrUnsupported is returned by Supported, and recorded as the failure of
// every member, on an OS the enforcer does not run on.
var ErrUnsupported = errors.New("enforcer: not supported on this OS (it ends processes through pidfds on Linux and handles on Windows)")

// Config tunes an Enforcer. Zero values take the defaults.
type Config struct {
	// Mode: ModeEnforce (default) or ModeAudit.
	Mode Mode
	// Policy: PolicyGraceful (default) or PolicyImmediate.
	Policy Policy
	// Grace is how long PolicyGraceful waits after SIGTERM before SIGKILL,
	// counted once per session from the start of End. Default 2s.
	Grace time.Duration
	// Spare exempts named programs: a member matching any rule is recorded
	// "spared" and never signalled nor doomed. The rules are read with
	// procmatch.All: every field a rule sets must match. A rule spares one
	// process, not its subtree: children of a spared process that do not
	// match a rule themselves are killed. A rule is matched against what
	// the lineage graph says about the process (Process.Comm and its
	// current image) and against what /proc says at signal time; a match
	// on either spares it. Argv is matched raw (unredacted) and never
	// logged.
	Spare []procmatch.Rule
	// CrossUID lets a session owned by a non-root uid end members its
	// owner could not signal itself (other uids, setuid programs). Off by
	// default: those are spared (ResultSparedPrivilege). Sessions owned by
	// root end members of every uid either way.
	CrossUID bool
	// SweepInterval is how often the sweep re-reads the member set for new or
	// surviving members. Default 50ms.
	SweepInterval time.Duration
	// SweepTimeout is when End gives up and reports survivors (logged at
	// error), counted from the start of End. It must be longer than Grace
	// under PolicyGraceful, or SIGKILL would never be sent. Default Grace +
	// DefaultSweepTimeout.
	SweepTimeout time.Duration
	// Sync, when set, is called before a sweep declares a session empty
	// and returns once the member set reflects every process event the
	// kernel reported up to the call (the agent's ring buffer barrier):
	// a member forked just before its parent died is then found by one
	// more round instead of surviving unseen. It returns an error only
	// when ctx ends.
	Sync func(ctx context.Context) error
	// Containers stops the containers of an ending (Ending.Containers);
	// nil: they are recorded failed.
	Containers ContainerEngine
	// Owner is, on Windows, the owner number of a member's token as it is
	// at termination time (package owners: an elevated token is root,
	// each user otherwise a number of its own): a session owned by a
	// non-root owner ends only the members whose token has the same
	// number (a medium-integrity token cannot open an elevated process of
	// the same user either), as kill(2)'s rule does on Linux. nil there:
	// only root's sessions end anything. Unused on Linux.
	Owner func(owners.Token) uint32
}

// Validate reports a Config that New would not run as given. New never
// fails: an invalid Config makes the Enforcer run in audit mode (it kills
// nothing) and logs the error, because a misread policy or a spare rule
// that cannot match must not turn into wrong kills.
func (c Config) Validate() error {
	var errs []error
	switch c.Mode {
	case "", ModeEnforce, ModeAudit:
	default:
		errs = append(errs, fmt.Errorf("unknown mode %q (want %q or %q)", c.Mode, ModeEnforce, ModeAudit))
	}
	switch c.Policy {
	case "", PolicyGraceful, PolicyImmediate:
	default:
		errs = append(errs, fmt.Errorf("unknown policy %q (want %q or %q)", c.Policy, PolicyGraceful, PolicyImmediate))
	}
	if c.Grace < 0 || c.SweepInterval < 0 || c.SweepTimeout < 0 {
		errs = append(errs, errors.New("negative duration"))
	}
	if c.Grace > MaxGrace {
		errs = append(errs, fmt.Errorf("grace period %s is longer than %s", c.Grace, MaxGrace))
	}
	grace := c.Grace
	if grace <= 0 {
		grace = DefaultGrace
	}
	if c.SweepTimeout > 0 && c.Policy != PolicyImmediate && c.SweepTimeout <= grace {
		errs = append(errs, fmt.Errorf("sweep timeout %s is not longer than the grace period %s: SIGKILL would never be sent", c.SweepTimeout, grace))
	}
	if _, err := procmatch.CompileAll(c.Spare, procmatch.All); err != nil {
		errs = append(errs, fmt.Errorf("spare rules: %w", err))
	}
	return errors.Join(errs...)
}

// withDefaults returns c with zero values replaced by defaults. An invalid
// config is forced to audit mode.
func (c Config) withDefaults(log *slog.Logger) Config {
	if err := c.Validate(); err != nil {
		log.Error("invalid config, running in audit mode: nothing will be killed", "err", err)
		c.Mode = ModeAudit
		if c.Policy != PolicyImmediate {
			c.Policy = PolicyGraceful
		}
	}
	if c.Mode == "" {
		c.Mode = ModeEnforce
	}
	if c.Policy == "" {
		c.Policy = PolicyGraceful
	}
	if c.Grace <= 0 {
		c.Grace = DefaultGrace
	}
	if c.SweepInterval <= 0 {
		c.SweepInterval = DefaultSweepInterval
	}
	if c.SweepTimeout <= 0 {
		c.SweepTimeout = c.Grace + DefaultSweepTimeout
	}
	return c
}

// MembersFunc returns the session's current member set as the lineage
// graph proves it, alive and exited. Members with Exited false are the kill
// set. It is called again on every sweep round and must be safe to call
// from End's goroutine.
type MembersFunc func() []lineage.Process

// callMembers runs members, turning a panic into an error.
func callMembers(members MembersFunc) (ms []lineage.Process, err error) {
	if members == nil {
		return nil, errors.New("no members function")
	}
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("members function panicked: %v", v)
		}
	}()
	return members(), nil
}

// Doomer is the in-kernel help: a process marked doomed is killed by the
// kernel when it forks or execs, and its children inherit doom. It must be
// safe for concurrent use.
type Doomer interface {
	Doom(id lineage.ID) error
	Undoom(id lineage.ID) error
}

// ExecSparer is a Doomer that spares, in the kernel, a doomed process that
// execs a program a spare rule may protect: one named in comms, or any
// program when all is set. Such a process leaves doom alive, and the
// enforcer judges it. New hands it the spare rules; a Doomer with spare
// rules configured that is not an ExecSparer, or whose SpareExecs fails,
// is not used (the sweep alone ends sessions), so doom never kills what a
// spare rule protects.
type ExecSparer interface {
	SpareExecs(comms []string, all bool) error
}

// Ending is what End ends.
type Ending struct {
	// Session names the session, in records and logs.
	Session string
	// Generation, when not 0, says a destroy marker ended generations up
	// to this one of a session that goes on (its root spared); 0 is the
	// end of the whole session.
	Generation uint32
	// EndedAt is when the session (or generation) ended, CLOCK_BOOTTIME ns
	// (the clock of lineage event times); 0 means now. Latencies count
	// from it.
	EndedAt uint64
	Reason  string
	// Owner is the session owner's uid. When it is not 0 (and
	// Config.CrossUID is off), only members the owner could signal itself
	// are ended: kill(2)'s rule, the owner is the member's real or saved
	// set-user-ID, read from /proc at every signal.
	Owner uint32
	// OwnerOnly holds Owner to kill(2)'s rule even when Config.CrossUID is
	// set: what a user asks the agent to end directly (orphans) is never
	// beyond that user's own authority.
	OwnerOnly bool
	// Members returns the processes to end (see MembersFunc).
	Members MembersFunc
	// Last are members ended last: doomed like the others, but signalled
	// only when the grace period has passed and then with SIGKILL, under
	// either policy, if they are still alive. The sender of a destroy
	// marker is one: `mcptrace mark destroy` belongs to what it ends, and
	// this lets it report the result first.
	Last []lineage.ID
	// Containers returns the containers to end, with the processes, under
	// the same policy, grace and owner authority (ContainerEngine); nil
	// for none. It is called when End starts and once more when the
	// sweep found no member left: a container a member started in the
	// meantime is ended too.
	Containers func() []Container
	// Verify, when set, judges every member again as it is now, before
	// it is admitted and before every signal (and before it is doomed):
	// now is /proc's view of it and uids its user IDs, both read while
	// its pidfd is held and checked alive afterwards, so about that very
	// process. A non-empty answer refuses it ("refused: " and the
	// answer) and undooms it. `mcptrace orphans --end` refuses a process
	// that changed since it was listed (a setuid exec, an exec into
	// another program). Not supported on Windows, where an ending that
	// sets it refuses every member.
	Verify func(p lineage.Process, now lineage.Snapshot, uids procfs.UIDs) string
}

// KillRecord is the outcome for one member of one session.
type KillRecord struct {
	Session string
	// Generation is the ended generation the record belongs to, 0 when
	// the whole session ended.
	Generation uint32 `json:",omitempty"`
	// Owner is the session owner's uid: records are kept, and quotas
	// counted, per owner.
	Owner   uint32 `json:",omitempty"`
	Process lineage.ID
	// Container is the engine's ID when the record is a container's
	// (Comm CommContainer, Argv its image, Process its first process when
	// known); Signal then says what was asked of the engine.
	Container string `json:",omitempty"`
	// UID is the member's uid as the graph knew it when the ending began:
	// what decides who else may see the record.
	UID  uint32 `json:",omitempty"`
	Comm string
	// Argv is redacted (redact.Argv).
	Argv []string
	// Signal is what was sent ("SIGTERM", "SIGKILL", "SIGTERM+SIGKILL" when
	// the grace ran out), or for "would-kill" the first signal enforce
	// would have sent. Empty when nothing was (or would be) sent.
	Signal string
	// Result is one of "killed", "exited-before-signal", "spared",
	// "spared: privilege boundary: <uids>", "would-kill",
	// "refused: <why>", "failed: <error>".
	Result string
	// Latency is from the session's end to the moment the death was
	// observed (pidfd readable or gone); zero when no death was observed.
	Latency time.Duration
	// At is when the result was decided (wall clock).
	At time.Time
}

// Report is the outcome of one End call.
type Report struct {
	Session string
	// Owner is the session owner's uid (Ending.Owner). Reports saved by
	// an agent before it was recorded read as 0.
	Owner      uint32 `json:",omitempty"`
	Generation uint32 `json:",omitempty"` // see Ending.Generation
	Reason     string
	Mode       Mode
	// Counts of records by result. Survivors counts members still alive (or
	// not provably dead) when the sweep gave up; they are also counted under
	// their record's result.
	Killed, Spared, Refused, Failed, Survivors int
	ExitedBeforeSignal, WouldKill              int
	// SparedPrivilege counts the spared members (counted in Spared too)
	// the session's owner could not signal itself (ResultSparedPrivilege).
	SparedPrivilege int `json:",omitempty"`
	// Escalated counts members sent SIGKILL after the SIGTERM grace ran
	// out; DoomErrors, members the kernel could not be told to doom.
	Escalated  int `json:",omitempty"`
	DoomErrors int `json:",omitempty"`
	Records    []KillRecord
	Duration   time.Duration
	// Empty: no member the enforcer may kill is left alive (spared and
	// refused members do not count). In audit mode: nothing would be killed.
	Empty bool
	// Interrupted: End stopped because its context ended (the agent is
	// stopping), not because the sweep finished or timed out; the caller
	// ends the session again later (its survivors stay doomed).
	Interrupted bool `json:",omitempty"`
}

// Add counts a report into s, as End does when it finishes one (an agent
// replaying saved reports does the same).
func (s *Stats) Add(r Report) {
	s.Sessions++
	s.Killed += uint64(r.Killed)
	s.ExitedBeforeSignal += uint64(r.ExitedBeforeSignal)
	s.Spared += uint64(r.Spared)
	s.SparedPrivilege += uint64(r.SparedPrivilege)
	s.WouldKill += uint64(r.WouldKill)
	s.Refused += uint64(r.Refused)
	s.Failed += uint64(r.Failed)
	s.Survivors += uint64(r.Survivors)
	s.Escalated += uint64(r.Escalated)
	s.DoomErrors += uint64(r.DoomErrors)
	if r.Survivors > 0 {
		s.Timeouts++
	}
	if s.Kills == nil {
		s.Kills = map[string]uint64{}
	}
	for _, c := range []struct {
		class string
		n     int
	}{
		{ClassKilled, r.Killed}, {ClassExitedBeforeSignal, r.ExitedBeforeSignal}, {ClassSpared, r.Spared - r.SparedPrivilege},
		{ClassSparedPrivilege, r.SparedPrivilege}, {ClassWouldKill, r.WouldKill}, {ClassRefused, r.Refused},
		{ClassFailed, r.Failed}, {ClassSurvivor, r.Survivors},
	} {
		if c.n > 0 {
			s.Kills[KillKey(r.Reason, c.class)] += uint64(c.n)
		}
	}
	var last time.Duration
	for _, rec := range r.Records {
		if rec.Result == ResultKilled || rec.Result == ResultExitedBeforeSignal {
			last = max(last, rec.Latency)
		}
	}
	if last > 0 {
		s.Endings.observe(last.Seconds())
	}
}

// Stats are cumulative counters, for the exporter.
type Stats struct {
	Sessions           uint64 // End calls
	Killed             uint64
	ExitedBeforeSignal uint64
	Spared             uint64
	SparedPrivilege    uint64 // spared across a privilege boundary (in Spared too)
	WouldKill          uint64
	Refused            uint64
	Failed             uint64
	Survivors          uint64
	Escalated          uint64 // SIGKILL sent after the SIGTERM grace ran out
	Timeouts           uint64 // sessions that ended with survivors
	DoomErrors         uint64
	// Kills counts records by the ending's reason and the record's
	// result class, keyed KillKey(reason, class): what metrics show as
	// kills by reason and result. Stats saved before it existed read nil.
	Kills map[string]uint64 `json:",omitempty"`
	// Endings is the histogram of the time from an ending's start (the
	// session's or generation's end) to the observed death of its last
	// member, over EndingBuckets; endings that killed nothing are not in
	// it. Counts are per bucket (not cumulative), the last one above
	// every bound.
	Endings Histogram `json:",omitzero"`
}

// Histogram counts observations into the upper bounds EndingBuckets.
type Histogram struct {
	Counts []uint64 `json:",omitempty"`
	Count  uint64
	Sum    float64 // seconds
}

// EndingBuckets are the upper bounds, in seconds, of Stats.Endings: from
// an immediate SIGKILL (milliseconds) to a long grace period.
var EndingBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120}

func (h *Histogram) observe(seconds float64) {
	if len(h.Counts) != len(EndingBuckets)+1 {
		h.Counts = make([]uint64, len(EndingBuckets)+1)
	}
	i := len(EndingBuckets)
	for j, b := range EndingBuckets {
		if seconds <= b {
			i = j
			break
		}
	}
	h.Counts[i]++
	h.Count++
	h.Sum += seconds
}

// Result classes of Stats.Kills: a record's result without its detail.
const (
	ClassKilled             = "killed"
	ClassExitedBeforeSignal = "exited-before-signal"
	ClassSpared             = "spared"
	ClassSparedPrivilege    = "spared-privilege"
	ClassWouldKill          = "would-kill"
	ClassRefused            = "refused"
	ClassFailed             = "failed"
	// ClassSurvivor counts members still alive when the ending gave up
	// (they are counted under their record's class too).
	ClassSurvivor = "survivor"
)

// KillKey is the key of Stats.Kills: reason and class joined by '/'.
func KillKey(reason, class string) string { return reason + "/" + class }

// Clone returns s with maps and slices of its own.
func (s Stats) Clone() Stats {
	s.Kills = maps.Clone(s.Kills)
	s.Endings.Counts = slices.Clone(s.Endings.Counts)
	return s
}

// Enforcer ends sessions. Safe for concurrent use; End may run
// concurrently for different sessions.
type Enforcer struct {
	cfg Config
	// spare holds the rules of cfg.Spare that compile (all of them unless
	// the config is invalid, which forces audit mode).
	spare []*procmatch.Matcher
	doom  Doomer
	log   *slog.Logger
	os    osState

	mu      sync.Mutex
	records recordStore
	stats   Stats
}

// New returns an Enforcer. doom may be nil (no in-kernel help: the sweep
// alone catches forks). log may be nil (slog.Default()).
func New(cfg Config, doom Doomer, log *slog.Logger) *Enforcer {
	if log == nil {
		log = slog.Default()
	}
	e := &Enforcer{cfg: cfg.withDefaults(log), doom: doom, log: log}
	e.spare, _ = procmatch.CompileAll(e.cfg.Spare, procmatch.All) // withDefaults logged any error
	e.os = newOSState(log)
	if doom != nil && e.cfg.Mode == ModeEnforce {
		e.doom = e.spareInKernel(doom)
	}
	return e
}

// spareInKernel hands the spare rules to the Doomer's exec decision and
// returns the Doomer to use: nil when the kernel could kill what a spare
// rule protects.
func (e *Enforcer) spareInKernel(doom Doomer) Doomer {
	comms, all := execSpares(e.spare)
	es, ok := doom.(ExecSparer)
	switch {
	case ok:
		if err := es.SpareExecs(comms, all); err != nil {
			e.log.Error("the kernel cannot be told the spare rules; not dooming (the sweep still ends sessions)", "err", err)
			return nil
		}
	case len(e.spare) > 0:
		e.log.Warn("the doomer cannot spare programs at exec; not dooming (the sweep still ends sessions)")
		return nil
	}
	return doom
}

// execSpares is what the kernel can apply of the spare rules at exec:
// the names of rules that require a comm (a superset of what those rules
// spare), and all when some rule matches without one.
func execSpares(rules []*procmatch.Matcher) (comms []string, all bool) {
	for _, r := range rules {
		c, required := r.Comms()
		if !required {
			all = true
			continue
		}
		comms = append(comms, c...)
	}
	return comms, all
}

// Config returns the configuration in force, defaults filled in.
func (e *Enforcer) Config() Config { return e.cfg }

// Records returns every record kept (each owner's RecordLimit most recent,
// at most TotalRecordLimit), oldest first.
func (e *Enforcer) Records() []KillRecord {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.records.all()
}

// SessionRecords returns the records of the session owner's session,
// oldest first, in O(its records).
func (e *Enforcer) SessionRecords(owner uint32, session string) []KillRecord {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.records.of(owner, session)
}

// Saved is what an Enforcer keeps across an agent restart: its records
// (argv already redacted) and counters.
type Saved struct {
	Records []KillRecord `json:"records,omitempty"`
	Stats   Stats        `json:"stats"`
}

// Dump returns the records and counters.
func (e *Enforcer) Dump() Saved {
	st := e.Stats()
	return Saved{Records: e.Records(), Stats: st}
}

// Restore puts saved records and counters back, before any End: the
// records keep their order and the ring's bound.
func (e *Enforcer) Restore(s Saved) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.stats = s.Stats
	e.store(s.Records)
}

// AddRecords keeps records of a report written by an earlier agent.
func (e *Enforcer) AddRecords(recs []KillRecord) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.store(recs)
}

// store keeps records within their owners' quotas; e.mu is held.
func (e *Enforcer) store(recs []KillRecord) {
	for _, rec := range recs {
		e.records.add(rec)
	}
}

// Stats returns the counters.
func (e *Enforcer) Stats() Stats {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.stats.Clone()
}

// finish counts a report, stores its records and logs its summary.
func (e *Enforcer) finish(r *Report, escalated, doomErrs int) {
	for _, rec := range r.Records {
		switch {
		case rec.Result == ResultKilled:
			r.Killed++
		case rec.Result == ResultExitedBeforeSignal:
			r.ExitedBeforeSignal++
		case strings.HasPrefix(rec.Result, ResultSpared):
			r.Spared++
			if strings.HasPrefix(rec.Result, ResultSparedPrivilege) {
				r.SparedPrivilege++
			}
		case rec.Result == ResultWouldKill:
			r.WouldKill++
		case strings.HasPrefix(rec.Result, ResultRefused):
			r.Refused++
		case strings.HasPrefix(rec.Result, ResultFailed):
			r.Failed++
		}
	}
	r.Escalated, r.DoomErrors = escalated, doomErrs
	e.mu.Lock()
	e.store(r.Records)
	e.stats.Add(*r)
	e.mu.Unlock()

	attrs := []any{
		"session", r.Session, "owner_uid", r.Owner, "generation", r.Generation, "reason", r.Reason, "mode", string(r.Mode),
		"killed", r.Killed, "exited", r.ExitedBeforeSignal, "spared", r.Spared, "spared_privilege", r.SparedPrivilege,
		"refused", r.Refused, "failed", r.Failed, "would_kill", r.WouldKill,
		"survivors", r.Survivors, "empty", r.Empty, "duration", r.Duration,
	}
	if r.Survivors > 0 {
		e.log.Error("session members survived the sweep", attrs...)
		for _, rec := range r.Records {
			if rec.Result == ResultKilled || rec.Result == ResultExitedBeforeSignal ||
				strings.HasPrefix(rec.Result, ResultSpared) || strings.HasPrefix(rec.Result, ResultRefused) {
				continue
			}
			e.log.Error("survivor", recordAttrs(rec)...)
		}
		return
	}
	e.log.Info("session enforced", attrs...)
}

// logRecord logs one decided record at a level that fits its result.
func (e *Enforcer) logRecord(rec KillRecord, extra ...any) {
	attrs := append(recordAttrs(rec), extra...)
	switch {
	case strings.HasPrefix(rec.Result, ResultFailed):
		e.log.Error("signal failed", attrs...)
	case strings.HasPrefix(rec.Result, ResultRefused):
		e.log.Warn("refused to signal", attrs...)
	case strings.HasPrefix(rec.Result, ResultSpared):
		e.log.Info("spared", attrs...)
	case rec.Result == ResultWouldKill:
		e.log.Info("would kill (audit)", attrs...)
	default:
		e.log.Debug(rec.Result, attrs...)
	}
}

// recordAttrs are the log attributes of a record: never its argv, even
// redacted (redaction knows the secrets it knows; the record, with its
// argv, is for the API, which shows it only to whom may see it).
func recordAttrs(rec KillRecord) []any {
	return []any{
		"session", rec.Session, "owner_uid", rec.Owner, "pid", rec.Process.PID, "start_ns", rec.Process.Start,
		"comm", rec.Comm, "uid", rec.UID,
		"signal", rec.Signal, "result", rec.Result, "latency", rec.Latency,
	}
}

// spareRule returns the first rule matching comm/exe/argv, or nil.
func (e *Enforcer) spareRule(comm, exe string, argv []string) *procmatch.Matcher {
	return procmatch.First(e.spare, procmatch.Image{Comm: comm, Filename: exe, Argv: argv})
}

// newRecord starts a record for p; argv is redacted here, once. The
// record's uid is the process's, unless its current image was executed
// under another uid (a root program that switched to the owner's uid
// without an exec): then the image's, so the argv of what another uid ran
// is never shown to the process's later owner.
func newRecord(en *Ending, p lineage.Process) KillRecord {
	img := p.Current()
	uid := p.UID
	if img.UID != p.UID {
		uid = img.UID
	}
	return KillRecord{
		Session:    en.Session,
		Generation: en.Generation,
		Owner:      en.Owner,
		Process:    p.ID,
		UID:        uid,
		Comm:       p.Comm,
		Argv:       redact.Argv(img.Argv),
	}
}

// Spares reports whether a spare rule protects p as the graph describes
// it (its comm and current image): what a leak detector must not list.
func (e *Enforcer) Spares(p lineage.Process) bool {
	img := p.Current()
	return e.spareRule(p.Comm, img.Filename, img.Argv) != nil
}
