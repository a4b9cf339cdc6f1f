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
// keeps the starts of each container, a few each, until
// the agent finds the container no longer running (PruneStarts). Which of
// them started the running instance is the agent's to tell (only a start
// sent before its first process began can have); when more than one
// could have, none is named.

// Bounds of the starts kept. A start beyond them is counted
// (Stats.StartsUnkept) and not kept, and nothing kept is dropped for it:
// a container whose start was not kept, should it leak, is listed as one
// whose client is not known (root alone sees it).
const (
	// MaxStarts bounds the starts kept on the node.
	MaxStarts = MaxContainers
	// MaxStartsPerUID bounds the starts kept of one client uid.
	MaxStartsPerUID = MaxContainersPerUID
	// MaxStartsPerContainer bounds the starts kept per container.
	MaxStartsPerContainer = 4
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

// addStart keeps s; t.mu is held. The same start again (a replay, a
// duplicate record) is kept once.
func (t *Tracker) addStart(s Start) {
	list := t.starts[s.ID]
	if slices.Contains(list, s) {
		return
	}
	if len(list) >= MaxStartsPerContainer || t.nStarts >= MaxStarts || t.startsPerUID[s.ClientUID] >= MaxStartsPerUID {
		t.st.startsUnkept++
		return
	}
	t.starts[s.ID] = append(list, s)
	t.nStarts++
	t.startsPerUID[s.ClientUID]++
}

// forgetStarts removes the starts of container id; t.mu is held.
func (t *Tracker) forgetStarts(id string) {
	for _, s := range t.starts[id] {
		t.nStarts--
		if t.startsPerUID[s.ClientUID]--; t.startsPerUID[s.ClientUID] <= 0 {
			delete(t.startsPerUID, s.ClientUID)
		}
	}
	delete(t.starts, id)
}

// StartsOf returns the starts no session sent that are kept for
// container id, oldest first.
func (t *Tracker) StartsOf(id string) []Start {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := slices.Clone(t.starts[id])
	slices.SortFunc(out, func(a, b Start) int { return cmp.Compare(a.At, b.At) })
	return out
}

// PruneStarts forgets the starts of every container keep says no to,
// given its ID and its latest start's time, and returns how many
// containers it forgot. The agent keeps those of running containers, and
// those started a moment ago that the engine does not list yet.
func (t *Tracker) PruneStarts(keep func(id string, latest uint64) bool) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for id, list := range t.starts {
		latest := uint64(0)
		for _, s := range list {
			latest = max(latest, s.At)
		}
		if !keep(id, latest) {
			t.forgetStarts(id)
			n++
		}
	}
	return n
}

// HasStarts reports whether any start is kept.
func (t *Tracker) HasStarts() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.nStarts > 0
}

// startsSorted returns the starts kept, by container ID then time; t.mu
// is held.
func (t *Tracker) startsSorted() []Start {
	out := make([]Start, 0, t.nStarts)
	for _, list := range t.starts {
		out = append(out, list...)
	}
	slices.SortFunc(out, func(a, b Start) int { return cmp.Or(cmp.Compare(a.ID, b.ID), cmp.Compare(a.At, b.At)) })
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
