package lineage

import "fmt"

// ID identifies a process for its whole life. A recycled PID is a new ID,
// never the same node.
//
// Start is the thread-group leader's task->start_boottime: nanoseconds since
// boot on CLOCK_BOOTTIME. Identities seeded from /proc only know the start
// time to the precision of a clock tick (see Process.CoarseStart); the graph
// matches such a node to the kernel's exact value by tick.
type ID struct {
	PID   uint32 `json:"pid"`
	Start uint64 `json:"start_ns"`
}

// IsZero reports whether the identity is unknown.
func (id ID) IsZero() bool { return id.PID == 0 && id.Start == 0 }

func (id ID) String() string { return fmt.Sprintf("%d@%d", id.PID, id.Start) }

// EventKind says what an Event reports.
type EventKind uint8

const (
	// KindFork: a new process (not a thread) was created by Creator.
	KindFork EventKind = iota + 1
	// KindExec: the process replaced its image.
	KindExec
	// KindExit: the last thread of the process left.
	KindExit
	// KindRequest: a container client sent an engine API request
	// (Event.Request). Not a change of the graph: Graph.Apply leaves it,
	// sessions.Tracker.Observe attributes containers from it.
	KindRequest
)

func (k EventKind) String() string {
	switch k {
	case KindFork:
		return "fork"
	case KindExec:
		return "exec"
	case KindExit:
		return "exit"
	case KindRequest:
		return "request"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Event is one platform-neutral process event as a sensor decoded it.
type Event struct {
	Kind EventKind
	// Time is when the kernel saw the event, ns since boot (CLOCK_BOOTTIME).
	Time uint64
	// Proc is the process the event is about; for KindFork, the new child.
	Proc ID
	// Creator is the process that forked Proc (KindFork only).
	Creator ID
	// Parent is Proc's current parent (task->real_parent) at event time.
	// Under CLONE_PARENT it differs from Creator. Zero when unknown.
	Parent   ID
	UID      uint32
	CgroupID uint64
	Comm     string

	// KindExec only: the executed file and the argv captured in the kernel
	// at exec, bounded; ArgvTruncated says the kernel cut it.
	Filename      string
	Argv          []string
	ArgvTruncated bool
	// Stdio is what fd 0 and fd 1 were at the exec; zero when the
	// sensor does not say.
	Stdio Stdio

	// KindExit only: exit status and terminating signal (0 when none).
	ExitCode int
	Signal   int

	// KindRequest only: the first bytes (at most 128) of the request the
	// process sent to a container engine, as the kernel read them.
	Request string
	// Groups, KindRequest only: the sender's effective gid and
	// supplementary groups as the kernel held them when the agent took the
	// event (/proc/PID/status, the process checked by its start time);
	// nil when they could not be read (the sender was gone). Who may use
	// the engine is decided on them (a docker group from LDAP or given at
	// exec is in no /etc/group).
	Groups []uint32
}

// Snapshot is what /proc says about one live process at ReadAt. A graph is
// seeded and repaired from snapshots.
type Snapshot struct {
	// ID.Start has clock-tick precision (see Process.CoarseStart).
	ID       ID
	PPID     uint32
	UID      uint32
	Comm     string
	Filename string // target of /proc/PID/exe, may be empty (kernel threads, permissions)
	Argv     []string
	// Kernel marks kernel threads, which have no argv and never exec.
	Kernel bool
	// Stdio is what fd 0 and fd 1 are now (not necessarily what they
	// were at the exec); zero when unreadable.
	Stdio Stdio
}
