package sensor

import (
	"errors"
	"log/slog"

	"github.com/cilium/ebpf/btf"

	"github.com/mcptrace/mcptrace/lineage"
	"github.com/mcptrace/mcptrace/windows/owners"
)

// The sensor's API types, the same on every system: the agent is written
// against them, and each system's sensor fills them as it can (Linux's
// from the kernel's BPF maps and ring buffers, Windows' from its ETW
// session; see each field).

// Options configure Open. Zero values take the documented defaults. The
// kernel's ring buffer, file systems, pin sets and container clients are
// Linux's (Windows ignores them); Owner and SessionName are Windows' (Linux
// ignores them).
type Options struct {
	// RingBufferSize in bytes: a power of two and a multiple of the page
	// size. Default 4 MiB. Linux only.
	RingBufferSize int
	// TraceFS and BPFFS are mounted when missing. Defaults
	// /sys/kernel/tracing and /sys/fs/bpf. Linux only.
	TraceFS, BPFFS string
	// PinDir, when set, keeps the kernel side running without the agent:
	// the programs stay attached and the maps pinned under PinDir (on
	// bpffs) after Close, so events queue in the ring buffer and doomed
	// processes keep dying until the next Open of the same PinDir takes
	// them over (see Open). Empty: nothing is pinned and Close detaches
	// the programs. Linux only.
	PinDir string
	// ContainerClients are the programs (by process name) whose requests
	// to the engine sockets (Sensor.SetEngineSockets) the kernel reads, to
	// learn which containers they start (see requests_linux.go). Empty:
	// none are read. Linux only.
	ContainerClients []string
	// EngineSockets are the engine sockets Open gives the kernel
	// (Sensor.SetEngineSockets) before it takes over a previous agent's
	// set, so that the request reader is attached before the previous
	// one is detached: a client that sends its start while one agent
	// hands over to the next is read. A path with no socket behind it is
	// left for a later SetEngineSockets. Linux only.
	EngineSockets []string
	// KernelTypes is the kernel's BTF decoded once for every load of one
	// start (the sensor's programs, the task iterator, the kfunc check):
	// decoding it takes tens of ms each time. The sensor keeps no
	// reference after Open, so the decoded types are garbage once the
	// caller drops its own. Nil: Open decodes its own. Linux only.
	KernelTypes *btf.Cache
	// Owner maps a process's token to its owner number
	// (owners.Table.Owner), the UID of the events of a started process.
	// Windows only, and required there: Open fails without it.
	Owner func(owners.Token) uint32
	// SessionName names the ETW real-time session. A session of that name
	// left running (by an agent that died) is stopped and replaced.
	// Default DefaultSessionName; tests use their own. Windows only.
	SessionName string
	// ETW, when set, stands in for the kernel's ETW session: what it
	// delivers to the Handler it is given is consumed as the session's
	// events would be. For tests where ETW delivers nothing (wine);
	// nil, the default, starts the real session. Windows only.
	ETW    ETWSource
	Logger *slog.Logger
	// skipBackups attaches the primary programs only; the benchmark
	// uses it to price the backups.
	skipBackups bool
	// variant, when not 0, makes every program differ from this build's
	// by a harmless instruction: tests use it to stand for another build
	// of mcptrace taking over.
	variant int32
	// refuseRequests makes the request reader a program the verifier
	// refuses: tests use it to stand for a kernel that cannot run it.
	refuseRequests bool
}

// ErrClosed is returned by Read after Close.
var ErrClosed = errors.New("sensor closed")

// Batch is what one ReadBatch returned: the events of consecutive records
// of one ring buffer, in the order the kernel reserved them.
type Batch struct {
	Events []lineage.Event
	// Barrier is the highest barrier sequence number among the records
	// (see Sensor.Barrier), 0 when there was none.
	Barrier uint64
	// Undecodable counts records that could not be decoded; Err is the
	// first such error. Those records are skipped, never retried.
	Undecodable int
	Err         error
}

// ErrRingFull is returned by Barrier when the ring buffer has no room for
// the barrier record; retry once the reader made room.
var ErrRingFull = errors.New("ring buffer full")

// Counters are the kernel's counters of one pin set: this sensor's own, or
// one it took over (whose counters are final once it is drained).
type Counters struct {
	// Set names the pin set, e.g. "set-3-1a2b3c4d"; "" for the own set of
	// a sensor that pins nothing.
	Set string
	// Lost counts, per event kind, records no ring buffer space was left
	// for (lost_events) plus events both programs of a hook were skipped
	// for. The kernel skips a tracing program invoked on a CPU where it is
	// already running (recursion_misses, Linux 5.12+), which happens when
	// tracepoints are preemptible; the backup program runs the events its
	// primary was skipped for and counts them (Recovered), so the events
	// nobody ran are the primary's misses minus those.
	Lost map[lineage.EventKind]uint64
	// Recovered counts, per event kind, the events the backup programs ran
	// because the kernel skipped the primary.
	Recovered map[lineage.EventKind]uint64
	// Discarded counts records of a taken-over set written by a build
	// with another record layout: dropped unread, events of unknown kind.
	Discarded uint64
	// Doom counts the kills the kernel did for doomed processes.
	Doom DoomKills
	// Read counts the records this sensor read from the set's ring.
	Read uint64
	// RequestSkips counts runs of the container request reader the
	// kernel skipped (recursion_misses; it has no backup). It runs on
	// every system call, so nearly all of them read nothing; a client's
	// start may be among them. Not in Lost: nothing the graph needs was
	// lost, and /proc holds nothing to repair a request from.
	RequestSkips uint64
}

// DoomKills counts the kills the kernel did for doomed processes.
type DoomKills struct {
	Forkers  uint64 // doomed processes killed when they forked
	Children uint64 // children of doomed processes killed before they ran (Linux 6.13+)
	Execs    uint64 // doomed processes killed when they exec'd
	// SparedExecs counts doomed processes that exec'd a program a spare
	// rule may protect (SpareExecs): they left doom alive.
	SparedExecs uint64
}

// MapUsage is how full one of the sensor's bounded hash maps is.
type MapUsage struct {
	Name         string
	Entries, Max int
}

// ErrNoPrivilege: the agent runs without the privilege to load BPF
// programs (not root, nor CAP_SYS_ADMIN or CAP_BPF with CAP_PERFMON). It
// is not the kernel's fault: the FeatureError that says so wraps it.
var ErrNoPrivilege = errors.New("no privilege to load BPF programs")
