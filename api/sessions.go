package api

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/mcptrace/mcptrace/enforcer"
	"github.com/mcptrace/mcptrace/internal/ratelog"
	"github.com/mcptrace/mcptrace/lineage"
	"github.com/mcptrace/mcptrace/redact"
	"github.com/mcptrace/mcptrace/roles"
	"github.com/mcptrace/mcptrace/sessions"
)

// SessionInfo is a session with its member counts.
type SessionInfo struct {
	sessions.Session
	Members int `json:"members"`
	Alive   int `json:"alive"`
	Killed  int `json:"killed"`
	// Enforcement is the enforcer's outcome once it finished ending the
	// session; absent while it works (or for a covered sub-session, whose
	// members the enclosing session's enforcement ended).
	Enforcement *Enforcement `json:"enforcement,omitempty"`
}

// Enforcement summarises an enforcer report.
type Enforcement struct {
	Empty      bool    `json:"empty"`
	Killed     int     `json:"killed"`
	Survivors  int     `json:"survivors"`
	Refused    int     `json:"refused"`
	Spared     int     `json:"spared"`
	WouldKill  int     `json:"would_kill"`
	DurationMS float64 `json:"duration_ms"`
}

// SessionDetail is one session, its members and what the enforcer did.
type SessionDetail struct {
	Now       uint64            `json:"now_ns"`
	Session   SessionInfo       `json:"session"`
	Processes []lineage.Process `json:"processes"`
	// Generations gives, for each of Processes, the session generation it
	// belongs to: 0 for the root, else 1 plus the number of destroy
	// markers before its branch of the root began (sessions.Marker).
	Generations []uint32 `json:"generations"`
	// Roles gives, for each of Processes, what it is in the session
	// (host, wrapper, server…) and the server it is, wraps or runs for
	// (package roles), from what the caller may see of the members.
	Roles []roles.Member `json:"roles"`
	// Endings are what the enforcer did for each marker that ended a
	// generation, and for the end of the session, oldest first.
	Endings []Ending `json:"endings,omitempty"`
	Kills   []Kill   `json:"kills,omitempty"`
	// Containers are the containers members of the session started. The
	// processes of each (its Init and what that created) follow the
	// members in Processes, with role container and the image as their
	// server, and the generation of the client that started it.
	Containers []Container `json:"containers,omitempty"`
	// MembersDropped counts (to root) the exited members the history let
	// go past api.MaxRecordMembers, oldest first.
	MembersDropped int `json:"members_dropped,omitempty"`
	// Recorded is set when the answer comes from the history: when the
	// agent last recorded the session (it no longer holds it, or the
	// caller asked for a time with ?at=).
	Recorded time.Time `json:"recorded,omitzero"`
}

// Container is a container a member of a session started.
type Container struct {
	ID     string     `json:"id"`
	Name   string     `json:"name,omitempty"`
	Image  string     `json:"image,omitempty"`
	Client lineage.ID `json:"client"`
	// ClientUID is the client's uid: a caller other than root sees only
	// the containers its own uid's clients started.
	ClientUID uint32 `json:"client_uid"`
	// Init is the container's first process, zero when it is not running
	// or the engine was not asked yet.
	Init    lineage.ID `json:"init,omitzero"`
	Running bool       `json:"running"`
	// Attribution is "attributed" (it is ended with the session),
	// "pending" (not verified with the engine yet) or "unattributed:
	// <why>" (never ended: started from two sessions, or not started
	// after its client began).
	Attribution string `json:"attribution"`
}

// Ending is one enforcement of a session: of the generations a marker
// ended (Generation > 0, Marker set) or of the whole session.
type Ending struct {
	Generation  uint32           `json:"generation,omitempty"`
	Marker      *sessions.Marker `json:"marker,omitempty"`
	Enforcement *Enforcement     `json:"enforcement,omitempty"`
}

// Kill is one enforcer record; Argv is redacted.
type Kill struct {
	Session string `json:"session"`
	// Generation is the generation ending the record belongs to; 0 for
	// the end of the whole session.
	Generation uint32     `json:"generation,omitempty"`
	Process    lineage.ID `json:"process"`
	// Container is the container's ID when the record is a container's.
	Container string    `json:"container,omitempty"`
	Comm      string    `json:"comm"`
	Argv      []string  `json:"argv,omitempty"`
	Signal    string    `json:"signal,omitempty"`
	Result    string    `json:"result"`
	LatencyMS float64   `json:"latency_ms,omitempty"`
	At        time.Time `json:"at"`
}

// BeginRequest declares a running process the root of a session.
type BeginRequest struct {
	PID uint32 `json:"pid"`
	ID  string `json:"id,omitempty"`
}

// MarkRequest is a destroy marker; Session "" means the session whose
// root created the caller.
type MarkRequest struct {
	Session string `json:"session,omitempty"`
}

// MarkResult says what a marker (or a session end) ended: whole sessions
// (Ended) and generations of sessions whose host keeps running
// (Generations). A marker is delivered twice (the exec of `mcptrace mark`
// is seen in the kernel too); when the exec got there first, Already is
// true and the lists say what it ended.
type MarkResult struct {
	Ended       []string          `json:"ended"`
	Generations []EndedGeneration `json:"generations,omitempty"`
	Already     bool              `json:"already_delivered,omitempty"`
}

// EndedGeneration is a generation a marker ended: the session goes on
// with generation Generation+1, its root alive.
type EndedGeneration struct {
	Session    string `json:"session"`
	Generation uint32 `json:"generation"`
}

// sessionVisible: root sees every session, others the sessions they own.
func sessionVisible(c Caller, s sessions.Session) bool { return c.Root() || s.Owner == c.UID }

// killVisible: root sees every kill record; anyone else only those of
// members of its own uid (the uid the enforcer recorded when the ending
// began).
func killVisible(c Caller, r enforcer.KillRecord) bool { return c.Root() || r.UID == c.UID }

// killsFor returns the records c may see, as Kills, argv redacted (the
// enforcer keeps them redacted already; a record read back from the
// history is redacted here again, whoever wrote it).
func killsFor(c Caller, recs []enforcer.KillRecord) []Kill {
	var out []Kill
	for _, r := range recs {
		if !killVisible(c, r) {
			continue
		}
		out = append(out, Kill{
			Session: r.Session, Generation: r.Generation, Process: r.Process, Container: r.Container, Comm: r.Comm, Argv: redact.Argv(r.Argv),
			Signal: r.Signal, Result: r.Result, LatencyMS: float64(r.Latency) / float64(time.Millisecond), At: r.At,
		})
	}
	return out
}

// outcome is what the enforcer recorded of one session, read so that its
// parts agree: the reports of its endings first, then its kill records.
// The enforcer stores an ending's records before the agent keeps its
// report, so every report read here has its records among the kills read
// after it (read the other way round, an ending that finished in between
// showed "killed 1" beside no kill record).
type outcome struct {
	reports map[uint32]enforcer.Report // by generation; 0: the session's end
	kills   []Kill                     // what the caller may see
}

func (s *Server) outcome(c Caller, sess sessions.Session) outcome {
	o := outcome{reports: s.reports(sess)}
	if s.Enforcer != nil {
		o.kills = killsFor(c, s.Enforcer.SessionRecords(sess.Owner, sess.ID))
	}
	return o
}

// reports returns the enforcer's reports of sess's endings, by
// generation, without their records.
func (s *Server) reports(sess sessions.Session) map[uint32]enforcer.Report {
	out := map[uint32]enforcer.Report{}
	if s.Report == nil {
		return out
	}
	gens := []uint32{0}
	for _, m := range sess.Markers {
		gens = append(gens, m.Ended)
	}
	for _, g := range gens {
		if r, ok := s.Report(sessions.EndingKey(sess, g)); ok {
			r.Records = nil
			out[g] = r
		}
	}
	return out
}

// info is a session's summary with the counts of its members given and of
// the kills in o: callers pass only what the caller may see.
func info(c Caller, sess sessions.Session, members, alive int, o outcome) SessionInfo {
	sess.Markers = markersFor(c, sess.Markers)
	if !c.Root() && sess.Parent != "" && sess.ParentOwner != c.UID {
		// Nested in another owner's session (a tenant's tool under a
		// root gateway): which one is not the caller's to know.
		sess.Parent, sess.ParentOwner = "", 0
	}
	in := SessionInfo{Session: sess, Members: members, Alive: alive}
	for _, k := range o.kills {
		if k.Result == enforcer.ResultKilled {
			in.Killed++
		}
	}
	in.Enforcement = enforcement(c, 0, o)
	return in
}

// enforcement summarises the report of sess's ending of generation gen
// (0: the whole session; see sessions.EndingKey), nil while it runs. Root
// gets the enforcer's counts; anyone else counts from the records it may
// see (kills), so members of other uids are not counted either.
func enforcement(c Caller, gen uint32, o outcome) *Enforcement {
	r, ok := o.reports[gen]
	if !ok {
		return nil
	}
	out := &Enforcement{Empty: r.Empty, Killed: r.Killed, Survivors: r.Survivors, Refused: r.Refused,
		Spared: r.Spared, WouldKill: r.WouldKill, DurationMS: float64(r.Duration) / float64(time.Millisecond)}
	if c.Root() {
		return out
	}
	*out = Enforcement{Empty: true, DurationMS: out.DurationMS}
	for _, k := range o.kills {
		if k.Generation != gen {
			continue
		}
		out.Empty = false
		switch {
		case k.Result == enforcer.ResultKilled:
			out.Killed++
		case strings.HasPrefix(k.Result, enforcer.ResultSpared):
			out.Spared++
		case k.Result == enforcer.ResultWouldKill:
			out.WouldKill++
		case strings.HasPrefix(k.Result, enforcer.ResultRefused):
			out.Refused++
		case strings.HasPrefix(k.Result, enforcer.ResultFailed):
			out.Survivors++
		}
	}
	return out
}

// markersFor returns ms as c may see them: a marker's sender only to root
// and to the sender's own uid.
func markersFor(c Caller, ms []sessions.Marker) []sessions.Marker {
	if c.Root() {
		return ms
	}
	out := slices.Clone(ms)
	for i := range out {
		if out[i].SenderUID != c.UID {
			out[i].Sender, out[i].SenderUID = lineage.ID{}, 0
		}
	}
	return out
}

// endings lists what each marker of sess ended, and the session's end.
func endings(c Caller, sess sessions.Session, o outcome) []Ending {
	var out []Ending
	for _, m := range markersFor(c, sess.Markers) {
		m := m
		out = append(out, Ending{Generation: m.Ended, Marker: &m, Enforcement: enforcement(c, m.Ended, o)})
	}
	if sess.State == sessions.Ended {
		out = append(out, Ending{Enforcement: enforcement(c, 0, o)})
	}
	return out
}

// handleSessions lists the sessions the caller may see with their
// counts, in O(what it answers): each session's own records are read, not
// every record the enforcer keeps.
func (s *Server) handleSessions(w http.ResponseWriter, r *http.Request) {
	c, ok := s.caller(w, r)
	if !ok {
		return
	}
	out := []SessionInfo{}
	listed := s.Sessions.SessionsCounted(
		func(sess sessions.Session) bool { return sessionVisible(c, sess) },
		func(p lineage.Process) bool { return processVisible(c, p) })
	for _, l := range listed {
		out = append(out, info(c, l.Session, l.Members, l.Alive, s.outcome(c, l.Session)))
	}
	writeJSON(w, http.StatusOK, out)
}

// ownerParam reads ?owner=UID, whose session the path's ID names (IDs are
// scoped by owner): nil when absent. A caller other than root naming
// another uid gets that uid's session only where it may act on it, and
// absence otherwise, like for an ID that does not exist.
func ownerParam(w http.ResponseWriter, r *http.Request) (*uint32, bool) {
	v, ok := r.URL.Query()["owner"]
	if !ok {
		return nil, true
	}
	if len(v) != 1 {
		writeError(w, http.StatusBadRequest, "owner: give one uid")
		return nil, false
	}
	uid, err := strconv.ParseUint(v[0], 10, 32)
	if err != nil {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("owner %q: want a uid (0 to 4294967295)", ratelog.Field(v[0])))
		return nil, false
	}
	u := uint32(uid)
	return &u, true
}

// noSession answers that the session id does not exist. It is also the
// answer to a session the caller may not see or act on, word for word, so
// that nobody learns from a refusal that a session exists, who owns it or
// where its root is.
func noSession(w http.ResponseWriter, id string) {
	writeError(w, http.StatusNotFound, fmt.Sprintf("no session %q (see `mcptrace sessions`)", id))
}

// noCreatorSession is the answer to a marker without a session whose
// caller no session of its own created, or one the caller may not end.
func noCreatorSession(w http.ResponseWriter) {
	writeError(w, http.StatusNotFound, "no session of yours created the calling process; name the session with --session")
}

func (s *Server) handleSession(w http.ResponseWriter, r *http.Request) {
	c, ok := s.caller(w, r)
	if !ok {
		return
	}
	owner, ok := ownerParam(w, r)
	if !ok {
		return
	}
	at, ok := timeParam(w, r.URL.Query().Get("at"), "at")
	if !ok {
		return
	}
	if !at.IsZero() {
		s.pastSession(w, c, r.PathValue("id"), owner, at)
		return
	}
	sess, err := s.Sessions.Resolve(c.UID, r.PathValue("id"), owner)
	if err == nil && !sessionVisible(c, sess) {
		err = sessions.ErrNoSession
	}
	if errors.Is(err, sessions.ErrNoSession) && sessions.ValidID(r.PathValue("id")) {
		// Not in memory (any more): the history may hold it.
		s.pastSession(w, c, r.PathValue("id"), owner, time.Time{})
		return
	}
	if err != nil {
		s.refuse(w, c, r.PathValue("id"), err)
		return
	}
	// Members and kill records of other uids are neither shown nor
	// counted to a caller other than root (Detail).
	rec := s.Record(sess)
	s.RefreshRecord(&rec)
	writeJSON(w, http.StatusOK, Detail(c, rec, wantsRaw(c, r)))
}

// callerNode finds the caller's own process in the graph: the agent first
// applies every event the kernel reported up to now, the caller's fork
// and exec among them.
func (s *Server) callerNode(r *http.Request, c Caller) (lineage.Process, bool) {
	if s.Sync != nil {
		ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
		err := s.Sync(ctx)
		cancel()
		if err != nil {
			s.note(slog.LevelWarn, c.UID, "could not catch up with the kernel's events before resolving a caller", "caller_pid", c.PID, "err", err)
		}
	}
	// The process that connected: alive, started before the connection
	// was accepted, and of the connecting uid. A pid reused since (the
	// connecting process exited while its socket was passed on) is not
	// the caller.
	p, ok := s.Graph.Lookup(c.PID)
	if !ok || p.Exited || c.Accepted != 0 && p.ID.Start > c.Accepted || !c.Root() && p.UID != c.UID {
		return lineage.Process{}, false
	}
	// The connection is bound to the process that opened it (start time
	// read at accept, checked again by authenticate): the graph's node
	// must be that process, not an older or newer one with its pid.
	if c.start != 0 && p.ID.Tick() != c.start {
		return lineage.Process{}, false
	}
	return p, true
}

func (s *Server) handleBegin(w http.ResponseWriter, r *http.Request) {
	c, ok := s.caller(w, r)
	if !ok {
		return
	}
	var req BeginRequest
	const want = "{\"pid\": N, \"id\": \"optional\"}"
	if !s.decode(w, r, &req, want) {
		return
	}
	if req.PID == 0 {
		writeError(w, http.StatusBadRequest, "want a JSON body "+want)
		return
	}
	if req.PID == c.PID {
		// `mcptrace run|exec` asking about itself: its exec, whose tag
		// it asks about, is applied first.
		s.callerNode(r, c)
	}
	p, ok := s.Graph.Lookup(req.PID)
	if !ok || p.Exited || !c.Root() && p.UID != c.UID {
		writeError(w, http.StatusNotFound, fmt.Sprintf("process %d is not a live process of yours in the lineage graph", req.PID))
		return
	}
	res, err := s.Do(sessions.Op{Kind: sessions.OpBegin, Root: p.ID, Session: req.ID, Origin: sessions.OriginAPI})
	if err != nil {
		writeError(w, statusOf(err), fmt.Sprintf("begin session for %d: %s", req.PID, forCaller(c, err)))
		return
	}
	s.note(slog.LevelInfo, c.UID, "session begun through the API", "session", res.Session.ID, "root", p.ID.PID, "caller_uid", c.UID)
	writeJSON(w, http.StatusOK, res.Session)
}

func (s *Server) handleMark(w http.ResponseWriter, r *http.Request) {
	c, ok := s.caller(w, r)
	if !ok {
		return
	}
	var req MarkRequest
	if !s.decode(w, r, &req, "{\"session\": \"optional id\"}") {
		return
	}
	caller, ok := s.callerNode(r, c)
	if !ok {
		writeError(w, http.StatusConflict, fmt.Sprintf("the calling process %d is not in the lineage graph", c.PID))
		return
	}
	res, err := s.Do(sessions.Op{Kind: sessions.OpMark, Caller: caller.ID, UID: c.UID, Session: req.Session})
	if err != nil {
		s.note(slog.LevelWarn, c.UID, "destroy marker refused", "caller_pid", c.PID, "caller_uid", c.UID, "session", sessions.LogID(req.Session), "err", ratelog.Field(err.Error()))
		s.refuse(w, c, req.Session, err)
		return
	}
	writeJSON(w, http.StatusOK, markResult(res))
}

// handleEnd ends a session whole, root included (`mcptrace session end`).
func (s *Server) handleEnd(w http.ResponseWriter, r *http.Request) {
	c, ok := s.caller(w, r)
	if !ok {
		return
	}
	// Root may end any session: its process need not be resolved.
	var caller lineage.Process
	if !c.Root() {
		caller, _ = s.callerNode(r, c)
	}
	owner, ok := ownerParam(w, r)
	if !ok {
		return
	}
	res, err := s.Do(sessions.Op{Kind: sessions.OpEnd, Caller: caller.ID, UID: c.UID, Session: r.PathValue("id"), Owner: owner})
	if err != nil {
		s.note(slog.LevelWarn, c.UID, "session end refused", "caller_pid", c.PID, "caller_uid", c.UID, "session", sessions.LogID(r.PathValue("id")), "err", ratelog.Field(err.Error()))
		s.refuse(w, c, r.PathValue("id"), err)
		return
	}
	writeJSON(w, http.StatusOK, markResult(res))
}

// markResult says what an operation's actions ended.
func markResult(res sessions.Result) MarkResult {
	out := MarkResult{Ended: []string{}, Already: res.Duplicate}
	for _, a := range res.Actions {
		if a.Generation != 0 {
			out.Generations = append(out.Generations, EndedGeneration{Session: a.End.ID, Generation: a.Generation})
			continue
		}
		out.Ended = append(out.Ended, a.End.ID)
	}
	slices.Sort(out.Ended)
	return out
}

// refuse answers a marker or session end the tracker refused. A session
// that does not exist and one the caller may not end get the same answer
// (noSession); a caller outside sessions.within-pid is told so (it is
// decided before any session is looked up); other errors (a bad ID) say
// what is wrong.
func (s *Server) refuse(w http.ResponseWriter, c Caller, id string, err error) {
	switch {
	case errors.Is(err, sessions.ErrOutOfScope):
		// Decided from the caller alone, before any session is looked
		// up: saying so tells nothing about sessions, and tells the
		// operator which option refused.
		writeError(w, http.StatusForbidden, err.Error())
	case errors.Is(err, sessions.ErrNotAuthorized), errors.Is(err, sessions.ErrNoSession), errors.Is(err, sessions.ErrUnknownProcess):
		if id == "" {
			noCreatorSession(w)
		} else {
			noSession(w, id)
		}
	default:
		writeError(w, statusOf(err), forCaller(c, err))
	}
}

// forCaller is err's text as c may read it: for anyone but root, an error
// that names other owners' sessions or uids (a process that is already the
// root of a session, an ID several owners use) says only what kind of
// error it is.
func forCaller(c Caller, err error) string {
	if !c.Root() {
		for _, e := range []error{sessions.ErrAlreadyRoot, sessions.ErrAmbiguous} {
			if errors.Is(err, e) {
				return e.Error()
			}
		}
	}
	return err.Error()
}

func statusOf(err error) int {
	switch {
	case errors.Is(err, sessions.ErrNotAuthorized), errors.Is(err, sessions.ErrOutOfScope):
		return http.StatusForbidden
	case errors.Is(err, sessions.ErrNoSession), errors.Is(err, sessions.ErrUnknownProcess):
		return http.StatusNotFound
	case errors.Is(err, sessions.ErrIDInUse), errors.Is(err, sessions.ErrAlreadyRoot), errors.Is(err, sessions.ErrExited),
		errors.Is(err, sessions.ErrAmbiguous): // root only: nobody else names another owner's ID
		return http.StatusConflict
	}
	return http.StatusBadRequest
}
