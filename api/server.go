package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/mcptrace/mcptrace/enforcer"
	"github.com/mcptrace/mcptrace/lineage"
	"github.com/mcptrace/mcptrace/sessions"
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
	Now    func() uint64 // CLOCK_BOOTTIME ns
	Log    *slog.Logger

	http *http.Server
}

// Caller is who sent a request, from the socket's peer credentials.
type Caller struct {
	PID uint32
	UID uint32
	// Accepted is when the connection was accepted (CLOCK_BOOTTIME ns):
	// the process that connected had started by then, so a process with
	// the caller's pid that started later is not the caller (its pid was
	// reused). 0 when unknown.
	Accepted uint64
}

// Root reports whether the caller may see the whole node.
func (c Caller) Root() bool { return c.UID == 0 }

type callerKey struct{}

// CallerFrom returns the caller of a request served by Server.
func CallerFrom(ctx context.Context) (Caller, bool) {
	c, ok := ctx.Value(callerKey{}).(Caller)
	return c, ok
}

// Listen creates the socket's directory (0755) and the socket with mode,
// replacing a stale socket file left by a previous agent.
func Listen(path string, mode os.FileMode) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("create socket directory: %w", err)
	}
	if c, err := net.Dial("unix", path); err == nil {
		c.Close()
		return nil, fmt.Errorf("listen on %s: another agent is already serving there", path)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("remove stale socket %s: %w", path, err)
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	if err := os.Chmod(path, mode); err != nil {
		l.Close()
		return nil, fmt.Errorf("chmod socket %s: %w", path, err)
	}
	return l, nil
}

// maxBody bounds a request body: the largest one the API takes is a
// session ID.
const maxBody = 64 << 10

// Serve answers requests on l until ctx ends.
func (s *Server) Serve(ctx context.Context, l net.Listener) error {
	if s.Log == nil {
		s.Log = slog.Default()
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/processes", s.handleProcesses)
	mux.HandleFunc("GET /v1/tree/{pid}", s.handleRelatives((*lineage.Graph).Descendants))
	mux.HandleFunc("GET /v1/ancestors/{pid}", s.handleRelatives((*lineage.Graph).Ancestors))
	mux.HandleFunc("GET /v1/status", s.handleStatus)
	mux.HandleFunc("GET /v1/sessions", s.handleSessions)
	mux.HandleFunc("GET /v1/sessions/{id}", s.handleSession)
	mux.HandleFunc("POST /v1/sessions", s.handleBegin)
	mux.HandleFunc("POST /v1/sessions/{id}/end", s.handleEnd)
	mux.HandleFunc("POST /v1/mark", s.handleMark)
	s.http = &http.Server{
		Handler:           http.MaxBytesHandler(mux, maxBody),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		IdleTimeout:       60 * time.Second,
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			caller, err := peerCred(c)
			if err != nil {
				s.Log.Warn("peer credentials unavailable; refusing connection", "err", err)
				// No caller in the context: every handler refuses.
				return ctx
			}
			caller.Accepted = s.Now()
			return context.WithValue(ctx, callerKey{}, caller)
		},
	}
	go func() {
		<-ctx.Done()
		shut, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		s.http.Shutdown(shut)
	}()
	if err := s.http.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve api: %w", err)
	}
	return nil
}

func (s *Server) caller(w http.ResponseWriter, r *http.Request) (Caller, bool) {
	c, ok := CallerFrom(r.Context())
	if !ok {
		writeError(w, http.StatusForbidden, "peer credentials of the connection are unknown; refusing")
	}
	return c, ok
}

// visible filters nodes down to what the caller may see.
func visible(c Caller, procs []lineage.Process) []lineage.Process {
	if c.Root() {
		return procs
	}
	out := procs[:0:0]
	for _, p := range procs {
		if p.UID == c.UID {
			out = append(out, p)
		}
	}
	return out
}

func (s *Server) list(w http.ResponseWriter, c Caller, procs []lineage.Process) {
	procs = visible(c, procs)
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
	s.list(w, c, s.Graph.Processes())
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
		s.list(w, c, query(s.Graph, p.ID))
	}
}

func (s *Server) handleStatus(w http.ResponseWriter, r *http.Request) {
	if _, ok := s.caller(w, r); !ok {
		return
	}
	st := s.Status()
	st.Now = s.Now()
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
