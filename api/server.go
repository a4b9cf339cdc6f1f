package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcptrace/mcptrace/enforcer"
	"github.com/mcptrace/mcptrace/events"
	"github.com/mcptrace/mcptrace/history"
	"github.com/mcptrace/mcptrace/internal/ratelog"
	"github.com/mcptrace/mcptrace/lineage"
	"github.com/mcptrace/mcptrace/orphans"
	"github.com/mcptrace/mcptrace/redact"
	"github.com/mcptrace/mcptrace/sessions"
	"github.com/mcptrace/mcptrace/windows/owners"
)

// Server answers API requests from the graph.
type Server struct {
	Graph    *lineage.Graph
	Sessions *sessions.Tracker
	Enforcer *enforcer.Enforcer
	// Do applies a tracker operation (begin, mark, end), journals it and
	// hands what it ends to the enforcer.
	Do func(sessions.Op) (sessions.Result, error)
	// Sync returns once the graph holds every process event the kernel
	// reported before the call: the caller's own fork and exec are then
	// known. Optional.
	Sync func(context.Context) error
	// Refresh brings what the graph cannot learn from events (the current
	// parent after a reparenting) up to date in answers, in place. Optional.
	Refresh func([]lineage.Process)
	// Report gives the enforcer's report of a session it finished ending.
	Report func(session string) (enforcer.Report, bool)
	Status func() Status // the agent's counters; Now is filled by the server
	// Containers gives the containers members of a session started, with
	// what the engine said of them. Optional.
	Containers func(sessions.Session) []Container
	// History is the journal past sessions are read from; an error says
	// why there is none. Optional.
	History func() (*history.Journal, error)
	// Orphans lists the leaked servers no session owns: every uid's for
	// root, a caller's own otherwise. EndOrphans ends them with the
	// caller's authority (see agent.EndOrphans). Optional.
	Orphans    func(uid uint32, root bool) (orphans.Found, error)
	EndOrphans func(ctx context.Context, uid uint32, root, includeLikely, dryRun bool) ([]orphans.Orphan, enforcer.Report, error)
	// Events is the agent's event stream (GET /v1/events). Optional.
	Events *events.Hub
	Now    func() uint64 // CLOCK_BOOTTIME ns
	Log    *slog.Logger
	// MaxConnections and MaxConnectionsPerUID cap the open connections of
	// non-root users, together and per uid; 0 takes the defaults
	// (DefaultMaxConnections, DefaultMaxConnectionsPerUID).
	MaxConnections       int
	MaxConnectionsPerUID int
	// Owners gives Windows callers their uid: the owner number its table
	// maps the caller's token to (0, root, for an elevated or SYSTEM
	// token). Windows only, and required there: without it every
	// connection is refused, as its caller cannot be numbered. Linux
	// callers have their uid from the kernel; it is ignored there.
	Owners *owners.Table

	// noPIDFD makes the server bind peers by start time only, as on a
	// kernel without SO_PEERPIDFD (tests).
	noPIDFD bool

	http     *http.Server
	logMu    sync.Mutex
	logs     *ratelog.Limiter[uint32] // what callers can make the agent log, per uid
	adm      admission
	pidfd    bool   // peers are bound by pidfd
	fdLimit  uint64 // RLIMIT_NOFILE
	oversize atomic.Uint64
	gone     atomic.Uint64 // requests refused: the peer process is gone
	histWork historyWork   // history requests running, per uid (historywork.go)
	// requests counts requests by route pattern (fixed when the handler
	// is built; read-only afterwards).
	requests     map[string]*atomic.Uint64
	requestsOnce sync.Once
	// started is set once Serve has set up what APIStatus reads.
	started atomic.Bool
	events  eventsState // events.go
}

// ErrServing: another agent holds the socket or pipe (it serves there,
// or is starting to). Listen then changed nothing, and the agent that
// gets it stops having touched nothing else either.
var ErrServing = errors.New("another agent is already serving there")

// Caller is who sent a request, from the socket's peer credentials.
type Caller struct {
	PID uint32
	UID uint32
	// Accepted is when the connection was accepted (CLOCK_BOOTTIME ns):
	// the process that connected had started by then. 0 when unknown.
	Accepted uint64
	// start is the caller's start time in /proc clock ticks, read at
	// accept; 0 when unknown (a caller a test made).
	start uint64
	peer  *peer
}

// Root reports whether the caller may see the whole node.
func (c Caller) Root() bool { return c.UID == 0 }

type callerKey struct{}

// CallerFrom returns the caller of a request served by Server.
func CallerFrom(ctx context.Context) (Caller, bool) {
	c, ok := ctx.Value(callerKey{}).(Caller)
	return c, ok
}

// handler routes the API's requests: every one is authenticated (see
// authenticate) and its body bounded.
func (s *Server) handler() http.Handler {
	mux := http.NewServeMux()
	routes := []struct {
		pattern string
		h       http.HandlerFunc
	}{
		{"GET /v1/processes", s.handleProcesses},
		{"GET /v1/tree/{pid}", s.handleTree},
		{"GET /v1/ancestors/{pid}", s.handleRelatives((*lineage.Graph).Ancestors)},
		{"GET /v1/status", s.handleStatus},
		{"GET /v1/sessions", s.handleSessions},
		{"GET /v1/sessions/{id}", s.handleSession},
		{"POST /v1/sessions", s.handleBegin},
		{"POST /v1/sessions/{id}/end", s.handleEnd},
		{"POST /v1/mark", s.handleMark},
		{"GET /v1/history", s.handleHistory},
		{"GET /v1/orphans", s.handleOrphans},
		{"POST /v1/orphans/end", s.handleEndOrphans},
		{"GET /v1/events", s.handleEvents},
	}
	s.requestsOnce.Do(func() {
		s.requests = make(map[string]*atomic.Uint64, len(routes)+1)
		s.requests[otherRoute] = new(atomic.Uint64)
		for _, r := range routes {
			s.requests[r.pattern] = new(atomic.Uint64)
		}
	})
	for _, r := range routes {
		mux.HandleFunc(r.pattern, r.h)
	}
	return http.MaxBytesHandler(s.authenticate(s.count(mux)), maxBody)
}

// otherRoute counts requests that matched no endpoint.
const otherRoute = "other"

// count counts each request under the pattern of the endpoint that
// served it (a fixed set: the paths callers send are never keys).
func (s *Server) count(mux *http.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mux.ServeHTTP(w, r)
		c, ok := s.requests[r.Pattern]
		if !ok {
			c = s.requests[otherRoute]
		}
		c.Add(1)
	})
}

// What a caller can make the API log (refusals, begins): a burst of
// logBurst lines per uid, then one per logEvery, the rest counted into the
// next line; at most logKeys uids are remembered.
const (
	logBurst = 5
	logEvery = 10 * time.Second
	logKeys  = 1024
)

// note logs what a caller of uid made the agent log, within uid's limit.
func (s *Server) note(level slog.Level, uid uint32, msg string, args ...any) {
	s.logMu.Lock()
	defer s.logMu.Unlock()
	s.logs.Log(s.Log, level, uid, uint64(time.Now().UnixNano()), msg, args...)
}

// CallerLog is the logger for work uid asked for (an ending of orphans
// and its dry run): root's lines all go to Log; anyone else's share the
// per-uid bound of every endpoint's lines (logBurst, then one per
// logEvery, the rest counted into the next one), across requests and
// connections. Before Serve, Log itself.
func (s *Server) CallerLog(uid uint32) *slog.Logger {
	if s == nil || s.Log == nil {
		return slog.Default()
	}
	if uid == 0 || s.logs == nil {
		return s.Log
	}
	return slog.New(s.logs.Handler(s.Log.Handler(), &s.logMu, uid, func() uint64 { return uint64(time.Now().UnixNano()) }))
}

// Serve answers requests on l until ctx ends.
//
// Every accepted connection is bound to the process that opened it (see
// peer) and admitted under the connection caps; every request on it acts
// for that process only while it runs with the peer's uid.
func (s *Server) Serve(ctx context.Context, l net.Listener) error {
	if s.Log == nil {
		s.Log = slog.Default()
	}
	s.logs = ratelog.New[uint32](logBurst, uint64(logEvery), logKeys)
	if s.Now == nil {
		s.Now = func() uint64 { return 0 }
	}
	s.adm = admission{maxTotal: s.MaxConnections, maxPerUID: s.MaxConnectionsPerUID, perUID: map[uint32]int{}}
	if s.adm.maxTotal <= 0 {
		s.adm.maxTotal = DefaultMaxConnections
	}
	if s.adm.maxPerUID <= 0 {
		s.adm.maxPerUID = DefaultMaxConnectionsPerUID
	}
	// A flood of connections must not take the file descriptors the
	// enforcer needs for pidfds: keep FDReserve free.
	limit, err := raiseFDLimit()
	switch {
	case errors.Is(err, errNoFDLimit):
		// Nothing to leave free.
	case err != nil:
		s.Log.Warn("cannot read the file descriptor limit", "err", err)
	default:
		s.fdLimit = limit
		if fit := (int64(limit) - FDReserve) / 2; fit < int64(s.adm.maxTotal) {
			s.adm.maxTotal = int(max(fit, 1))
			s.Log.Warn("api.max-connections lowered to leave file descriptors to the enforcer",
				"rlimit_nofile", limit, "reserve", FDReserve, "max_connections", s.adm.maxTotal)
		}
	}
	s.pidfd = !s.noPIDFD && peerPIDFDSupported()
	s.logPeerBinding()
	ll := &limitListener{Listener: l, adm: &s.adm, usePIDFD: s.pidfd, owners: s.Owners,
		onRefuse: func(reason string, uid uint32, err error) {
			s.Log.Debug("connection refused", "reason", reason, "uid", uid, "err", err)
		}}
	handler := s.handler()
	s.started.Store(true)
	s.http = &http.Server{
		Handler:           handler,
		MaxHeaderBytes:    maxHeader,
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       readTimeout,
		WriteTimeout:      writeTimeout,
		IdleTimeout:       idleTimeout,
		ErrorLog:          slog.NewLogLogger(s.Log.Handler(), slog.LevelDebug),
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			pc, ok := c.(*peerConn)
			if !ok {
				// No caller in the context: every request is refused.
				return ctx
			}
			return context.WithValue(ctx, callerKey{}, Caller{
				PID: pc.peer.pid, UID: pc.peer.uid, Accepted: s.Now(), start: pc.peer.start, peer: pc.peer,
			})
		},
	}
	// At ctx's end the listener closes, idle connections close, and busy
	// ones get 2 s to finish before they are closed too. Serve returns
	// once every connection is closed, not when the listener is: on
	// Windows a pipe lives while any instance of it is open, and an agent
	// started again on the same pipe must find it gone.
	shut := make(chan struct{})
	go func() {
		defer close(shut)
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
		defer cancel()
		if err := s.http.Shutdown(sctx); err != nil {
			s.Log.Debug("api connections still busy at stop; closing them", "grace", shutdownGrace, "err", err)
			s.http.Close()
		}
	}()
	if err := s.http.Serve(ll); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve api: %w", err)
	}
	<-shut
	return nil
}

// shutdownGrace is how long a request under way at stop may take.
const shutdownGrace = 2 * time.Second

// authenticate refuses a request whose connection has no bound peer, or
// whose peer process exited, was replaced by a reused pid or changed uid
// since the connection was accepted: such a connection acts for nobody,
// and is closed.
func (s *Server) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, ok := CallerFrom(r.Context())
		if !ok {
			s.gone.Add(1)
			w.Header().Set("Connection", "close")
			writeError(w, http.StatusForbidden, errNoPeer.Error()+"; refusing")
			return
		}
		if c.peer != nil {
			if err := c.peer.verify(); err != nil {
				s.gone.Add(1)
				s.note(slog.LevelWarn, c.UID, "request refused: the connection's process is gone", "peer_pid", c.PID, "peer_uid", c.UID)
				w.Header().Set("Connection", "close")
				writeError(w, http.StatusForbidden, err.Error()+"; open a new connection")
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

func (s *Server) caller(w http.ResponseWriter, r *http.Request) (Caller, bool) {
	c, ok := CallerFrom(r.Context())
	if !ok {
		writeError(w, http.StatusForbidden, errNoPeer.Error()+"; refusing")
	}
	return c, ok
}

// APIStatus reports the API's own counters: what the agent's metrics
// show. Before Serve has set up its counters, it reports zeros.
func (s *Server) APIStatus() APIStatus {
	if !s.started.Load() {
		return APIStatus{}
	}
	return s.apiStatus()
}

// apiStatus reports the API's own counters.
func (s *Server) apiStatus() APIStatus {
	requests := make(map[string]uint64, len(s.requests))
	for route, n := range s.requests {
		requests[route] = n.Load()
	}
	return APIStatus{
		Connections: s.adm.open(), MaxConnections: s.adm.maxTotal, MaxConnectionsPerUID: s.adm.maxPerUID,
		RefusedTotalCap: s.adm.refused.overTotal.Load(), RefusedUIDCap: s.adm.refused.overUID.Load(),
		RefusedIdentity: s.adm.refused.identity.Load(), RefusedGone: s.gone.Load(),
		Oversize: s.oversize.Load(), RefusedHistoryBusy: s.histWork.refused.Load(), FDLimit: s.fdLimit, PeerIdentity: peerIdentity(s.pidfd),
		Requests: requests,
	}
}

// decode reads a JSON request body into v; an oversized body is counted.
func (s *Server) decode(w http.ResponseWriter, r *http.Request, v any, want string) bool {
	err := json.NewDecoder(r.Body).Decode(v)
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		s.oversize.Add(1)
		writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body over %d bytes", maxBody))
		return false
	case err != nil:
		writeError(w, http.StatusBadRequest, "want a JSON body "+want)
		return false
	}
	return true
}

// visible filters nodes down to what the caller may see.
func visible(c Caller, procs []lineage.Process) []lineage.Process {
	if c.Root() {
		return procs
	}
	out := procs[:0:0]
	for _, p := range procs {
		if processVisible(c, p) {
			out = append(out, p)
		}
	}
	return out
}

// processVisible: root sees every process, anyone else those of its uid.
func processVisible(c Caller, p lineage.Process) bool { return c.Root() || p.UID == c.UID }

// wantsRaw: root asked for unredacted argv (?raw=1). Anyone else asking
// gets the redacted answer, the same as without the parameter.
func wantsRaw(c Caller, r *http.Request) bool {
	return c.Root() && r.URL.Query().Get("raw") == "1"
}

// present makes visible processes fit for the caller, in place: a caller
// other than root sees only the images executed under its own uid (a
// process that switched uid does not show its new owner what it ran
// before, nor its creator's image) and every argv redacted; root sees
// every image, redacted unless it asked for raw argv. Images are copied:
// the graph's are shared.
func present(c Caller, raw bool, procs []lineage.Process) {
	for i := range procs {
		ims := make([]lineage.Image, 0, len(procs[i].Images))
		for _, im := range procs[i].Images {
			if !c.Root() && im.UID != c.UID {
				continue
			}
			if !raw {
				im.Argv = redact.Argv(im.Argv)
			}
			ims = append(ims, im)
		}
		if len(ims) == 0 {
			ims = nil
		}
		procs[i].Images = ims
	}
}

func (s *Server) list(w http.ResponseWriter, r *http.Request, c Caller, procs []lineage.Process) {
	procs = visible(c, procs)
	present(c, wantsRaw(c, r), procs)
	if s.Refresh != nil {
		s.Refresh(procs)
	}
	writeJSON(w, http.StatusOK, ProcessList{Now: s.Now(), Processes: procs})
}

func (s *Server) handleProcesses(w http.ResponseWriter, r *http.Request) {
	c, ok := s.caller(w, r)
	if !ok {
		return
	}
	// Filtered before it is copied: a caller other than root pays for
	// its own processes, not for the node's.
	s.list(w, r, c, s.Graph.ProcessesWhere(func(p lineage.Process) bool { return processVisible(c, p) }))
}

// node resolves the {pid} path value to the newest node with that pid that
// the caller may see.
func (s *Server) node(w http.ResponseWriter, r *http.Request, c Caller) (lineage.Process, bool) {
	pid, err := strconv.ParseUint(r.PathValue("pid"), 10, 32)
	if err != nil {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("pid %q is not a process id", r.PathValue("pid")))
		return lineage.Process{}, false
	}
	p, ok := s.Graph.Lookup(uint32(pid))
	if !ok || !c.Root() && p.UID != c.UID {
		// Other users' processes are reported as unknown, not as forbidden,
		// so the API does not reveal which pids exist.
		writeError(w, http.StatusNotFound, fmt.Sprintf("process %d is not in the lineage graph", pid))
		return lineage.Process{}, false
	}
	return p, true
}

// handleRelatives answers with the processes query returns for the {pid}
// node: its descendants (tree) or its ancestors.
func (s *Server) handleRelatives(query func(*lineage.Graph, lineage.ID) []lineage.Process) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		c, ok := s.caller(w, r)
		if !ok {
			return
		}
		p, ok := s.node(w, r, c)
		if !ok {
			return
		}
		s.list(w, r, c, query(s.Graph, p.ID))
	}
}

// handleTree answers with the {pid} node and its descendants; with
// ?at=TIME, as the history has them at that time.
func (s *Server) handleTree(w http.ResponseWriter, r *http.Request) {
	v := r.URL.Query().Get("at")
	if v == "" {
		s.handleRelatives((*lineage.Graph).Descendants)(w, r)
		return
	}
	c, ok := s.caller(w, r)
	if !ok {
		return
	}
	at, ok := timeParam(w, v, "at")
	if !ok {
		return
	}
	pid, err := strconv.ParseUint(r.PathValue("pid"), 10, 32)
	if err != nil {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("pid %q is not a process id", ratelog.Field(r.PathValue("pid"))))
		return
	}
	s.pastTree(w, c, uint32(pid), at)
}

func (s *Server) handleStatus(w http.ResponseWriter, r *http.Request) {
	c, ok := s.caller(w, r)
	if !ok {
		return
	}
	var st Status
	if s.Status != nil {
		st = s.Status()
	}
	if !c.Root() {
		// The tracker's and the enforcer's counters, and the endings
		// under way, move with other users' sessions (a refused marker
		// counts differently for a session that exists): they would tell
		// another user what a refusal does not.
		st.Sessions, st.Enforcer, st.PendingEndings = sessions.Stats{}, EnforcerStatus{}, 0
		// Whether attribution is on, not what other users' sessions
		// claim, nor a reason that may name their containers.
		st.Containers = ContainerStatus{Attribution: st.Containers.Attribution, Socket: st.Containers.Socket}
		// Whether there is a history, not how many session records it
		// wrote (they move with other users' sessions).
		st.History = HistoryStatus{Off: st.History.Off, Store: st.History.Store}
		// Node-wide leaks and the agent's log move with other users'
		// sessions, and may name them.
		st.Leaks, st.Problems = LeakStatus{}, nil
		st.Partial = true
	}
	st.Stream = st.Stream.forCaller(c)
	st.Now = s.Now()
	st.API = s.apiStatus()
	writeJSON(w, http.StatusOK, st)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, Error{Error: msg})
}
