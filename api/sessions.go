package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/mcptrace/mcptrace/enforcer"
	"github.com/mcptrace/mcptrace/lineage"
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
	Kills     []Kill            `json:"kills,omitempty"`
}

// Kill is one enforcer record; Argv is redacted.
type Kill struct {
	Session   string     `json:"session"`
	Process   lineage.ID `json:"process"`
	Comm      string     `json:"comm"`
	Argv      []string   `json:"argv,omitempty"`
	Signal    string     `json:"signal,omitempty"`
	Result    string     `json:"result"`
	LatencyMS float64    `json:"latency_ms,omitempty"`
	At        time.Time  `json:"at"`
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

// MarkResult lists the sessions the marker ended. A marker is delivered
// twice (the exec of `mcptrace mark` is seen in the kernel too); when the
// exec got there first, Ended lists what it ended and Already is true.
type MarkResult struct {
	Ended   []string `json:"ended"`
	Already bool     `json:"already_delivered,omitempty"`
}

// sessionVisible: root sees every session, others the sessions they own.
func sessionVisible(c Caller, s sessions.Session) bool { return c.Root() || s.Owner == c.UID }

func (s *Server) kills(session string) []Kill {
	var out []Kill
	if s.Enforcer == nil {
		return nil
	}
	for _, r := range s.Enforcer.Records() {
		if r.Session != session {
			continue
		}
		out = append(out, Kill{
			Session: r.Session, Process: r.Process, Comm: r.Comm, Argv: r.Argv,
			Signal: r.Signal, Result: r.Result, LatencyMS: float64(r.Latency) / float64(time.Millisecond), At: r.At,
		})
	}
	return out
}

func (s *Server) info(sess sessions.Session, members []lineage.Process, kills []Kill) SessionInfo {
	in := SessionInfo{Session: sess, Members: len(members)}
	for _, p := range members {
		if !p.Exited {
			in.Alive++
		}
	}
	for _, k := range kills {
		if k.Result == enforcer.ResultKilled {
			in.Killed++
		}
	}
	if s.Report != nil {
		if r, ok := s.Report(sess.ID); ok {
			in.Enforcement = &Enforcement{Empty: r.Empty, Killed: r.Killed, Survivors: r.Survivors, Refused: r.Refused,
				Spared: r.Spared, WouldKill: r.WouldKill, DurationMS: float64(r.Duration) / float64(time.Millisecond)}
		}
	}
	return in
}

func (s *Server) handleSessions(w http.ResponseWriter, r *http.Request) {
	c, ok := s.caller(w, r)
	if !ok {
		return
	}
	out := []SessionInfo{}
	for _, sess := range s.Sessions.Sessions() {
		if sessionVisible(c, sess) {
			out = append(out, s.info(sess, s.Sessions.Members(sess.ID), s.kills(sess.ID)))
		}
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) handleSession(w http.ResponseWriter, r *http.Request) {
	c, ok := s.caller(w, r)
	if !ok {
		return
	}
	sess, ok := s.Sessions.Get(r.PathValue("id"))
	if !ok || !sessionVisible(c, sess) {
		writeError(w, http.StatusNotFound, fmt.Sprintf("no session %q (see `mcptrace sessions`)", r.PathValue("id")))
		return
	}
	members := s.Sessions.Members(sess.ID)
	kills := s.kills(sess.ID)
	procs := visible(c, members)
	if s.Refresh != nil {
		s.Refresh(procs)
	}
	writeJSON(w, http.StatusOK, SessionDetail{
		Now:       s.Now(),
		Session:   s.info(sess, members, kills),
		Processes: procs,
		Kills:     kills,
	})
}

// callerNode finds the caller's own process in the graph. The caller's
// fork and exec events may still be on their way, so it waits briefly.
func (s *Server) callerNode(c Caller) (lineage.Process, bool) {
	for i := 0; i < 50; i++ {
		if p, ok := s.Graph.Lookup(c.PID); ok && !p.Exited {
			return p, true
		}
		time.Sleep(20 * time.Millisecond)
	}
	return lineage.Process{}, false
}

func (s *Server) handleBegin(w http.ResponseWriter, r *http.Request) {
	c, ok := s.caller(w, r)
	if !ok {
		return
	}
	var req BeginRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.PID == 0 {
		writeError(w, http.StatusBadRequest, "want a JSON body {\"pid\": N, \"id\": \"optional\"}")
		return
	}
	p, ok := s.Graph.Lookup(req.PID)
	if !ok || p.Exited || !c.Root() && p.UID != c.UID {
		writeError(w, http.StatusNotFound, fmt.Sprintf("process %d is not a live process of yours in the lineage graph", req.PID))
		return
	}
	sess, err := s.Sessions.Begin(p.ID, req.ID, sessions.OriginAPI)
	if err != nil {
		writeError(w, statusOf(err), fmt.Sprintf("begin session for %d: %v", req.PID, err))
		return
	}
	s.Log.Info("session begun through the API", "session", sess.ID, "root", p.ID.PID, "caller_uid", c.UID)
	writeJSON(w, http.StatusOK, sess)
}

func (s *Server) handleMark(w http.ResponseWriter, r *http.Request) {
	c, ok := s.caller(w, r)
	if !ok {
		return
	}
	var req MarkRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, "want a JSON body {\"session\": \"optional id\"}")
		return
	}
	caller, ok := s.callerNode(c)
	if !ok {
		writeError(w, http.StatusConflict, fmt.Sprintf("the calling process %d is not in the lineage graph yet", c.PID))
		return
	}
	acts, err := s.Sessions.Mark(caller.ID, c.UID, req.Session)
	if err != nil {
		s.Log.Warn("destroy marker refused", "caller_pid", c.PID, "caller_uid", c.UID, "session", req.Session, "err", err)
		writeError(w, statusOf(err), err.Error())
		return
	}
	res := MarkResult{Ended: []string{}}
	for _, a := range acts {
		res.Ended = append(res.Ended, a.End.ID)
	}
	if len(acts) == 0 {
		// Idempotent repeat: report the session the marker named, or the
		// one whose root created the caller.
		res.Already = true
		for _, sess := range s.Sessions.Sessions() {
			named := req.Session != "" && (sess.ID == req.Session || sess.Tag == req.Session)
			created := req.Session == "" && sess.Root == caller.Creator
			if (named || created) && sess.State == sessions.Ended && sess.EndReason == sessions.ReasonMarker {
				res.Ended = append(res.Ended, sess.ID)
			}
		}
	}
	slices.Sort(res.Ended)
	if len(acts) > 0 {
		s.End(acts)
	}
	writeJSON(w, http.StatusOK, res)
}

func statusOf(err error) int {
	switch {
	case errors.Is(err, sessions.ErrNotAuthorized), errors.Is(err, sessions.ErrOutOfScope):
		return http.StatusForbidden
	case errors.Is(err, sessions.ErrNoSession), errors.Is(err, sessions.ErrUnknownProcess):
		return http.StatusNotFound
	case errors.Is(err, sessions.ErrIDInUse), errors.Is(err, sessions.ErrAlreadyRoot), errors.Is(err, sessions.ErrExited):
		return http.StatusConflict
	}
	return http.StatusBadRequest
}
