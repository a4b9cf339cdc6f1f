package lineage

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// ErrInvalidState is wrapped by every error Restore returns: the State
// describes no graph (see State for what Restore accepts).
var ErrInvalidState = errors.New("lineage: invalid state")

// State is everything a Graph holds, as Dump copies it and Restore rebuilds
// it: the nodes with their edges as identities, the bookkeeping the graph's
// later calls depend on, and the counters. Config (retention, caps) is not
// part of it: restore with the Config the graph was made with; another
// Retention changes when dead branches go.
//
// A State round-trips through encoding/json exactly. Strings that are not
// valid UTF-8 (argv and comm are bytes as the kernel and /proc report them,
// and a capture limit can cut a character in two), which a JSON string
// cannot carry, travel beside the nodes as base64 ("raw_strings").
//
// Restore accepts a State when:
//   - every node has a nonzero PID and a distinct ID (in any order);
//   - every nonzero Creator is the ID of a node, and no chain of creators
//     loops;
//   - every nonzero Parent with ParentDetached false is the ID of another
//     node; a detached Parent may be any identity and is not resolved
//     against the nodes, even when one of them has it;
//   - ParentDetached is set only with a nonzero Parent;
//   - Gaps holds only the Gap flags this package defines, and a node that
//     has not exited is not flagged GapNoExit;
//   - every Image.Source is one this package defines, and every key of
//     Stats.Gaps names a single Gap flag (Gap.String).
//
// Restore applies cfg's caps to what it is given: a node with more than
// MaxImages images keeps its first and latest ones (counted as dropped),
// and a State with MaxNodes nodes or more has its oldest dead branches
// evicted, so a restored graph is as bounded as a running one.
//
// Everything else is taken as it is: times, flags and counters are values
// the graph reads and compares, and none of them can break it, even in a
// combination Dump would not produce.
type State struct {
	// Clock is the newest time the graph saw in an event or a snapshot read.
	Clock uint64 `json:"clock_ns"`
	// RepairAt and Repaired describe the last Repair's scan: when it
	// started and, per PID it listed, that process's start.
	RepairAt uint64            `json:"repair_at_ns,omitempty"`
	Repaired map[uint32]uint64 `json:"repaired,omitempty"`
	// Nodes are the processes in the graph, sorted by (start, PID).
	Nodes []NodeState `json:"nodes"`
	// Recent are the exited processes queued to go once
	// Config.RecentExits newer ones follow (recent.go), oldest first;
	// each is one of Nodes, listed once.
	Recent []ID       `json:"recent,omitempty"`
	Stats  StatsState `json:"stats"`
}

// NodeState is one node of a State: the Process that Get returns for it
// and the graph's bookkeeping about it.
type NodeState struct {
	// Process is the node as queries return it. Creator is the ID of the
	// node that created it, zero when unknown. Parent is the current
	// parent's ID, zero when unknown.
	Process

	// ParentDetached: Parent is an identity only, not a node of the graph:
	// no node had it when it was recorded (a parent the graph never saw, or
	// a PID /proc named with no live node), or its node has retired since.
	// When false, Parent is a node of the graph and follows it when a kernel
	// event makes its coarse start exact.
	ParentDetached bool `json:"parent_detached,omitempty"`
	// ParentAt is when the parent was reported; older reports do not
	// override it.
	ParentAt uint64 `json:"parent_at_ns,omitempty"`
	// CreatorFromSnapshot: Creator was guessed from a snapshot's PPID (seed
	// or repair), so the process's own fork event may still correct it.
	CreatorFromSnapshot bool `json:"creator_from_snapshot,omitempty"`
	// CommAt, UIDAt and CgroupAt are the times of the events or snapshot
	// reads that set Comm, UID and CgroupID; older events do not override
	// them.
	CommAt   uint64 `json:"comm_at_ns,omitempty"`
	UIDAt    uint64 `json:"uid_at_ns,omitempty"`
	CgroupAt uint64 `json:"cgroup_at_ns,omitempty"`
	// ProcRead: the image was read from /proc at ProcReadAt, so an exec no
	// later than that is already reflected in it.
	ProcRead   bool   `json:"proc_read,omitempty"`
	ProcReadAt uint64 `json:"proc_read_at_ns,omitempty"`
	// MarkedAt is when the graph marked the node exited; retention counts
	// from it when ExitTime is unknown.
	MarkedAt uint64 `json:"marked_at_ns,omitempty"`
	// ExitFromEvent: the exit came from a kernel exit event, so a second
	// one is a duplicate; an inferred exit yields to a late real one.
	ExitFromEvent bool `json:"exit_from_event,omitempty"`
}

// StatsState holds the counters of Stats that only grow.
type StatsState struct {
	Retired        uint64 `json:"retired,omitempty"`
	Repairs        uint64 `json:"repairs,omitempty"`
	DuplicateExits uint64 `json:"duplicate_exits,omitempty"`
	Ignored        uint64 `json:"ignored,omitempty"`
	ImagesDropped  uint64 `json:"images_dropped,omitempty"`
	Evicted        uint64 `json:"evicted,omitempty"`
	OverCap        uint64 `json:"over_cap,omitempty"`
	Folded         uint64 `json:"folded,omitempty"`
	Dropped        uint64 `json:"dropped,omitempty"`
	// Gaps counts, per gap flag named as by Gap.String, how many times the
	// graph set it on a process; zero counts are left out.
	Gaps map[string]uint64 `json:"gaps,omitempty"`
}

// Dump returns a deep copy of everything the graph holds. It copies under
// the read lock and encodes nothing; callers may keep or modify the State.
func (g *Graph) Dump() State {
	g.mu.RLock()
	s := State{
		Clock:    g.clock,
		RepairAt: g.repairAt,
		Stats:    g.stats.dump(),
	}
	if len(g.repaired) > 0 {
		s.Repaired = maps.Clone(g.repaired)
	}
	for _, n := range g.recent[g.recentHead:] {
		if n.recent {
			s.Recent = append(s.Recent, n.p.ID)
		}
	}
	// One allocation for all images and one for all argv elements, instead
	// of a few per node under the lock.
	nImages, nArgs := 0, 0
	for _, n := range g.byID {
		nImages += len(n.p.Images)
		for i := range n.p.Images {
			nArgs += len(n.p.Images[i].Argv)
		}
	}
	b := imageBuf{images: make([]Image, 0, nImages), args: make([]string, 0, nArgs)}
	// Nodes are copied in map order and sorted once the lock is released,
	// through small keys, so that each copy moves once.
	type key struct {
		start uint64
		pid   uint32
		at    int // index of the copy in s.Nodes; -1 once moved
	}
	keys := make([]key, 0, len(g.byID))
	s.Nodes = make([]NodeState, 0, len(g.byID))
	for _, n := range g.byID {
		keys = append(keys, key{n.p.ID.Start, n.p.ID.PID, len(s.Nodes)})
		s.Nodes = append(s.Nodes, n.dump(&b))
	}
	g.mu.RUnlock()

	slices.SortFunc(keys, func(a, b key) int {
		if a.start != b.start {
			return cmp.Compare(a.start, b.start)
		}
		return cmp.Compare(a.pid, b.pid)
	})
	// Position i takes the copy at keys[i].at: follow each cycle of the
	// permutation once.
	for i := range keys {
		if keys[i].at < 0 {
			continue
		}
		first := s.Nodes[i]
		j := i
		for {
			from := keys[j].at
			keys[j].at = -1
			if from == i {
				s.Nodes[j] = first
				break
			}
			s.Nodes[j] = s.Nodes[from]
			j = from
		}
	}
	return s
}

// imageBuf holds the images and argv elements of every node of a Dump.
// Each node's slices of them are capped, so appending to one copies it.
type imageBuf struct {
	images []Image
	args   []string
}

// dump returns the NodeState of n, its images copied into b.
func (n *node) dump(b *imageBuf) NodeState {
	ns := NodeState{
		Process:             n.p,
		ParentAt:            n.parentAt,
		CreatorFromSnapshot: n.creatorFromSnap,
		CommAt:              n.commAt,
		UIDAt:               n.uidAt,
		CgroupAt:            n.cgroupAt,
		ProcRead:            n.procRead,
		ProcReadAt:          n.procReadAt,
		MarkedAt:            n.markedAt,
		ExitFromEvent:       n.exitFromEvent,
	}
	ns.Creator = ID{}
	if n.creator != nil {
		ns.Creator = n.creator.p.ID
	}
	switch {
	case n.parent != nil:
		// A retired parent keeps only its identity, as a reported one.
		ns.Parent = n.parent.p.ID
		ns.ParentDetached = n.parent.retired
	default:
		ns.Parent = n.parentID
		ns.ParentDetached = !n.parentID.IsZero()
	}
	ns.Images = nil
	if len(n.p.Images) > 0 {
		first := len(b.images)
		for _, im := range n.p.Images {
			if len(im.Argv) > 0 {
				a := len(b.args)
				b.args = append(b.args, im.Argv...)
				im.Argv = b.args[a:len(b.args):len(b.args)]
			} else {
				im.Argv = nil
			}
			b.images = append(b.images, im)
		}
		ns.Images = b.images[first:len(b.images):len(b.images)]
	}
	return ns
}

func (c *counters) dump() StatsState {
	s := StatsState{
		Retired:        c.retired,
		Repairs:        c.repairs,
		DuplicateExits: c.duplicateExits,
		Ignored:        c.ignored,
		ImagesDropped:  c.imagesDropped,
		Evicted:        c.evicted,
		OverCap:        c.overCap,
		Folded:         c.folded,
		Dropped:        c.dropped,
	}
	for i, gap := range allGaps {
		if c.gaps[i] != 0 {
			if s.Gaps == nil {
				s.Gaps = make(map[string]uint64, len(allGaps))
			}
			s.Gaps[gap.String()] = c.gaps[i]
		}
	}
	return s
}

// Restore builds a graph from a State, as Dump returned it from a graph
// made with cfg. The graph answers every query and every later call exactly
// as that graph would have. Restore does not keep s or anything it refers
// to. A State that does not describe a graph (see State) is refused with an
// error wrapping ErrInvalidState.
func Restore(cfg Config, s State) (*Graph, error) {
	g := New(cfg)
	g.byID = make(map[ID]*node, len(s.Nodes))
	g.clock = s.Clock
	g.repairAt = s.RepairAt
	if len(s.Repaired) > 0 {
		g.repaired = maps.Clone(s.Repaired)
	}
	if err := g.stats.restore(&s.Stats); err != nil {
		return nil, err
	}

	nodes := make([]*node, len(s.Nodes))
	for i := range s.Nodes {
		ns := &s.Nodes[i]
		if err := checkNode(i, ns); err != nil {
			return nil, err
		}
		if g.byID[ns.ID] != nil {
			return nil, fmt.Errorf("%w: node %v listed twice", ErrInvalidState, ns.ID)
		}
		n := &node{
			p:               ns.Process,
			creatorFromSnap: ns.CreatorFromSnapshot,
			parentAt:        ns.ParentAt,
			commAt:          ns.CommAt,
			uidAt:           ns.UIDAt,
			cgroupAt:        ns.CgroupAt,
			procRead:        ns.ProcRead,
			procReadAt:      ns.ProcReadAt,
			markedAt:        ns.MarkedAt,
			exitFromEvent:   ns.ExitFromEvent,
		}
		// The edges live in the pointers; p never holds them.
		n.p.Creator, n.p.Parent = ID{}, ID{}
		n.p.Images = restoreImages(ns.Images)
		g.byID[ns.ID] = n
		nodes[i] = n
	}

	for i, n := range nodes {
		ns := &s.Nodes[i]
		if !ns.Creator.IsZero() {
			c := g.byID[ns.Creator]
			if c == nil {
				return nil, fmt.Errorf("%w: node %v: creator %v is not a node", ErrInvalidState, ns.ID, ns.Creator)
			}
			n.creator = c
			c.addChild(n)
		}
		switch {
		case ns.Parent.IsZero():
		case ns.ParentDetached:
			n.parentID = ns.Parent
		default:
			p := g.byID[ns.Parent]
			if p == nil {
				return nil, fmt.Errorf("%w: node %v: parent %v is not a node and not detached", ErrInvalidState, ns.ID, ns.Parent)
			}
			if p == n {
				return nil, fmt.Errorf("%w: node %v is its own parent", ErrInvalidState, ns.ID)
			}
			n.parent = p
		}
	}

	slices.SortFunc(nodes, cmpNodes)
	if err := checkCreatorsEndInRoots(nodes); err != nil {
		return nil, err
	}
	for _, n := range nodes {
		g.byPID[n.p.ID.PID] = append(g.byPID[n.p.ID.PID], n)
		g.capImages(n) // a smaller Config.MaxImages than the saved graph's
		g.account(n)
	}
	for _, x := range s.Recent {
		n := g.byID[x]
		switch {
		case n == nil:
			return nil, fmt.Errorf("%w: recent exit %v is not a node", ErrInvalidState, x)
		case n.recent:
			return nil, fmt.Errorf("%w: recent exit %v listed twice", ErrInvalidState, x)
		}
		n.recent = true
		g.recent = append(g.recent, n)
		g.recentLive++
	}
	// Evict, never fold: nothing is pinned yet (see Pin).
	g.evict()
	return g, nil
}

// allGapFlags is every Gap flag this package defines, or-ed.
const allGapFlags = GapSeeded | GapNoFork | GapUnknownCreator | GapNoExit | GapRepaired

// checkNode validates what Restore can check of one node on its own.
func checkNode(i int, ns *NodeState) error {
	if ns.ID.PID == 0 {
		return fmt.Errorf("%w: nodes[%d]: pid 0 names no process", ErrInvalidState, i)
	}
	if bad := ns.Gaps &^ allGapFlags; bad != 0 {
		return fmt.Errorf("%w: node %v: unknown gap flags %#x", ErrInvalidState, ns.ID, uint16(bad))
	}
	if !ns.Exited && ns.Gaps&GapNoExit != 0 {
		return fmt.Errorf("%w: node %v: alive but flagged %v", ErrInvalidState, ns.ID, GapNoExit)
	}
	if ns.ParentDetached && ns.Parent.IsZero() {
		return fmt.Errorf("%w: node %v: parent detached but zero", ErrInvalidState, ns.ID)
	}
	for j, im := range ns.Images {
		if im.Source > SourceInherited {
			return fmt.Errorf("%w: node %v: image %d: unknown source %d", ErrInvalidState, ns.ID, j, im.Source)
		}
	}
	return nil
}

// checkCreatorsEndInRoots verifies that no chain of creators loops: then
// a walk down the children lists from the nodes without creator reaches
// every node, each once (a node is in its creator's list only). On a loop
// it names the oldest node on or below it (nodes are sorted).
func checkCreatorsEndInRoots(nodes []*node) error {
	reached := make(map[*node]bool)
	walk := func(record bool) int {
		var stack []*node
		for _, n := range nodes {
			if n.creator == nil {
				stack = append(stack, n)
			}
		}
		count := 0
		for len(stack) > 0 {
			n := stack[len(stack)-1]
			stack = append(stack[:len(stack)-1], n.children...)
			count++
			if record {
				reached[n] = true
			}
		}
		return count
	}
	if walk(false) == len(nodes) {
		return nil
	}
	walk(true)
	for _, n := range nodes {
		if !reached[n] {
			return fmt.Errorf("%w: node %v: its creators form a cycle", ErrInvalidState, n.p.ID)
		}
	}
	return fmt.Errorf("%w: creators form a cycle", ErrInvalidState) // not reached
}

func restoreImages(in []Image) []Image {
	if len(in) == 0 {
		return nil
	}
	out := make([]Image, len(in))
	copy(out, in)
	for i := range out {
		if len(out[i].Argv) == 0 {
			out[i].Argv = nil
		} else {
			out[i].Argv = cloneStrings(out[i].Argv)
		}
	}
	return out
}

func (c *counters) restore(s *StatsState) error {
	c.retired = s.Retired
	c.repairs = s.Repairs
	c.duplicateExits = s.DuplicateExits
	c.ignored = s.Ignored
	c.imagesDropped = s.ImagesDropped
	c.evicted = s.Evicted
	c.overCap = s.OverCap
	c.folded = s.Folded
	c.dropped = s.Dropped
	for _, name := range slices.Sorted(maps.Keys(s.Gaps)) {
		v := s.Gaps[name]
		i := slices.IndexFunc(allGaps[:], func(g Gap) bool { return g.String() == name })
		if i < 0 {
			return fmt.Errorf("%w: stats: unknown gap %q", ErrInvalidState, name)
		}
		c.gaps[i] = v
	}
	return nil
}

// JSON. A JSON string holds Unicode text: encoding/json writes each byte of
// a string that is not valid UTF-8 as U+FFFD. So the exact bytes of such a
// string go beside the nodes, and decoding puts them back.

// stateFields is State without its methods, for encoding/json.
type stateFields State

type stateJSON struct {
	stateFields
	RawStrings []rawString `json:"raw_strings,omitempty"`
}

// rawString is the exact value of a string of Nodes[Node] that is not
// valid UTF-8. Field is "comm", "images.I.filename" or "images.I.argv.J".
type rawString struct {
	Node  int    `json:"node"`
	Field string `json:"field"`
	Bytes []byte `json:"bytes"`
}

// MarshalJSON encodes s so that UnmarshalJSON restores it exactly
// (EncodeJSON's bytes).
func (s State) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	if err := s.EncodeJSON(&b); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// nodesNull is how encoding/json writes State's nodes when there are none:
// EncodeJSON writes the nodes in its place. Every field before it is a
// number or a map keyed by numbers, so its first occurrence is the key.
var nodesNull = []byte(`"nodes":null`)

// EncodeJSON writes s to w as MarshalJSON encodes it, but a node at a
// time: the encoding of a State of many nodes is never held whole (a
// checkpoint streams it to its file). The nodes are separated by
// newlines, which encoding/json drops when it compacts MarshalJSON's
// output.
func (s State) EncodeJSON(w io.Writer) error {
	head := stateFields(s)
	head.Nodes = nil
	h, err := json.Marshal(head)
	if err != nil {
		return err
	}
	at := bytes.Index(h, nodesNull)
	if at < 0 || h[len(h)-1] != '}' {
		return fmt.Errorf("lineage: encoding a state: no %s in %.60s", nodesNull, h)
	}
	ew := &errWriter{w: w}
	if s.Nodes == nil {
		ew.write(h)
		return ew.err
	}
	ew.write(h[:at])
	ew.write([]byte(`"nodes":[`))
	enc := json.NewEncoder(ew)
	var raw []rawString
	for i := range s.Nodes {
		if i > 0 {
			ew.write([]byte{','})
		}
		if err := enc.Encode(&s.Nodes[i]); err != nil {
			return err
		}
		raw = appendRawStrings(raw, i, &s.Nodes[i])
	}
	ew.write([]byte{']'})
	ew.write(h[at+len(nodesNull) : len(h)-1])
	if len(raw) > 0 {
		ew.write([]byte(`,"raw_strings":`))
		if err := enc.Encode(raw); err != nil {
			return err
		}
	}
	ew.write([]byte{'}'})
	return ew.err
}

// errWriter keeps the first error of w; writes after it do nothing.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) Write(b []byte) (int, error) {
	e.write(b)
	if e.err != nil {
		return 0, e.err
	}
	return len(b), nil
}

func (e *errWriter) write(b []byte) {
	if e.err == nil {
		_, e.err = e.w.Write(b)
	}
}

func appendRawStrings(out []rawString, i int, ns *NodeState) []rawString {
	add := func(field, s string) {
		if !utf8.ValidString(s) {
			out = append(out, rawString{Node: i, Field: field, Bytes: []byte(s)})
		}
	}
	add("comm", ns.Comm)
	for k, im := range ns.Images {
		add("images."+strconv.Itoa(k)+".filename", im.Filename)
		for a, arg := range im.Argv {
			add("images."+strconv.Itoa(k)+".argv."+strconv.Itoa(a), arg)
		}
	}
	return out
}

// UnmarshalJSON decodes what MarshalJSON encoded.
func (s *State) UnmarshalJSON(b []byte) error {
	var j stateJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	for k, r := range j.RawStrings {
		p := rawStringField(j.Nodes, r)
		if p == nil {
			return fmt.Errorf("raw_strings[%d]: node %d has no string %q", k, r.Node, r.Field)
		}
		*p = string(r.Bytes)
	}
	*s = State(j.stateFields)
	return nil
}

// rawStringField returns the string r names, nil when there is none.
func rawStringField(nodes []NodeState, r rawString) *string {
	if r.Node < 0 || r.Node >= len(nodes) {
		return nil
	}
	ns := &nodes[r.Node]
	if r.Field == "comm" {
		return &ns.Comm
	}
	parts := strings.Split(r.Field, ".")
	if len(parts) < 3 || parts[0] != "images" {
		return nil
	}
	k, err := strconv.Atoi(parts[1])
	if err != nil || k < 0 || k >= len(ns.Images) {
		return nil
	}
	im := &ns.Images[k]
	switch {
	case len(parts) == 3 && parts[2] == "filename":
		return &im.Filename
	case len(parts) == 4 && parts[2] == "argv":
		a, err := strconv.Atoi(parts[3])
		if err != nil || a < 0 || a >= len(im.Argv) {
			return nil
		}
		return &im.Argv[a]
	}
	return nil
}
