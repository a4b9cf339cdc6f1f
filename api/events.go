package api

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/mcptrace/mcptrace/enforcer"
	"github.com/mcptrace/mcptrace/events"
	"github.com/mcptrace/mcptrace/lineage"
	"github.com/mcptrace/mcptrace/sessions"
)

// GET /v1/events: the agent's event stream (package events), one JSON
// object a line (application/x-ndjson), narrowed to the caller as every
// other answer is. Without ?follow=1 it answers with the events the
// agent kept (not member execs); with it, those and then every event as
// it happens, until the caller hangs up, its process is gone, or the
// agent stops.

// EventsStatus is the event stream's part of the agent's status.
type EventsStatus struct {
	Stream events.Stats `json:"stream"`
	// Export is the export file's counters; nil when there is none.
	// ExportOff says why there is none when one was configured.
	Export    *events.ExportStats `json:"export,omitempty"`
	ExportOff string              `json:"export_off,omitempty"`
}

// forCaller is what a caller other than root sees of it: whether there
// is an export, not what it or the stream counted (they move with other
// users' events).
func (st EventsStatus) forCaller(c Caller) EventsStatus {
	if c.Root() {
		return st
	}
	out := EventsStatus{ExportOff: st.ExportOff}
	if st.Export != nil {
		out.Export = &events.ExportStats{File: st.Export.File}
	}
	return out
}

// Bounds of a follower's connection.
const (
	// eventsWriteTimeout: a follower that does not take a write within
	// it is hung up on (its queue was dropping meanwhile, never the
	// agent's path).
	eventsWriteTimeout = 10 * time.Second
	// eventsCheckEvery is how often a follower's process is checked
	// while no event comes: a connection whose process is gone acts for
	// nobody, a stream included.
	eventsCheckEvery = time.Second
)

// eventsState lets the streams end when the server shuts down.
type eventsState struct {
	once sync.Once
	stop chan struct{}
}

func (s *Server) eventsStop() <-chan struct{} {
	s.events.once.Do(func() {
		s.events.stop = make(chan struct{})
		if s.http != nil {
			s.http.RegisterOnShutdown(func() { close(s.events.stop) })
		}
	})
	return s.events.stop
}

// eventVisible says whether c may see e: root sees every event; anyone
// else, losses (node-wide, as its status shows them), the session events
// of sessions it owns (sessionVisible), and within them the execs, kills
// and containers of its own uid (processVisible, killVisible: a member
// of another uid in its session is not its to see), and the orphans of
// its own uid (as `mcptrace orphans` lists them). It runs under the
// hub's lock: cheap, and never blocks.
func eventVisible(c Caller, e *events.Event) bool {
	if c.Root() {
		return true
	}
	var uid uint32
	if e.UID != nil {
		uid = *e.UID
	}
	owned := e.Owner != nil && sessionVisible(c, sessions.Session{Owner: *e.Owner})
	mine := e.UID != nil && processVisible(c, lineage.Process{UID: uid})
	switch e.Kind {
	case events.Loss:
		return true
	case events.SessionBegin, events.SessionEnd, events.Marker:
		return owned
	case events.OrphanFound, events.OrphanEnded:
		return mine
	case events.Kill, events.ContainerStop:
		return owned && e.UID != nil && killVisible(c, enforcer.KillRecord{UID: uid})
	}
	return owned && mine
}

// presentEvent makes a visible event fit for c, in place: a marker's
// sender only to root and to the sender's own uid (markersFor).
func presentEvent(c Caller, e *events.Event) {
	if c.Root() || e.Kind != events.Marker || e.UID == nil {
		return
	}
	m := markersFor(c, []sessions.Marker{{Sender: lineage.ID{PID: e.PID, Start: e.StartNS}, SenderUID: *e.UID}})[0]
	if m.Sender.IsZero() {
		e.PID, e.StartNS, e.UID = 0, 0, nil
	}
}

func (s *Server) handleEvents(w http.ResponseWriter, r *http.Request) {
	c, ok := s.caller(w, r)
	if !ok {
		return
	}
	if s.Events == nil {
		writeError(w, http.StatusNotFound, "this agent keeps no event stream")
		return
	}
	accept := func(e *events.Event) bool { return eventVisible(c, e) }
	if r.URL.Query().Get("follow") != "1" {
		w.Header().Set("Content-Type", "application/x-ndjson")
		w.WriteHeader(http.StatusOK)
		enc := json.NewEncoder(w)
		for _, e := range s.Events.Backlog(accept) {
			presentEvent(c, &e)
			if enc.Encode(e) != nil {
				return
			}
		}
		return
	}
	f, err := s.Events.Follow(c.UID, accept, true)
	if errors.Is(err, events.ErrTooManyFollowers) {
		s.note(slog.LevelWarn, c.UID, "event stream refused: too many followers", "uid", c.UID)
		writeError(w, http.StatusTooManyRequests, err.Error()+"; close another `mcptrace events --follow` first")
		return
	}
	if err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	defer f.Close()
	// The server's deadlines are for requests that end: a stream's read
	// side is done, its writes are bounded one at a time below.
	rc := http.NewResponseController(w)
	rc.SetReadDeadline(time.Time{})
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	flush := func() bool {
		rc.SetWriteDeadline(time.Now().Add(eventsWriteTimeout))
		return bw.Flush() == nil && rc.Flush() == nil
	}
	if !flush() {
		return
	}
	stop := s.eventsStop()
	for {
		ctx, cancel := context.WithTimeout(r.Context(), eventsCheckEvery)
		e, ok := f.Next(ctx)
		cancel()
		select {
		case <-stop:
			return
		case <-r.Context().Done():
			return
		default:
		}
		if !ok {
			// Nothing for a second: is the caller still who it was?
			if c.peer != nil && c.peer.verify() != nil {
				return
			}
			continue
		}
		for ok {
			presentEvent(c, &e)
			if enc.Encode(e) != nil {
				return
			}
			e, ok = f.Pending()
		}
		if !flush() {
			return
		}
	}
}

// Events reads the agent's events the caller may see: the kept ones,
// then, with follow, every new one until ctx ends or the agent hangs up.
// fn is called for each; an error from it stops the reading and is
// returned.
func (c *Client) Events(ctx context.Context, follow bool, fn func(events.Event) error) error {
	path := "/v1/events"
	if follow {
		path += "?follow=1"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://mcptrace"+path, nil)
	if err != nil {
		return err
	}
	// A stream has no end to wait for: no overall timeout, only ctx.
	hc := &http.Client{Transport: c.http.Transport}
	resp, err := hc.Do(req)
	if err != nil {
		return c.requestErr(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return statusErr(resp)
	}
	dec := json.NewDecoder(resp.Body)
	for {
		var e events.Event
		if err := dec.Decode(&e); err != nil {
			if ctx.Err() != nil || errors.Is(err, context.Canceled) {
				return nil
			}
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				if follow {
					return fmt.Errorf("the agent at %s ended the event stream (it stopped, or this process is no longer who opened the connection)", c.Socket)
				}
				return nil
			}
			return fmt.Errorf("read the event stream: %w", err)
		}
		if err := fn(e); err != nil {
			return err
		}
	}
}
