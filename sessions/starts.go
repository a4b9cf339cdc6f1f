package sessions

import (
	"cmp"
	"slices"

	"github.com/mcptrace/mcptrace/containers"
	"github.com/mcptrace/mcptrace/lineage"
)

// Starts: a container start sent from no session is no session's to end,
// but it is the evidence `mcptrace orphans` needs about a container that
// leaked outside every session: which client started it, as whom, and
// (from the client's identity) whether that client is gone. The tracker
// keeps the latest such start of each container until the agent finds
// the container no longer running (PruneStarts) or a session claims it.

// Bounds of the starts kept. A start beyond them is counted
// (Stats.StartsUnkept) and not kept: its container, should it leak, is
// listed as one whose client is unknown (root alone sees it).
const (
	// MaxStarts bounds the starts kept on the node.
	MaxStarts = MaxContainers
	// MaxStartsPerUID bounds the starts kept of one client uid.
	MaxStartsPerUID = MaxContainersPerUID
)

// Start is a container start a process in no session sent.
type Start struct {
	// ID is the engine's full container ID (64 lowercase hex).
	ID string `json:"id"`
	// Client is the process that sent the start; ClientUID its uid then.
	Client    lineage.ID `json:"client"`
	ClientUID uint32     `json:"client_uid"`
	// At is when the kernel saw the request (CLOCK_BOOTTIME ns).
	At uint64 `json:"at_ns"`
}

// addStart keeps s, the newest start of its container; t.mu is held.
func (t *Tracker) addStart(s Start) {
	if _, claimed := t.containers[s.ID]; claimed {
		return // a session's: its claim says who started it
	}
	if old, ok := t.starts[s.ID]; ok {
		if old.At >= s.At {
			return // a replay, or an older start read late
		}
		t.forgetStart(s.ID)
	}
	if len(t.starts) >= MaxStarts || t.startsPerUID[s.ClientUID] >= MaxStartsPerUID {
		t.st.startsUnkept++
		return
	}
	t.starts[s.ID] = s
	t.startsPerUID[s.ClientUID]++
}

// forgetStart removes the start of container id; t.mu is held.
func (t *Tracker) forgetStart(id string) {
	s, ok := t.starts[id]
	if !ok {
		return
	}
	delete(t.starts, id)
	if t.startsPerUID[s.ClientUID]--; t.startsPerUID[s.ClientUID] <= 0 {
		delete(t.startsPerUID, s.ClientUID)
	}
}

// StartOf returns the start no session sent that is kept for container
// id.
func (t *Tracker) StartOf(id string) (Start, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s, ok := t.starts[id]
	return s, ok
}

// PruneStarts forgets the starts keep says no, and returns how many it
// forgot. The agent keeps those of running containers.
func (t *Tracker) PruneStarts(keep func(Start) bool) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for id, s := range t.starts {
		if !keep(s) {
			t.forgetStart(id)
			n++
		}
	}
	return n
}

// startsSorted returns the starts kept, by container ID; t.mu is held.
func (t *Tracker) startsSorted() []Start {
	out := make([]Start, 0, len(t.starts))
	for _, s := range t.starts {
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b Start) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

// restoreStarts puts saved starts back; invalid ones are left out.
func (t *Tracker) restoreStarts(ss []Start) {
	for _, s := range ss {
		if !containers.ValidID(s.ID) || s.Client.PID == 0 {
			t.log.Warn("saved container start left out", "container", s.ID)
			continue
		}
		t.addStart(s)
	}
}
