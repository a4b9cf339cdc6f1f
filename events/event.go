package events

import (
	"slices"
	"time"

	"github.com/mcptrace/mcptrace/redact"
)

// Kind says what an Event reports.
type Kind string

// The kinds of events, as the "kind" field writes them.
const (
	// SessionBegin: a session began; the process is its root.
	SessionBegin Kind = "session.begin"
	// SessionEnd: a session ended (Reason); the process is its root.
	SessionEnd Kind = "session.end"
	// Marker: a destroy marker ended a generation of a session whose
	// root it spared (Generation: the one it ended); the process is the
	// marker's sender.
	Marker Kind = "marker"
	// Exec: a session member executed a program (File, Argv redacted).
	Exec Kind = "exec"
	// Kill: the enforcer's result for one member of an ending (Signal,
	// Result; Argv redacted).
	Kill Kind = "kill"
	// ContainerStart: a container a session member's client started, as
	// the agent verified with the engine (Container, Image); the process
	// is the client.
	ContainerStart Kind = "container.start"
	// ContainerStop: the enforcer's result for a container of an ending.
	ContainerStop Kind = "container.stop"
	// OrphanFound: a leaked MCP server no session owns was confirmed
	// (Server, Confidence, Evidence); the process is the server.
	OrphanFound Kind = "orphan.found"
	// OrphanEnded: `mcptrace orphans --end`'s result for one process.
	OrphanEnded Kind = "orphan.ended"
	// Loss: the kernel could not deliver Count events of kind What; the
	// agent repairs its graph from /proc.
	Loss Kind = "loss"
	// Dropped: this reader missed Count events because it read more
	// slowly than they came (its queue was full); they were not lost for
	// anyone else.
	Dropped Kind = "dropped"
)

// Event is one thing that happened, as one JSON object. Times are wall
// clock; StartNS is the process's start on the boot clock (CLOCK_BOOTTIME
// ns, as the API's process identities), which with PID names the process
// for good. Pointers are fields that may be 0 yet present.
type Event struct {
	Time time.Time `json:"time"`
	Node string    `json:"node"`
	Kind Kind      `json:"kind"`

	// The session, its owner and its host kind (the host rule's name, or
	// run, exec, api).
	Session    string  `json:"session,omitempty"`
	Owner      *uint32 `json:"owner_uid,omitempty"`
	HostKind   string  `json:"host_kind,omitempty"`
	Generation uint32  `json:"generation,omitempty"`

	// The process the event is about.
	PID     uint32  `json:"pid,omitempty"`
	StartNS uint64  `json:"start_ns,omitempty"`
	UID     *uint32 `json:"uid,omitempty"`
	Comm    string  `json:"comm,omitempty"`
	File    string  `json:"file,omitempty"`
	// Argv is the command line. Published as the kernel reported it;
	// every event a Follower returns has it redacted (redact.Argv).
	Argv          []string `json:"argv,omitempty"`
	ArgvTruncated bool     `json:"argv_truncated,omitempty"`

	Container string `json:"container,omitempty"`
	Image     string `json:"image,omitempty"`

	// Reason says why a session ended or what a loss was; Detail in
	// words.
	Reason string `json:"reason,omitempty"`
	Detail string `json:"detail,omitempty"`
	// Signal and Result are the enforcer's (enforcer.KillRecord).
	Signal    string  `json:"signal,omitempty"`
	Result    string  `json:"result,omitempty"`
	LatencyMS float64 `json:"latency_ms,omitempty"`

	Server     string `json:"server,omitempty"`
	Confidence string `json:"confidence,omitempty"`
	Evidence   string `json:"evidence,omitempty"`

	// What and Count: a loss's event kind and number, or how many events
	// a Dropped stands for.
	What  string `json:"what,omitempty"`
	Count uint64 `json:"count,omitempty"`
}

// U returns a pointer to uid, for Event.Owner and Event.UID.
func U(uid uint32) *uint32 { return &uid }

// redacted returns a copy of e whose argv is redacted.
func (e *Event) redacted() Event {
	out := *e
	if len(e.Argv) > 0 {
		out.Argv = redact.Argv(slices.Clone(e.Argv))
	}
	return out
}

// audience is the uid whose share of the backlog e counts against: the
// session's owner, else the process's uid; node-wide events (losses)
// count against a share of their own.
func (e *Event) audience() uint32 {
	switch {
	case e.Owner != nil:
		return *e.Owner
	case e.UID != nil:
		return *e.UID
	}
	return nodeWide
}

// nodeWide is the backlog share of events no uid owns (losses): no uid
// can have it (the kernel's uids end below 2^32-1, which is "no uid").
const nodeWide = ^uint32(0)
