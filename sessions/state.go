package sessions

import (
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/mcptrace/mcptrace/lineage"
)

// TrackerState is everything a Tracker holds, for an agent that saves it across
// restarts: sessions, remembered markers and counters. Rules are not part
// of it: they come from the configuration the tracker is restored with.
type TrackerState struct {
	Clock uint64 `json:"clock_ns"`
	// Within is the identity Config.WithinPID resolved to, when it did.
	Within lineage.ID `json:"within,omitzero"`
	// Active and Ended hold the sessions; Ended oldest end first.
	Active []SessionState `json:"active,omitempty"`
	Ended  []SessionState `json:"ended,omitempty"`
	Marks  []markRecord   `json:"marks,omitempty"`
	// Containers are the container claims (containers.go).
	Containers []Container `json:"containers,omitempty"`
	// Starts are the container starts no session sent (starts.go).
	Starts []Start `json:"starts,omitempty"`
	Stats  Stats   `json:"stats"`
}

// SessionState is a session with the rule its root's image matched.
type SessionState struct {
	Session
	Rule string `json:"rule,omitempty"`
}

// Dump returns a copy of the tracker's state.
func (t *Tracker) Dump() TrackerState {
	t.mu.Lock()
	defer t.mu.Unlock()
	st := TrackerState{Clock: t.clock, Within: t.within, Marks: slices.Clone(t.marks), Stats: t.stats()}
	for _, list := range t.containers {
		for _, c := range list {
			st.Containers = append(st.Containers, c.clone())
		}
	}
	slices.SortFunc(st.Containers, byRefThenTime)
	st.Starts = t.startsSorted()
	active := make([]*session, 0, len(t.active))
	for _, s := range t.active {
		active = append(active, s)
	}
	slices.SortFunc(active, cmpSessions)
	for _, s := range active {
		st.Active = append(st.Active, SessionState{Session: s.snapshot(), Rule: s.rule})
	}
	for _, s := range t.ended {
		st.Ended = append(st.Ended, SessionState{Session: s.snapshot(), Rule: s.rule})
	}
	return st
}

// Restore returns a tracker over g (the graph restored with it) with cfg's
// rules and st's sessions. A session no tracker could have held (an ID
// that is not one, a second active session of one ID, an active one
// marked ended or the reverse, a root with PID 0 or 1) is left out and
// logged, never the rest with it; the error is only cfg's.
func Restore(g *lineage.Graph, cfg Config, log *slog.Logger, st TrackerState) (*Tracker, error) {
	t, err := NewTracker(g, cfg, log)
	if err != nil {
		return nil, err
	}
	t.clock = st.Clock
	if cfg.WithinPID != 0 && st.Within.PID == cfg.WithinPID {
		t.within = st.Within
		t.g.Pin(t.within) // as inScope does when it first finds it
	}
	check := func(ss SessionState, want State) error {
		switch {
		case !ValidSessionID(ss.ID):
			return fmt.Errorf("invalid ID")
		case ss.State != want:
			return fmt.Errorf("state %s, want %s", ss.State, want)
		case ss.Root.PID <= 1:
			return fmt.Errorf("root pid %d", ss.Root.PID)
		case want == Active && t.active[ss.Ref()] != nil:
			return fmt.Errorf("a second active session of this owner and ID")
		}
		return nil
	}
	add := func(ss SessionState, want State) *session {
		if err := check(ss, want); err != nil {
			t.log.Warn("saved session left out", "session", ss.ID, "err", err)
			return nil
		}
		if ss.Generation == 0 {
			ss.Generation = 1
		}
		s := &session{Session: ss.Session, rule: ss.Rule}
		s.Markers = slices.Clone(ss.Markers)
		t.byPID[s.Root.PID] = append(t.byPID[s.Root.PID], s)
		t.g.Claim(s.Root) // as start does; claims are not in the graph's state
		return s
	}
	var active []*session
	for _, ss := range st.Active {
		if s := add(ss, Active); s != nil {
			t.addActive(s)
			active = append(active, s)
		}
	}
	t.upgradeParents(active)
	for _, ss := range st.Ended {
		if s := add(ss, Ended); s != nil {
			t.retain(s)
		}
	}
	t.marks = slices.Clone(st.Marks)
	if len(t.marks) > maxMarkRecords {
		t.marks = t.marks[len(t.marks)-maxMarkRecords:]
	}
	t.restoreContainers(st.Containers)
	t.restoreStarts(st.Starts)
	t.st = countersFrom(st.Stats)
	t.logs.Suppressed = st.Stats.LogsSuppressed
	return t, nil
}

// upgradeParents completes the parent links of sessions saved before IDs
// were scoped by owner, which name their parent by ID alone (IDs were
// unique on the node then): the one active session of that ID is the
// parent.
func (t *Tracker) upgradeParents(active []*session) {
	byID := map[string][]*session{}
	for _, s := range active {
		byID[s.ID] = append(byID[s.ID], s)
	}
	for _, s := range active {
		if s.Parent == "" || t.active[s.ParentRef()] != nil {
			continue
		}
		if c := byID[s.Parent]; len(c) == 1 {
			t.removeChild(s.ParentRef(), s)
			s.ParentOwner = c[0].Owner
			t.addChild(s.ParentRef(), s)
		}
	}
}

// UpgradeEndingKey returns the key (EndingKey) of an ending saved under
// the key agents used before IDs were scoped by owner, "ID@began[#gen]",
// found among the sessions the tracker lists; keys of the current form
// come back unchanged. false: the session is no longer listed (its
// report could not be asked for anyway).
func (t *Tracker) UpgradeEndingKey(key string) (string, bool) {
	if strings.Contains(key, "/") {
		return key, true
	}
	var gen uint64
	if i := strings.LastIndexByte(key, '#'); i >= 0 {
		g, err := strconv.ParseUint(key[i+1:], 10, 32)
		if err != nil {
			return "", false
		}
		gen = g
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, list := range [][]*session{t.ended, slices.Collect(maps.Values(t.active))} {
		for _, s := range list {
			if LegacyEndingKey(s.Session, uint32(gen)) == key {
				return EndingKey(s.Session, uint32(gen)), true
			}
		}
	}
	return "", false
}

// ValidSessionID reports whether id can name a session: an ID a user may
// choose or the tracker generates (ValidID), or a further server of an
// `mcptrace exec` tag, "<tag>.<n>".
func ValidSessionID(id string) bool {
	if ValidID(id) {
		return true
	}
	i := strings.LastIndexByte(id, '.')
	if i < 0 || i == len(id)-1 {
		return false
	}
	for _, r := range id[i+1:] {
		if r < '0' || r > '9' {
			return false
		}
	}
	return ValidID(id[:i])
}

func countersFrom(s Stats) counters {
	c := counters{
		begun:   cloneMap(s.Begun),
		ended:   cloneMap(s.Ended),
		reasons: cloneMap(s.EndReasons),
	}
	c.dropped = s.Dropped
	c.markersAccepted = s.MarkersAccepted
	c.markersDuplicate = s.MarkersDuplicate
	c.markersRefused = s.MarkersRefused
	c.markersUnmatched = s.MarkersUnmatched
	c.tagsRefused = s.TagsRefused
	c.refusedCap = s.RefusedOverCap
	c.droppedQuota = s.DroppedOverQuota
	c.deduplicated = s.Deduplicated
	c.generations = s.Generations
	c.generationUnknown = s.GenerationUnknown
	c.containersClaimed = s.ContainersClaimed
	c.containersContested = s.ContainersContested
	c.containersRefused = s.ContainersRefused
	c.containersIgnored = s.ContainersIgnored
	c.startsUnkept = s.StartsUnkept
	return c
}
