package api

import (
	"cmp"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/mcptrace/mcptrace/history"
	"github.com/mcptrace/mcptrace/internal/ratelog"
	"github.com/mcptrace/mcptrace/lineage"
	"github.com/mcptrace/mcptrace/sessions"
)

// HistoryStatus is the history journal as status shows it.
type HistoryStatus struct {
	// Off says why no history is kept; "" when one is.
	Off   string         `json:"off,omitempty"`
	Store string         `json:"store,omitempty"`
	Stats *history.Stats `json:"stats,omitempty"`
}

// HistoryList is the answer of GET /v1/history: the sessions the caller
// may see, newest first, without their details.
type HistoryList struct {
	Sessions []history.Session `json:"sessions"`
	// Oldest is the time of the oldest event the history still holds:
	// what happened before it is gone (history.max-age, max-bytes).
	Oldest time.Time `json:"oldest,omitzero"`
	// Truncated: more sessions matched than Limit.
	Truncated bool `json:"truncated,omitempty"`
	// Notes are what the agent and the history said of their own losses
	// and repairs in the time range, newest last (root only: they are
	// the node's).
	Notes []history.Note `json:"notes,omitempty"`
}

// maxNotes bounds the notes one answer lists (the newest).
const maxNotes = 100

const (
	// DefaultHistoryLimit and MaxHistoryLimit bound what one history
	// answer lists.
	DefaultHistoryLimit = 100
	MaxHistoryLimit     = 1000
)

// historyOf is the journal, or an answer saying there is none.
func (s *Server) historyOf(w http.ResponseWriter) (*history.Journal, bool) {
	if s.History == nil {
		writeError(w, http.StatusServiceUnavailable, "no history is kept on this node")
		return nil, false
	}
	j, err := s.History()
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, err.Error())
		return nil, false
	}
	return j, true
}

// historyFilter is who c may read the history of: its own sessions
// (root: owner's, or every owner's). ok is false when c named another
// uid, whose sessions it may not see: the answer is then empty, as for a
// uid without sessions.
func historyFilter(c Caller, owner *uint32) (f history.Filter, ok bool) {
	if c.Root() {
		return history.Filter{Owner: owner}, true
	}
	if owner != nil && *owner != c.UID {
		return history.Filter{}, false
	}
	uid := c.UID
	return history.Filter{Owner: &uid}, true
}

func (s *Server) handleHistory(w http.ResponseWriter, r *http.Request) {
	c, ok := s.caller(w, r)
	if !ok {
		return
	}
	release, ok := s.histWork.take(w, c)
	if !ok {
		return
	}
	defer release()
	owner, ok := ownerParam(w, r)
	if !ok {
		return
	}
	q := r.URL.Query()
	from, ok := timeParam(w, q.Get("from"), "from")
	if !ok {
		return
	}
	to, ok := timeParam(w, q.Get("to"), "to")
	if !ok {
		return
	}
	limit := DefaultHistoryLimit
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxHistoryLimit {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("limit %q: want 1 to %d", ratelog.Field(v), MaxHistoryLimit))
			return
		}
		limit = n
	}
	id := q.Get("id")
	if id != "" && !sessions.ValidID(id) {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("id %s", sessions.LogID(id)))
		return
	}
	j, ok := s.historyOf(w)
	if !ok {
		return
	}
	out := HistoryList{Sessions: []history.Session{}, Oldest: j.Stats().Oldest}
	f, may := historyFilter(c, owner)
	if !may {
		writeJSON(w, http.StatusOK, out)
		return
	}
	f.ID, f.From, f.To = id, from, to
	list, err := j.Sessions(f, limit+1)
	if err != nil {
		s.note(slog.LevelError, c.UID, "history: reading sessions", "err", err)
		writeError(w, http.StatusInternalServerError, "the history could not be read (see the agent's log)")
		return
	}
	if len(list) > limit {
		list, out.Truncated = list[:limit], true
	}
	out.Sessions = append(out.Sessions, list...)
	if c.Root() {
		notes, err := j.Notes()
		if err != nil {
			s.note(slog.LevelError, c.UID, "history: reading notes", "err", err)
		}
		for _, n := range notes {
			if (from.IsZero() || !n.At.Before(from)) && (to.IsZero() || !n.At.After(to)) {
				out.Notes = append(out.Notes, n)
			}
		}
		if len(out.Notes) > maxNotes {
			out.Notes = out.Notes[len(out.Notes)-maxNotes:]
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// timeParam reads a time given as RFC 3339; "" is the zero time.
func timeParam(w http.ResponseWriter, v, name string) (time.Time, bool) {
	if v == "" {
		return time.Time{}, true
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("%s %q: want a time like 2026-11-26T09:30:00Z", name, ratelog.Field(v)))
		return time.Time{}, false
	}
	return t, true
}

// pastSession answers for a session the agent no longer holds (or, with
// at, the one with that ID at that time) from the history, narrowed to
// c by Detail. What c may not see is absent, as in the live answer.
func (s *Server) pastSession(w http.ResponseWriter, c Caller, id string, owner *uint32, at time.Time) {
	if s.History == nil {
		noSession(w, id)
		return
	}
	release, ok := s.histWork.take(w, c)
	if !ok {
		return
	}
	defer release()
	j, err := s.History()
	f, may := historyFilter(c, owner)
	if err != nil || !may || !sessions.ValidID(id) {
		noSession(w, id)
		return
	}
	f.ID, f.From, f.To = id, at, at
	hs, found, err := j.Session(f)
	if err != nil {
		s.note(slog.LevelError, c.UID, "history: reading a session", "err", err)
		writeError(w, http.StatusInternalServerError, "the history could not be read (see the agent's log)")
		return
	}
	if !found {
		noSession(w, id)
		return
	}
	var rec SessionRecord
	if err := json.Unmarshal(hs.Detail, &rec); err != nil {
		s.note(slog.LevelError, c.UID, "history: a session record cannot be read", "err", err)
		writeError(w, http.StatusInternalServerError, "the history's record of this session cannot be read (see the agent's log)")
		return
	}
	d := Detail(c, rec, false)
	d.Recorded = hs.Written
	writeJSON(w, http.StatusOK, d)
}

// maxPastTrees bounds the session records one `tree PID --at` reads.
const maxPastTrees = 8

// pastTree answers GET /v1/tree/{pid}?at=TIME from the history: the
// process with that pid alive at that time in a session the caller may
// see, and what it had created by then, as it was then (what exited
// later is shown alive).
func (s *Server) pastTree(w http.ResponseWriter, c Caller, pid uint32, at time.Time) {
	notFound := func() {
		writeError(w, http.StatusNotFound, fmt.Sprintf("the history holds no process %d alive at %s that you may see", pid, at.UTC().Format(time.RFC3339)))
	}
	if s.History == nil {
		notFound()
		return
	}
	release, ok := s.histWork.take(w, c)
	if !ok {
		return
	}
	defer release()
	j, err := s.History()
	f, may := historyFilter(c, nil)
	if err != nil || !may {
		notFound()
		return
	}
	f.From, f.To = at, at
	// The index names the sessions whose records hold pid: only those
	// are read, at most maxPastTrees of them (a pid reused within one
	// moment's sessions, newest first).
	list, err := j.SessionsWithPID(f, pid, maxPastTrees)
	if err != nil {
		writeError(w, http.StatusInternalServerError, "the history could not be read (see the agent's log)")
		return
	}
	for _, hs := range list {
		full, ok, err := j.SessionAt(hs.Owner, hs.ID, hs.Began)
		if err != nil || !ok {
			continue
		}
		var rec SessionRecord
		if json.Unmarshal(full.Detail, &rec) != nil {
			continue
		}
		// The record's times are on the boot clock of its boot; Began
		// ties it to the wall clock.
		offset := full.Began.UnixNano() - int64(rec.Session.Began)
		boot := uint64(at.UnixNano() - offset)
		d := Detail(c, rec, false)
		if procs, ok := treeAt(d.Processes, pid, boot); ok {
			writeJSON(w, http.StatusOK, ProcessList{Now: boot, Processes: procs})
			return
		}
	}
	notFound()
}

// treeAt is the process pid alive at boot-clock time t among procs, and
// the processes it created (at any depth) that were born by then, as
// they were at t.
func treeAt(procs []lineage.Process, pid uint32, t uint64) ([]lineage.Process, bool) {
	alive := func(p lineage.Process) bool {
		return p.ID.Start <= t && (!p.Exited || p.ExitTime == 0 || p.ExitTime > t)
	}
	var top lineage.ID
	for _, p := range procs {
		if p.ID.PID == pid && alive(p) {
			top = p.ID
		}
	}
	if top.IsZero() {
		return nil, false
	}
	in := map[lineage.ID]bool{top: true}
	var out []lineage.Process
	// Creators start before what they create: by start, one pass.
	sorted := slices.Clone(procs)
	slices.SortFunc(sorted, func(a, b lineage.Process) int {
		return cmp.Or(cmp.Compare(a.ID.Start, b.ID.Start), cmp.Compare(a.ID.PID, b.ID.PID))
	})
	for _, p := range sorted {
		if p.ID.Start > t || !(in[p.ID] || in[p.Creator]) {
			continue
		}
		in[p.ID] = true
		if p.Exited && p.ExitTime > t {
			p.Exited, p.ExitTime, p.ExitCode, p.Signal = false, 0, 0, 0
		}
		var ims []lineage.Image
		for _, im := range p.Images {
			if im.Time <= t {
				ims = append(ims, im)
			}
		}
		p.Images = ims
		out = append(out, p)
	}
	return out, true
}
