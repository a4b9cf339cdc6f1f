package api

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"syscall"
	"time"

	"github.com/mcptrace/mcptrace/sessions"
)

// Client talks to a running agent over its unix socket (on Windows, its
// named pipe).
type Client struct {
	Socket string
	// Raw asks for unredacted argv in process answers (?raw=1). The agent
	// grants it to root only; anyone else gets redacted argv anyway.
	Raw  bool
	http *http.Client
}

// NewClient returns a client for the agent listening on socket: a unix
// socket's path, or on Windows a named pipe's (\\.\pipe\NAME).
func NewClient(socket string) *Client {
	return &Client{
		Socket: socket,
		http: &http.Client{
			Timeout: 30 * time.Second,
			Transport: &http.Transport{
				DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
					return dial(ctx, socket)
				},
			},
		},
	}
}

// ErrAgentUnreachable: no agent answers on the socket. Every
// *UnreachableError is one.
var ErrAgentUnreachable = errors.New("mcptrace agent is not reachable")

// UnreachableError says that no agent answers on Socket, why, and the
// one command that fixes it for the way the agent was installed: its
// Error is the message for people, the connection's error only behind
// Unwrap.
type UnreachableError struct {
	Socket string
	Why    string
	// Denied: the socket is there, and its mode keeps the caller out
	// (api.socket-mode).
	Denied bool
	// Install is how the agent was installed (ReadInstall), for the
	// command that starts it.
	Install Install
	// Command is the command that was refused (mcptrace status), for
	// the fix of Denied: the same as root. The CLI sets it.
	Command string
	Err     error
}

func (e *UnreachableError) Error() string {
	if e.Denied {
		return fmt.Sprintf("cannot reach the mcptrace agent at %s (%s; api.socket-mode may let only root in): run it as root: sudo %s", e.Socket, e.Why, cmp.Or(e.Command, "mcptrace …"))
	}
	msg := fmt.Sprintf("no mcptrace agent is running at %s (%s): start it with: %s", e.Socket, e.Why, e.Install.Start())
	if l := e.Install.Logs(); l != "" {
		msg += fmt.Sprintf(" (why it stopped: %s)", l)
	}
	if e.Socket != DefaultSocket {
		msg += fmt.Sprintf("; or point --api.socket at its socket (the default is %s)", DefaultSocket)
	}
	return msg
}

func (e *UnreachableError) Unwrap() error { return e.Err }

// Is makes every UnreachableError an ErrAgentUnreachable.
func (e *UnreachableError) Is(target error) bool { return target == ErrAgentUnreachable }

// StatusError is a refusal or failure the agent answered with.
type StatusError struct {
	Code    int
	Message string
}

func (e *StatusError) Error() string { return e.Message }

func (c *Client) get(ctx context.Context, path string, out any) error {
	if c.Raw {
		path += "?raw=1"
	}
	return c.do(ctx, http.MethodGet, path, nil, out)
}

func (c *Client) do(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		data, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://mcptrace"+path, body)
	if err != nil {
		return err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return c.requestErr(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return statusErr(resp)
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("decode answer to %s: %w", path, err)
	}
	return nil
}

// requestErr says why a request got no answer.
func (c *Client) requestErr(err error) error {
	// A missing pipe is fs.ErrNotExist on Windows, not ENOENT.
	switch {
	case errors.Is(err, syscall.ENOENT) || errors.Is(err, fs.ErrNotExist):
		return &UnreachableError{Socket: c.Socket, Why: "there is no socket there", Install: ReadInstall(c.Socket), Err: err}
	case errors.Is(err, syscall.ECONNREFUSED):
		return &UnreachableError{Socket: c.Socket, Why: "nothing listens there: the agent stopped or crashed", Install: ReadInstall(c.Socket), Err: err}
	case errors.Is(err, syscall.EACCES) || errors.Is(err, fs.ErrPermission):
		return &UnreachableError{Socket: c.Socket, Why: "permission denied on the socket or its directory", Denied: true, Err: err}
	}
	return fmt.Errorf("query agent at %s: %w", c.Socket, err)
}

// statusErr is the refusal or failure an answer other than 200 carries.
func statusErr(resp *http.Response) error {
	var e Error
	if json.NewDecoder(resp.Body).Decode(&e) != nil || e.Error == "" {
		e.Error = resp.Status
	}
	return &StatusError{Code: resp.StatusCode, Message: e.Error}
}

// Processes returns every process the caller may see.
func (c *Client) Processes(ctx context.Context) (ProcessList, error) {
	var out ProcessList
	return out, c.get(ctx, "/v1/processes", &out)
}

// Tree returns the process with pid and everything it created, at any depth.
func (c *Client) Tree(ctx context.Context, pid uint32) (ProcessList, error) {
	var out ProcessList
	return out, c.get(ctx, fmt.Sprintf("/v1/tree/%d", pid), &out)
}

// Ancestors returns the creator chain from pid up to the top.
func (c *Client) Ancestors(ctx context.Context, pid uint32) (ProcessList, error) {
	var out ProcessList
	return out, c.get(ctx, fmt.Sprintf("/v1/ancestors/%d", pid), &out)
}

// Status returns the agent's counters.
func (c *Client) Status(ctx context.Context) (Status, error) {
	var out Status
	return out, c.get(ctx, "/v1/status", &out)
}

// Sessions lists the sessions the caller may see.
func (c *Client) Sessions(ctx context.Context) ([]SessionInfo, error) {
	var out []SessionInfo
	return out, c.get(ctx, "/v1/sessions", &out)
}

// Session returns one session with its members and kill records: the
// caller's own session id, or owner's when owner is not nil (session IDs
// are scoped by owner; root naming an ID several owners use must say
// whose).
func (c *Client) Session(ctx context.Context, id string, owner *uint32) (SessionDetail, error) {
	var out SessionDetail
	return out, c.get(ctx, sessionPath(id, "", owner), &out)
}

// SessionAt returns session id as the history recorded it, the one with
// that ID at time at (owner's, when not nil).
func (c *Client) SessionAt(ctx context.Context, id string, owner *uint32, at time.Time) (SessionDetail, error) {
	var out SessionDetail
	p := sessionPath(id, "", owner)
	sep := "?"
	if owner != nil {
		sep = "&"
	}
	return out, c.get(ctx, p+sep+"at="+url.QueryEscape(at.UTC().Format(time.RFC3339Nano)), &out)
}

// TreeAt returns pid and what it created as the history has them at
// time at.
func (c *Client) TreeAt(ctx context.Context, pid uint32, at time.Time) (ProcessList, error) {
	var out ProcessList
	return out, c.get(ctx, "/v1/tree/"+strconv.FormatUint(uint64(pid), 10)+"?at="+url.QueryEscape(at.UTC().Format(time.RFC3339Nano)), &out)
}

// HistoryQuery selects sessions of the history (GET /v1/history).
type HistoryQuery struct {
	From, To time.Time
	ID       string
	Owner    *uint32
	Limit    int
}

// History lists the sessions of the history the caller may see, newest
// first.
func (c *Client) History(ctx context.Context, q HistoryQuery) (HistoryList, error) {
	v := url.Values{}
	if !q.From.IsZero() {
		v.Set("from", q.From.UTC().Format(time.RFC3339Nano))
	}
	if !q.To.IsZero() {
		v.Set("to", q.To.UTC().Format(time.RFC3339Nano))
	}
	if q.ID != "" {
		v.Set("id", q.ID)
	}
	if q.Owner != nil {
		v.Set("owner", strconv.FormatUint(uint64(*q.Owner), 10))
	}
	if q.Limit != 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	var out HistoryList
	p := "/v1/history"
	if len(v) > 0 {
		p += "?" + v.Encode()
	}
	return out, c.get(ctx, p, &out)
}

// sessionPath is the API path of session id (owner's, when not nil),
// then tail.
func sessionPath(id, tail string, owner *uint32) string {
	p := "/v1/sessions/" + url.PathEscape(id) + tail
	if owner != nil {
		p += "?owner=" + strconv.FormatUint(uint64(*owner), 10)
	}
	return p
}

// Begin declares the live process pid the root of a session.
func (c *Client) Begin(ctx context.Context, pid uint32, id string) (sessions.Session, error) {
	var out sessions.Session
	return out, c.do(ctx, http.MethodPost, "/v1/sessions", BeginRequest{PID: pid, ID: id}, &out)
}

// EndSession ends a session whole, its root included (owner as for
// Session).
func (c *Client) EndSession(ctx context.Context, id string, owner *uint32) (MarkResult, error) {
	var out MarkResult
	return out, c.do(ctx, http.MethodPost, sessionPath(id, "/end", owner), struct{}{}, &out)
}

// MarkDestroy sends a destroy marker for the session named, or with "" for
// the session whose root created the calling process.
func (c *Client) MarkDestroy(ctx context.Context, session string) (MarkResult, error) {
	var out MarkResult
	return out, c.do(ctx, http.MethodPost, "/v1/mark", MarkRequest{Session: session}, &out)
}
