package agent

import (
	"os"
	"strings"
	"time"

	"github.com/mcptrace/mcptrace/api"
	"github.com/mcptrace/mcptrace/enforcer"
	"github.com/mcptrace/mcptrace/events"
	"github.com/mcptrace/mcptrace/lineage"
	"github.com/mcptrace/mcptrace/orphans"
	"github.com/mcptrace/mcptrace/sessions"
)

// The agent's event stream (package events): what it publishes, from
// where. Member execs are built only while someone follows the stream or
// the export file is on (Hub.On, one atomic load on the consumer's path);
// the other kinds are rare and always published, so `mcptrace events`
// shows the last ones.

// eventStream is the hub, the export file and whether events are
// published yet (not while the saved state replays what was published
// before a restart).
type eventStream struct {
	hub    *events.Hub
	export *events.Export
	// off says why there is no export file ("" when there is one, or
	// none was asked for).
	off string
	// live is set once the state is loaded; a.mu guards it.
	live bool
}

// nodeName is the node events name: Options.Node, else the host name.
func (o *Options) nodeName() string {
	if o.Node != "" {
		return o.Node
	}
	n, _ := os.Hostname()
	return n
}

// openEvents starts publishing, once the saved state is loaded: the
// export file when one is configured (an export that cannot be opened
// leaves the agent running without it, said once), and the tracker's
// session begins.
func (a *Agent) openEvents() {
	if path := a.opts.ExportFile; path != "" {
		x, err := events.OpenExport(a.stream.hub, events.ExportOptions{Path: path, MaxBytes: a.opts.ExportMaxBytes,
			MaxFiles: a.opts.ExportMaxFiles, Logger: a.opts.Logger.With("component", "export")})
		if err != nil {
			a.stream.off = err.Error()
			a.log.Error("no event export: its file cannot be opened; fix export.file or set it empty", "export_file", path, "err", err)
		} else {
			a.stream.export = x
			a.log.Info("exporting events", "file", path, "max_bytes", a.opts.ExportMaxBytes, "max_files", a.opts.ExportMaxFiles)
		}
	}
	a.mu.Lock()
	a.stream.live = true
	a.mu.Unlock()
	a.tracker.OnBegin(a.emitBegin)
}

// closeEvents writes what the export holds and closes it.
func (a *Agent) closeEvents() {
	if a.stream.export != nil {
		if err := a.stream.export.Close(); err != nil {
			a.log.Error("export file: closing", "err", err)
		}
	}
}

// eventsStatus is the stream as status shows it.
func (a *Agent) eventsStatus() api.EventsStatus {
	st := api.EventsStatus{Stream: a.stream.hub.Stats(), ExportOff: a.stream.off}
	if a.stream.export != nil {
		x := a.stream.export.Stats()
		st.Export = &x
	}
	return st
}

// sessionEvent is an event about session s.
func (a *Agent) sessionEvent(kind events.Kind, s sessions.Session, at uint64) *events.Event {
	e := &events.Event{Kind: kind, Session: s.ID, Owner: events.U(s.Owner), HostKind: HostKind(s.Origin), Generation: s.Generation}
	if at != 0 {
		e.Time = a.stream.hub.Wall(at)
	}
	return e
}

// emitBegin publishes a session's begin; the tracker's lock is held.
func (a *Agent) emitBegin(s sessions.Session) {
	e := a.sessionEvent(events.SessionBegin, s, s.Began)
	e.PID, e.StartNS, e.UID = s.Root.PID, s.Root.Start, events.U(s.Owner)
	if p, ok := a.graph.Get(s.Root); ok {
		e.Comm = p.Comm
		// The image the root runs, when it ran under the owner's uid: a
		// user is shown only images executed under its own uid.
		if im := p.Current(); im.UID == s.Owner {
			e.File, e.Argv = im.Filename, im.Argv
		}
	}
	a.stream.hub.Publish(e)
}

// emitActions publishes the ends and markers of acts; a.mu is held.
func (a *Agent) emitActions(acts []sessions.Action) {
	if !a.stream.live {
		return
	}
	for _, act := range acts {
		s := act.End
		if act.Generation != 0 {
			e := a.sessionEvent(events.Marker, s, act.Cutoff)
			e.Generation, e.Detail = act.Generation, act.Reason
			if !act.Sender.IsZero() {
				e.PID, e.StartNS = act.Sender.PID, act.Sender.Start
				if n := len(s.Markers); n > 0 && s.Markers[n-1].Sender == act.Sender {
					e.UID = events.U(s.Markers[n-1].SenderUID)
				}
			}
			a.stream.hub.Publish(e)
			continue
		}
		e := a.sessionEvent(events.SessionEnd, s, s.EndedAt)
		e.PID, e.StartNS, e.UID = s.Root.PID, s.Root.Start, events.U(s.Owner)
		e.Reason, e.Detail = s.EndReason, act.Reason
		a.stream.hub.Publish(e)
	}
}

// emitExec publishes the exec of a session member, when anyone follows;
// a.mu is held.
func (a *Agent) emitExec(ev lineage.Event) {
	s, ok := a.tracker.SessionContaining(ev.Proc)
	if !ok {
		return
	}
	e := a.sessionEvent(events.Exec, s, ev.Time)
	e.PID, e.StartNS, e.UID = ev.Proc.PID, ev.Proc.Start, events.U(ev.UID)
	e.Comm, e.File, e.Argv, e.ArgvTruncated = ev.Comm, ev.Filename, ev.Argv, ev.ArgvTruncated
	a.stream.hub.Publish(e)
}

// emitRecords publishes the enforcer's records of an ending of session s
// (kills, container stops) or of orphans.
func (a *Agent) emitRecords(s *sessions.Session, recs []enforcer.KillRecord) {
	for _, r := range recs {
		e := &events.Event{Kind: events.Kill, Time: r.At, PID: r.Process.PID, StartNS: r.Process.Start, UID: events.U(r.UID),
			Comm: r.Comm, Argv: r.Argv, Signal: r.Signal, Result: r.Result,
			LatencyMS: float64(r.Latency) / float64(time.Millisecond)}
		switch {
		case s == nil:
			e.Kind = events.OrphanEnded
		default:
			e.Session, e.Owner, e.HostKind, e.Generation = s.ID, events.U(s.Owner), HostKind(s.Origin), r.Generation
		}
		if r.Container != "" {
			if s != nil {
				e.Kind = events.ContainerStop
			}
			e.Container = r.Container
			if len(r.Argv) > 0 {
				e.Image = r.Argv[0]
			}
			e.Argv = nil
		}
		a.stream.hub.Publish(e)
	}
}

// emitContainerStart publishes a container start the agent verified: the
// session whose member's client started it (its innermost active one),
// the client, the container and its image.
func (a *Agent) emitContainerStart(c sessions.Container, id, image string) {
	e := &events.Event{Kind: events.ContainerStart, Time: a.stream.hub.Wall(c.At), Owner: events.U(c.Owner),
		PID: c.Client.PID, StartNS: c.Client.Start, UID: events.U(c.ClientUID), Container: id, Image: image}
	root := c.Top
	if len(c.Below) > 0 {
		root = c.Below[0].Root
	}
	if s, ok := a.tracker.SessionContaining(root); ok {
		e.Session, e.Owner, e.HostKind, e.Generation = s.ID, events.U(s.Owner), HostKind(s.Origin), s.Generation
	}
	a.stream.hub.Publish(e)
}

// emitOrphans publishes the orphans a look found that the last look did
// not; o.mu is held.
func (a *Agent) emitOrphans(before, now []orphans.Orphan) {
	seen := make(map[lineage.ID]bool, len(before))
	for _, x := range before {
		seen[x.Server] = true
	}
	for _, x := range now {
		if seen[x.Server] {
			continue
		}
		e := &events.Event{Kind: events.OrphanFound, HostKind: x.HostKind, PID: x.Server.PID, StartNS: x.Server.Start,
			UID: events.U(x.UID), Argv: x.Argv, Server: x.Name, Confidence: string(x.Confidence), Container: x.Container,
			Reason: string(x.Kind)}
		e.Evidence = strings.Join(x.Evidence, "; ")
		a.stream.hub.Publish(e)
	}
}

// emitLosses publishes what the kernel lost since the last check: grew
// holds kind, count pairs.
func (a *Agent) emitLosses(grew []any) {
	for i := 0; i+1 < len(grew); i += 2 {
		what, _ := grew[i].(string)
		n, _ := grew[i+1].(uint64)
		a.stream.hub.Publish(&events.Event{Kind: events.Loss, What: what, Count: n, Detail: "the kernel could not deliver them; the graph is repaired from " + processSource})
	}
}
