package containers

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Stop stops the container with full ID id the engine's way (POST
// /containers/{id}/stop): its stop signal (SIGTERM unless the image says
// otherwise), then SIGKILL after grace, rounded up to whole seconds; 0
// means SIGKILL at once. It returns when the container has stopped, or
// the request's bound (grace plus Engine.Timeout) passed.
//
// Stop returns nil when the container stopped, and also when it was not
// running (304). It returns an error wrapping ErrNotFound when there is
// no such container, e.g. a --rm container already removed: callers that
// want it ended treat that as success too.
func (e *Engine) Stop(ctx context.Context, id string, grace time.Duration) error {
	op := "stop " + short(id)
	if err := e.checkID(op, id); err != nil {
		return err
	}
	if grace < 0 {
		grace = 0
	}
	secs := int64((grace + time.Second - 1) / time.Second)
	q := url.Values{"t": {strconv.FormatInt(secs, 10)}}
	r, err := e.call(ctx, op, http.MethodPost, "/containers/"+id+"/stop", q, maxBody, time.Duration(secs)*time.Second)
	if err != nil {
		return err
	}
	switch r.status {
	case http.StatusNoContent, http.StatusNotModified:
		return nil
	case http.StatusNotFound:
		return e.notFound(op, r)
	default:
		return e.apiError(op, r)
	}
}

// Kill sends signal (a name such as "KILL" or "SIGTERM", or a number) to
// the container's init process (POST /containers/{id}/kill).
//
// Like Stop, Kill returns nil when the container is not running (409 "is
// not running") and an error wrapping ErrNotFound when there is no such
// container.
func (e *Engine) Kill(ctx context.Context, id, signal string) error {
	op := "kill " + short(id)
	if err := e.checkID(op, id); err != nil {
		return err
	}
	if !validSignal(signal) {
		return &Error{Socket: e.socket, Op: op, Err: fmt.Errorf("%q is not a signal name or number", truncate(signal, 40))}
	}
	r, err := e.call(ctx, op, http.MethodPost, "/containers/"+id+"/kill", url.Values{"signal": {signal}}, maxBody, 0)
	if err != nil {
		return err
	}
	switch r.status {
	case http.StatusNoContent:
		return nil
	case http.StatusConflict:
		if strings.Contains(r.message(), "is not running") {
			return nil
		}
		return e.apiError(op, r)
	case http.StatusNotFound:
		return e.notFound(op, r)
	default:
		return e.apiError(op, r)
	}
}

// validSignal accepts what the engine parses as a signal: a name of
// capitals and digits with an optional SIG prefix (RTMIN+3 too), or a
// number.
func validSignal(s string) bool {
	if s == "" || len(s) > 16 {
		return false
	}
	for _, c := range s {
		if !('A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '+' || c == '-') {
			return false
		}
	}
	return true
}
