package containers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"
)

// DefaultTimeout bounds a request to the engine when Engine.Timeout is 0.
// It is longer than the 10 s dockerd itself waits for a killed container
// to exit.
const DefaultTimeout = 15 * time.Second

// Response bodies are read through these limits.
const (
	maxBody     = 1 << 20  // one container, a version, an error
	maxListBody = 32 << 20 // MaxList summaries of about 2 KiB
)

var (
	// ErrNotFound means the engine has no such container: it was removed,
	// or never existed. A caller that wants a container ended treats it as
	// success.
	ErrNotFound = errors.New("no such container")

	// ErrUnreachable means the engine did not answer: nothing listens on
	// the socket, the socket is refused to us, or no answer came in time.
	ErrUnreachable = errors.New("container engine unreachable")
)

// Engine is a client of one Docker engine's API on a unix socket.
type Engine struct {
	// Timeout bounds every request when its context allows longer; Stop
	// adds its grace to it. 0 means DefaultTimeout. Set it before the
	// first call.
	Timeout time.Duration

	socket string
	client *http.Client

	mu  sync.Mutex
	api string // the negotiated API version, "" until negotiated
}

// NewEngine returns a client of the engine listening on socketPath (a
// path, or a unix:// address as in DOCKER_HOST). It does no I/O.
func NewEngine(socketPath string) *Engine {
	socket := strings.TrimPrefix(socketPath, "unix://")
	dialer := &net.Dialer{}
	return &Engine{
		socket: socket,
		client: &http.Client{
			Transport: &http.Transport{
				DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
					return dialer.DialContext(ctx, "unix", socket)
				},
				MaxIdleConns:       2,
				IdleConnTimeout:    30 * time.Second,
				DisableCompression: true,
			},
			// No redirects: the engine never sends one, and following one
			// would put a path the engine chose into a second request.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
	}
}

// Socket returns the path of the engine's socket.
func (e *Engine) Socket() string { return e.socket }

// Error is an error of a call to the engine.
type Error struct {
	Socket string // the engine's socket
	Op     string // what was asked, e.g. "inspect 0123456789ab"; "" for a connection error
	Status int    // the HTTP status of the answer; 0 when none came
	Err    error  // what went wrong; ErrNotFound and ErrUnreachable are found through it
	Hint   string // what to do about it, or ""
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("container engine at ")
	b.WriteString(e.Socket)
	if e.Op != "" {
		b.WriteString(": ")
		b.WriteString(e.Op)
	}
	b.WriteString(": ")
	b.WriteString(e.Err.Error())
	if e.Hint != "" {
		b.WriteString(" (")
		b.WriteString(e.Hint)
		b.WriteString(")")
	}
	return b.String()
}

func (e *Error) Unwrap() error { return e.Err }

// kindError is a cause that also matches a sentinel: it prints as the
// cause.
type kindError struct{ kind, cause error }

func (k kindError) Error() string   { return k.cause.Error() }
func (k kindError) Unwrap() []error { return []error{k.kind, k.cause} }

// hintSocket is the hint for an engine that is not where we look.
const hintSocket = "is dockerd running? set containers.engine-socket"

// timeout returns the bound of a request: Timeout plus extra.
func (e *Engine) timeout(extra time.Duration) time.Duration {
	t := e.Timeout
	if t <= 0 {
		t = DefaultTimeout
	}
	return t + extra
}

// response is an answer of the engine, its body read in full.
type response struct {
	status int
	body   []byte
}

// message returns the engine's error message in r's body ({"message": …}),
// or the status text.
func (r response) message() string {
	var m struct {
		Message string `json:"message"`
	}
	if json.Unmarshal(r.body, &m) == nil && m.Message != "" {
		return m.Message
	}
	return http.StatusText(r.status)
}

// roundTrip sends method path?query (path unversioned, with its leading
// slash) and reads the answer's body up to limit bytes. extra lengthens
// the request's time bound (Stop's grace).
func (e *Engine) roundTrip(ctx context.Context, op, method, path string, query url.Values, limit int64, extra time.Duration) (response, error) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, e.timeout(extra))
	defer cancel()
	u := url.URL{Scheme: "http", Host: "docker", Path: path, RawQuery: query.Encode()}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), nil)
	if err != nil {
		return response{}, &Error{Socket: e.socket, Op: op, Err: err}
	}
	resp, err := e.client.Do(req)
	if err != nil {
		return response{}, e.transportError(ctx, op, time.Since(start), err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return response{}, e.transportError(ctx, op, time.Since(start), err)
	}
	if int64(len(body)) > limit {
		return response{}, &Error{Socket: e.socket, Op: op, Status: resp.StatusCode,
			Err: fmt.Errorf("answer longer than %d bytes", limit)}
	}
	return response{status: resp.StatusCode, body: body}, nil
}

// transportError describes a request that got no answer: a connection
// error with what to do about it, or a timeout.
func (e *Engine) transportError(ctx context.Context, op string, waited time.Duration, err error) error {
	if ctx.Err() == context.DeadlineExceeded {
		return &Error{Socket: e.socket, Op: op,
			Err:  kindError{ErrUnreachable, fmt.Errorf("no answer within %v", waited.Round(time.Millisecond))},
			Hint: "is dockerd hung?"}
	}
	if ctx.Err() != nil {
		return &Error{Socket: e.socket, Op: op, Err: ctx.Err()}
	}
	var sys *os.SyscallError
	if errors.As(err, &sys) && sys.Syscall == "connect" {
		hint := hintSocket
		if errors.Is(sys.Err, syscall.EACCES) || errors.Is(sys.Err, syscall.EPERM) {
			hint = "run as root, or as a member of the socket's group"
		}
		return &Error{Socket: e.socket, Err: kindError{ErrUnreachable, sys}, Hint: hint}
	}
	var op2 *net.OpError
	if errors.As(err, &op2) && op2.Op == "dial" {
		return &Error{Socket: e.socket, Err: kindError{ErrUnreachable, op2.Err}, Hint: hintSocket}
	}
	// An answer that is not HTTP: something else listens there.
	return &Error{Socket: e.socket, Op: op, Err: err, Hint: "is this a Docker engine's socket? set containers.engine-socket"}
}

// call sends a request of the negotiated API version: method
// /v<version>path?query. An engine that refuses the version (it was
// upgraded or downgraded since the negotiation) is negotiated with again,
// once.
func (e *Engine) call(ctx context.Context, op, method, path string, query url.Values, limit int64, extra time.Duration) (response, error) {
	for attempt := 0; ; attempt++ {
		api, err := e.version(ctx)
		if err != nil {
			return response{}, err
		}
		r, err := e.roundTrip(ctx, op, method, "/v"+api+path, query, limit, extra)
		if err != nil {
			return r, err
		}
		if attempt == 0 && r.status == http.StatusBadRequest && refusesVersion(r.message()) {
			e.mu.Lock()
			if e.api == api {
				e.api = ""
			}
			e.mu.Unlock()
			continue
		}
		return r, nil
	}
}

// refusesVersion reports whether an engine's error message refuses the
// API version of the request ("client version 1.41 is too old. Minimum
// supported API version is 1.44", "client version 1.45 is too new.
// Maximum supported API version is 1.41").
func refusesVersion(msg string) bool {
	return strings.Contains(msg, "client version") && strings.Contains(msg, "API version")
}

// apiError describes an answer with an unexpected status.
func (e *Engine) apiError(op string, r response) error {
	return &Error{Socket: e.socket, Op: op, Status: r.status,
		Err: fmt.Errorf("%d %s: %s", r.status, http.StatusText(r.status), r.message())}
}

// notFound describes a 404 of a container.
func (e *Engine) notFound(op string, r response) error {
	return &Error{Socket: e.socket, Op: op, Status: r.status, Err: ErrNotFound}
}

// short is the 12-character form of a container ID the docker CLI shows.
func short(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// checkID refuses an ID that may not go into a URL path.
func (e *Engine) checkID(op, id string) error {
	if !ValidID(id) {
		return &Error{Socket: e.socket, Op: op, Err: fmt.Errorf("%q is not a full container ID (64 lowercase hex digits)", truncate(id, 80))}
	}
	return nil
}

// truncate cuts s to at most n bytes, for messages about untrusted input.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
