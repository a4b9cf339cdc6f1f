package sessions

import (
	"encoding/json"
	"fmt"
	"testing"
)

// hexID is the n-th of distinct container IDs.
func hexID(n int) string { return fmt.Sprintf("%064x", n+1) }

// A container start sent from no session claims nothing, but is kept as
// the evidence `mcptrace orphans` lists a leaked container on: its
// client and uid, the newest start winning, across a restart, until the
// agent prunes it or a session claims the container.
func TestAStartFromNoSessionIsKeptForOrphansUntilPrunedOrClaimed(t *testing.T) {
	w := newWorld(t, Config{})
	id, other := containerID(1), containerID(2)
	client := w.dockerRun(initID, 500, alice, id)
	s, ok := w.tr.StartOf(id)
	if !ok || s.Client != client || s.ClientUID != alice || s.At == 0 {
		t.Fatalf("start of %s = %+v, %v; want client %v", id[:12], s, ok, client)
	}
	// A later start of the same container (docker start) is its start now.
	again := w.spawn(initID, 520, bob, "docker", "start", "-ai", id[:12])
	w.start(again, bob, id)
	if s, _ := w.tr.StartOf(id); s.Client != again || s.ClientUID != bob {
		t.Errorf("after a second start: %+v, want the newer client %v", s, again)
	}
	w.dockerRun(initID, 540, alice, other)

	var st TrackerState
	if b, err := json.Marshal(w.tr.Dump()); err != nil || json.Unmarshal(b, &st) != nil {
		t.Fatal(err)
	}
	tr, err := Restore(w.g, Config{}, testLogger(t), st)
	if err != nil {
		t.Fatal(err)
	}
	if s, ok := tr.StartOf(id); !ok || s.Client != again {
		t.Errorf("after a restart: %+v, %v", s, ok)
	}
	if n := tr.PruneStarts(func(s Start) bool { return s.ID == other }); n != 1 {
		t.Errorf("pruned %d, want 1", n)
	}
	if _, ok := tr.StartOf(id); ok {
		t.Error("a pruned start is still kept")
	}
	// A session's member starting it makes it the session's.
	w.tr = tr
	root := w.spawn(initID, 600, alice, "mcptrace", "run", "--session", "a", "--", "host")
	w.dockerRun(root, 610, alice, other)
	if _, ok := tr.StartOf(other); ok {
		t.Error("a container a session claimed is still an unclaimed start")
	}
	if st := tr.Stats(); st.ContainerStarts != 0 || st.Containers != 1 {
		t.Errorf("stats = %+v", st)
	}
}

// Starts are bounded per client uid and on the node; what is over is
// counted, never kept in place of another's.
func TestStartsFromNoSessionAreBoundedPerUID(t *testing.T) {
	w := newWorld(t, Config{})
	client := w.spawn(initID, 500, bob, "docker", "start", "x")
	for i := range MaxStartsPerUID + 3 {
		w.start(client, bob, hexID(i))
	}
	st := w.tr.Stats()
	if st.ContainerStarts != MaxStartsPerUID || st.StartsUnkept != 3 {
		t.Errorf("stats = %d kept, %d unkept; want %d and 3", st.ContainerStarts, st.StartsUnkept, MaxStartsPerUID)
	}
	w.dockerRun(initID, 600, alice, hexID(100000))
	if _, ok := w.tr.StartOf(hexID(100000)); !ok {
		t.Error("another uid's start was not kept once bob's were over the bound")
	}
}
