package lineage

import (
	"sync"
	"time"
)

// Defaults for a zero Config.
const (
	DefaultRetention = 5 * time.Minute
	// DefaultTickNS is 1e9/USER_HZ with USER_HZ = 100.
	DefaultTickNS = 10_000_000
)

// Config tunes a Graph. Zero values take the defaults.
type Config struct {
	// Retention is how long a fully dead branch stays after its last member
	// exited. Default 5m.
	Retention time.Duration
	// TickNS is the precision of /proc start times (1e9/USER_HZ), used to
	// match coarse snapshot identities with exact kernel ones. Default
	// 10_000_000.
	TickNS uint64
}

// Graph is the lineage graph of the processes of one node. The zero value
// is not usable; call New.
type Graph struct {
	mu sync.RWMutex

	retention uint64 // ns
	tick      uint64 // ns

	// byID indexes every node by its current public ID.
	byID map[ID]*node
	// byPID lists the nodes of each PID, oldest start first. A PID usually
	// has one node; recycled PIDs have several until the dead ones retire.
	byPID map[uint32][]*node

	// clock is the newest time seen in an event or snapshot read, used when
	// a node is marked exited by an event that carries no time.
	clock uint64

	// repairAt and repaired describe the last Repair's scan: when it
	// started and the start time of each PID it listed. Events the ring
	// buffer held during a repair are applied after it; a process they
	// name that started before repairAt but was not listed had exited by
	// the scan (goneAtRepair).
	repairAt uint64
	repaired map[uint32]uint64

	stats counters
}

// New returns an empty graph.
func New(cfg Config) *Graph {
	g := &Graph{
		retention: uint64(DefaultRetention),
		tick:      DefaultTickNS,
		byID:      make(map[ID]*node),
		byPID:     make(map[uint32][]*node),
	}
	if cfg.Retention > 0 {
		g.retention = uint64(cfg.Retention)
	}
	if cfg.TickNS > 0 {
		g.tick = cfg.TickNS
	}
	return g
}

// Tick is the precision of /proc start times the graph matches identities
// at (Config.TickNS).
func (g *Graph) Tick() uint64 { return g.tick }

// node is the internal form of a Process. Edges are pointers so that
// upgrading a coarse identity changes one field, not every reference.
type node struct {
	// p holds everything public except Creator and Parent, which are
	// derived from the pointers below when the node is exported.
	p Process

	creator *node
	// creatorFromSnap: creator was guessed from a snapshot's PPID (seed or
	// repair); the node's own fork event may still correct it.
	creatorFromSnap bool
	// children are the nodes this one created, in no particular order.
	children []*node

	// parent is the current parent when it is in the graph; otherwise
	// parentID is its identity as reported (zero when unknown).
	parent   *node
	parentID ID
	// parentAt is the time of the event or snapshot that set the parent.
	parentAt uint64

	// commAt, uidAt and cgroupAt are the times of the events or snapshots
	// that set Comm, UID and CgroupID; older events arriving late do not
	// overwrite them.
	commAt, uidAt, cgroupAt uint64

	// procRead: the node's image was read from /proc at procReadAt (seed or
	// repair), so an exec no later than that is already reflected in it.
	procRead   bool
	procReadAt uint64

	// markedAt is when the graph marked the node exited (exit event time,
	// or the time the exit was inferred); retention counts from it when
	// ExitTime is unknown.
	markedAt uint64
	// exitFromEvent: the exit came from a kernel exit event, not inferred.
	exitFromEvent bool

	// retired: removed from the graph; kept only as a parent reference.
	retired bool
}

func (n *node) id() ID { return n.p.ID }

// exitAt is the time retention counts from for an exited node.
func (n *node) exitAt() uint64 {
	if n.p.ExitTime != 0 {
		return n.p.ExitTime
	}
	return n.markedAt
}

// export returns a deep copy of the node as a Process.
func (n *node) export() Process {
	p := n.p
	if n.creator != nil {
		p.Creator = n.creator.p.ID
	}
	if n.parent != nil {
		p.Parent = n.parent.p.ID
	} else {
		p.Parent = n.parentID
	}
	p.Images = cloneImages(n.p.Images)
	return p
}

func cloneImages(in []Image) []Image {
	if in == nil {
		return nil
	}
	out := make([]Image, len(in))
	copy(out, in)
	for i := range out {
		out[i].Argv = cloneStrings(out[i].Argv)
	}
	return out
}

func cloneStrings(in []string) []string {
	if in == nil {
		return nil
	}
	return append([]string(nil), in...)
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// less orders nodes by (start, pid), the order of every sorted answer.
func less(a, b *node) bool {
	if a.p.ID.Start != b.p.ID.Start {
		return a.p.ID.Start < b.p.ID.Start
	}
	return a.p.ID.PID < b.p.ID.PID
}

func cmpNodes(a, b *node) int {
	switch {
	case less(a, b):
		return -1
	case less(b, a):
		return 1
	}
	return 0
}
