package lineage

import (
	"sync"
	"time"
)

// Defaults for a zero Config.
const (
	DefaultRetention = 5 * time.Minute
	// DefaultRepairInterval is how often the graph's owner checks the
	// kernel's loss counters and repairs the graph from /proc after a
	// loss (Graph.Repair; lineage.repair-interval).
	DefaultRepairInterval = time.Second

	// DefaultMaxNodes caps the graph at 200,000 processes. A busy build
	// host starts a few hundred processes a second; with the default
	// retention of 5 minutes that is well under 100,000 nodes, so the cap
	// is only reached by a flood. A node costs about 1 KiB with a typical
	// command line and at most DefaultMaxImages images of the kernel's
	// 4 KiB argv capture, so the cap holds the graph to a few hundred MiB
	// typically. Live processes are never evicted and are bounded by the
	// kernel's pid_max instead.
	DefaultMaxNodes = 200_000
	// MinMaxNodes and MaxMaxNodes bound what an operator may configure
	// (package config); the graph itself takes any positive cap.
	MinMaxNodes = 1_000
	MaxMaxNodes = 10_000_000

	// DefaultMaxImages keeps the first image of a process and its latest
	// 7: enough to show a wrapper chain (sh → npm → node …) whole, while a
	// process that execs itself in a loop holds 8 images, not one per exec.
	DefaultMaxImages = 8
	// MinMaxImages and MaxMaxImages bound what an operator may configure;
	// the graph never keeps fewer than 2 (the first and the latest).
	MinMaxImages = 2
	MaxMaxImages = 1024

	// DefaultMaxImageBytes caps what the images of all nodes hold at 512
	// MiB. The node cap alone does not bound it: an image is up to the
	// kernel's 4 KiB argv capture, and 4 KiB of empty arguments are 4096
	// strings (64 KiB of string headers), so 200,000 nodes of 8 such
	// images would be 100 GiB. Typical nodes (about 1 KiB) reach the node
	// cap first.
	DefaultMaxImageBytes = 512 << 20
	// MinMaxImageBytes and MaxMaxImageBytes bound what an operator may
	// configure.
	MinMaxImageBytes = 16 << 20
	MaxMaxImageBytes = 64 << 30

	// DefaultRecentExits is how many exited processes that no session
	// holds the graph keeps beyond the ones that hold a live process's
	// chain (recent.go): the last few seconds of a busy node's churn for
	// `tree`, a few MiB, whatever the fork rate.
	DefaultRecentExits = 4096
)

// Config tunes a Graph. Zero values take the defaults.
type Config struct {
	// Retention is how long a fully dead branch stays after its last member
	// exited, when a claimed process (Claim: a session's root) is in it or
	// above it, or the graph could not prove its lineage; other exited
	// processes go sooner (RecentExits). Default 5m.
	Retention time.Duration
	// MaxNodes caps the nodes of the graph. When it is reached, the oldest
	// entirely dead branches (a node and everything it created, all
	// exited, ordered by their newest exit) are evicted down to a little
	// under the cap (Stats.Evicted). Live processes, and dead ones with a
	// live descendant, are never evicted: lineage to a live process is
	// what an enforcer acts on. When that is not enough, exited processes
	// that only connect an exited creator to one child are folded out of
	// their chains (Stats.Folded, fold.go), so what is left is about two
	// nodes per live process. Beyond that, new processes are still
	// admitted over the cap and counted (Stats.OverCap).
	// Default DefaultMaxNodes.
	MaxNodes int
	// MaxImages caps the images kept per process: the first and the latest
	// MaxImages-1; the others are dropped and counted
	// (Process.ImagesDropped, Stats.ImagesDropped). Default
	// DefaultMaxImages; values below 2 mean 2.
	MaxImages int
	// MaxImageBytes caps the memory the images of all nodes hold, by the
	// graph's own accounting (Stats.ImageBytes): reaching it evicts like
	// MaxNodes. Default DefaultMaxImageBytes.
	MaxImageBytes int
	// RecentExits is how many exited processes no session holds (see
	// Claim) stay after their exit: the oldest beyond it go, with their
	// creators that exited and connect nothing else (recent.go,
	// Stats.Dropped). Retention applies to the rest. Default
	// DefaultRecentExits.
	RecentExits int
}

// Graph is the lineage graph of the processes of one node. The zero value
// is not usable; call New.
type Graph struct {
	mu sync.RWMutex

	retention uint64 // ns
	maxNodes  int
	maxImages int
	maxBytes  int
	maxRecent int
	// nextEvictAt and nextEvictBytes are 0, or while the caps cannot be
	// met (nothing left to evict) the node count and image bytes at which
	// eviction is tried again.
	nextEvictAt, nextEvictBytes int
	// imageBytes is the sum of every node's bytes (Process.ImageBytes).
	imageBytes int

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

	// recent[recentHead:] are the exited processes no session held at
	// their exit, oldest first, that go once maxRecent newer ones follow
	// (recent.go).
	recent     []*node
	recentHead int
	// recentLive counts the entries of recent[recentHead:] still in the
	// graph (node.recent set); removed ones wait to be skipped.
	recentLive int

	stats counters
}

// New returns an empty graph.
func New(cfg Config) *Graph {
	g := &Graph{
		retention: uint64(DefaultRetention),
		maxNodes:  DefaultMaxNodes,
		maxImages: DefaultMaxImages,
		maxBytes:  DefaultMaxImageBytes,
		maxRecent: DefaultRecentExits,
		byID:      make(map[ID]*node),
		byPID:     make(map[uint32][]*node),
	}
	if cfg.Retention > 0 {
		g.retention = uint64(cfg.Retention)
	}
	if cfg.MaxNodes > 0 {
		g.maxNodes = cfg.MaxNodes
	}
	if cfg.MaxImages > 0 {
		g.maxImages = max(cfg.MaxImages, 2)
	}
	if cfg.MaxImageBytes > 0 {
		g.maxBytes = cfg.MaxImageBytes
	}
	if cfg.RecentExits > 0 {
		g.maxRecent = cfg.RecentExits
	}
	return g
}

// node is the internal form of a Process. Edges are pointers so that
// upgrading a coarse identity changes one field, not every reference.
type node struct {
	// The fields are in the order that packs them: the counters and flags
	// share the last words. A node is 280 bytes, a 288-byte allocation
	// (was 328, a 352-byte one; TestNodesFitTheirAllocations).

	// p holds everything public except Creator and Parent, which are
	// derived from the pointers below when the node is exported.
	p Process

	creator *node
	// children are the nodes this one created, in no particular order;
	// childIdx is this node's index in its creator's children, so that
	// leaving them is O(1) (addChild, removeChild).
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

	// procReadAt: when procRead, the node's image was read from /proc at
	// this time (seed or repair), so an exec no later than that is
	// already reflected in it.
	procReadAt uint64

	// markedAt is when the graph marked the node exited (exit event time,
	// or the time the exit was inferred); retention counts from it when
	// ExitTime is unknown.
	markedAt uint64

	// bytes is p.ImageBytes() as last accounted (Graph.account).
	bytes int

	childIdx int32
	// pins counts Pin calls not yet undone: a pinned node is never
	// folded out of a creator chain (fold.go).
	pins int32
	// claims counts Claim calls not yet undone: the exited processes of
	// a claimed node's subtree stay for retention (recent.go).
	claims int32

	// creatorFromSnap: creator was guessed from a snapshot's PPID (seed or
	// repair); the node's own fork event may still correct it.
	creatorFromSnap bool
	procRead        bool // see procReadAt
	// exitFromEvent: the exit came from a kernel exit event, not inferred.
	exitFromEvent bool
	// retired: removed from the graph; kept only as a parent reference.
	retired bool
	// recent: queued among the graph's recent exits.
	recent bool
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
	p := n.brief()
	p.Images = cloneImages(n.p.Images)
	return p
}

// brief is export without the images (nil).
func (n *node) brief() Process {
	p := n.p
	p.Images = nil
	if n.creator != nil {
		p.Creator = n.creator.p.ID
	}
	if n.parent != nil {
		p.Parent = n.parent.p.ID
	} else {
		p.Parent = n.parentID
	}
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
