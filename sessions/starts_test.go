package sessions

import (
	"encoding/json"
	"fmt"
	"testing"
)

// hexID is the n-th of distinct container IDs.
func hexID(n int) string { return fmt.Sprintf("%064x", n+1) }

// A container start sent from no session claims nothing, but is kept as
// the evidence `mcptrace orphans` lists a leaked container on: every
// client's, across a restart, until the agent prunes the
// container's; a later start never replaces an earlier client's (which
// one started the running instance is the agent's to tell), nor does a
// session's claim of the same container.
func TestStartsFromNoSessionAreKeptPerClientUntilPruned(t *testing.T) {
	w := newWorld(t, Config{})
	id, other := containerID(1), containerID(2)
	client := w.dockerRun(initID, 500, alice, id)
	if got := w.tr.StartsOf(id); len(got) != 1 || got[0].Client != client || got[0].ClientUID != alice || got[0].At == 0 {
		t.Fatalf("starts of %s = %+v; want client %v", id[:12], got, client)
	}
	// Another client's start of the same container (docker start -ai) is
	// kept beside it, in the order they were sent.
	again := w.spawn(initID, 520, bob, "docker", "start", "-ai", id[:12])
	w.start(again, bob, id)
	if got := w.tr.StartsOf(id); len(got) != 2 || got[0].Client != client || got[1].Client != again {
		t.Errorf("after bob's start: %+v, want alice's then bob's", got)
	}
	// A session's member starting it claims it, and keeps what no
	// session sent: the claim may not verify.
	root := w.spawn(initID, 600, alice, "mcptrace", "run", "--session", "a", "--", "host")
	w.dockerRun(root, 610, alice, id)
	if got := w.tr.StartsOf(id); len(got) != 2 {
		t.Errorf("after a session's claim: %+v, want both kept", got)
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
	if got := tr.StartsOf(id); len(got) != 2 || got[1].Client != again {
		t.Errorf("after a restart: %+v", got)
	}
	if n := tr.PruneStarts(func(id string, _ uint64) bool { return id == other }); n != 1 {
		t.Errorf("pruned %d containers, want 1", n)
	}
	if got := tr.StartsOf(id); len(got) != 0 {
		t.Errorf("a pruned container's starts are still kept: %+v", got)
	}
	if st := tr.Stats(); st.ContainerStarts != 1 || !tr.HasStarts() {
		t.Errorf("stats = %+v", st)
	}
}

// Starts are bounded per container, per client uid and on the node;
// what is over is counted and never kept in place of what was kept.
func TestStartsFromNoSessionAreBounded(t *testing.T) {
	w := newWorld(t, Config{})
	client := w.spawn(initID, 500, bob, "docker", "start", "x")
	for i := range MaxStartsPerUID + 3 {
		w.start(client, bob, hexID(i))
	}
	st := w.tr.Stats()
	if st.ContainerStarts != MaxStartsPerUID || st.StartsUnkept != 3 {
		t.Errorf("stats = %d kept, %d unkept; want %d and 3", st.ContainerStarts, st.StartsUnkept, MaxStartsPerUID)
	}
	// bob at his bound: a start of another container by bob is not kept,
	// and alice's start of bob's first container is.
	w.dockerRun(initID, 600, alice, hexID(0))
	if got := w.tr.StartsOf(hexID(0)); len(got) != 2 {
		t.Errorf("alice's start beside bob's: %+v", got)
	}
	// Per container: distinct clients beyond the bound are not kept.
	id := hexID(100000)
	for i := range MaxStartsPerContainer + 2 {
		c := w.spawn(initID, uint32(700+i), alice, "docker", "start", id[:12])
		w.start(c, alice, id)
	}
	if got := w.tr.StartsOf(id); len(got) != MaxStartsPerContainer {
		t.Errorf("%d starts of one container kept, want %d", len(got), MaxStartsPerContainer)
	}
}
