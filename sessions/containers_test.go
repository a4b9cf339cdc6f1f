package sessions

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/mcptrace/mcptrace/containers"
	"github.com/mcptrace/mcptrace/lineage"
)

func containerID(n byte) string { return strings.Repeat(string("0123456789abcdef"[n%16]), 63) + "1" }

// dockerRun starts sh -c → docker run below creator, and makes the
// client send the start of container id; it returns the client.
func (w *world) dockerRun(creator lineage.ID, pid, uid uint32, id string) lineage.ID {
	w.t.Helper()
	sh := w.spawn(creator, pid, uid, "sh", "-c", "docker run -i --rm img sleep 600")
	client := w.spawn(sh, pid+1, uid, "docker", "run", "-i", "--rm", "img", "sleep", "600")
	w.start(client, uid, id)
	return client
}

// start makes p send the engine request that starts container id.
func (w *world) start(p lineage.ID, uid uint32, id string) {
	w.t.Helper()
	if acts := w.observe(lineage.Event{Kind: lineage.KindRequest, Time: w.next(), Proc: p, UID: uid, Comm: "docker", Request: containers.Request(id, containers.VerbStart)}); len(acts) > 0 {
		w.t.Fatalf("a request ended something: %v", acts)
	}
}

func containerIDs(cs []Container) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.ID)
	}
	return out
}

func TestAContainerBelongsToTheSessionWhoseMemberStartedIt(t *testing.T) {
	w := newWorld(t, Config{})
	a := w.spawn(initID, 600, alice, "mcptrace", "run", "--session", "a", "--", "host")
	b := w.spawn(initID, 700, alice, "mcptrace", "run", "--session", "b", "--", "host")
	ca, cb := containerID(1), containerID(2)
	clientA := w.dockerRun(a, 610, alice, ca)
	w.dockerRun(b, 710, alice, cb)
	// A start sent from no session claims nothing.
	stray := w.spawn(initID, 800, alice, "docker", "start", "x")
	w.start(stray, alice, containerID(3))

	if got := containerIDs(w.tr.ContainersOf(w.session("a"))); !slices.Equal(got, []string{ca}) {
		t.Errorf("containers of a = %v, want [%s]", got, ca)
	}
	if got := containerIDs(w.tr.ContainersOf(w.session("b"))); !slices.Equal(got, []string{cb}) {
		t.Errorf("containers of b = %v, want [%s]", got, cb)
	}
	c := w.tr.ContainersOf(w.session("a"))[0]
	if c.Client != clientA || c.Owner != alice || c.ClientUID != alice || len(c.Below) != 1 || c.Below[0].Root != a {
		t.Errorf("claim = %+v", c)
	}
	if st := w.tr.Stats(); st.Containers != 2 || st.ContainersClaimed != 2 || st.ContainersIgnored != 1 {
		t.Errorf("stats = %+v", st)
	}
	// The client exiting (docker run -d) changes nothing.
	w.exit(clientA)
	if got := containerIDs(w.tr.ContainersOf(w.session("a"))); !slices.Equal(got, []string{ca}) {
		t.Errorf("after the client exited: containers of a = %v", got)
	}
}

// Two session trees both send a start of one container: each keeps its
// own claim, and neither's replaces the other's. Which start started what
// runs (and so whether either session ends it) is the agent's to judge,
// start by start.
func TestEveryStartIsAClaimOfItsOwn(t *testing.T) {
	w := newWorld(t, Config{})
	a := w.spawn(initID, 600, alice, "mcptrace", "run", "--session", "a", "--", "host")
	b := w.spawn(initID, 700, alice, "mcptrace", "run", "--session", "b", "--", "host")
	id := containerID(4)
	clientA := w.dockerRun(a, 610, alice, id)
	clientB := w.dockerRun(b, 710, alice, id)
	for s, client := range map[string]lineage.ID{"a": clientA, "b": clientB} {
		if got := w.tr.ContainersOf(w.session(s)); len(got) != 1 || got[0].Client != client || got[0].ID != id {
			t.Errorf("session %s ends %+v, want its own client's claim only", s, got)
		}
	}
	if st := w.tr.Stats(); st.ContainersContested != 1 || st.Containers != 2 {
		t.Errorf("stats = %+v", st)
	}
	// The same session starting it again keeps both of its starts, up to
	// MaxClaimsPerContainer, the newest kept.
	var last lineage.ID
	for i := range MaxClaimsPerContainer + 1 {
		last = w.dockerRun(a, uint32(620+10*i), alice, id)
	}
	got := w.tr.ContainersOf(w.session("a"))
	if len(got) != MaxClaimsPerContainer-1 || got[len(got)-1].Client != last || slices.ContainsFunc(got, func(c Container) bool { return c.Client == clientA }) {
		t.Errorf("session a's claims after %d more starts: %+v, want its newest %d beside b's", MaxClaimsPerContainer+1, got, MaxClaimsPerContainer-1)
	}
	// Another tree's starts never push b's out: at the bound, a third
	// tree's start is refused.
	c := w.spawn(initID, 800, alice, "mcptrace", "run", "--session", "c", "--", "host")
	w.dockerRun(c, 810, alice, id)
	if got := w.tr.ContainersOf(w.session("b")); len(got) != 1 {
		t.Errorf("b's claim after a's starts and c's: %+v", got)
	}
	if got := w.tr.ContainersOf(w.session("c")); len(got) != 0 {
		t.Errorf("c's start at the bound was kept: %+v", got)
	}
	// Forgetting the container forgets every claim on it.
	w.tr.ForgetContainer(id)
	if got := w.tr.Containers(); len(got) != 0 {
		t.Errorf("after ForgetContainer: %+v", got)
	}
}

// A start by name (docker start NAME) is a claim on what the name names
// when the agent judges it: until then it has no ID; once resolved it
// is forgotten with the container, whatever the name names later.
func TestAStartByNameIsResolvedOnceAndForgottenWithItsContainer(t *testing.T) {
	w := newWorld(t, Config{})
	a := w.spawn(initID, 600, alice, "mcptrace", "run", "--session", "a", "--", "host")
	client := w.spawn(a, 610, alice, "docker", "start", "svc")
	if acts := w.observe(lineage.Event{Kind: lineage.KindRequest, Time: w.next(), Proc: client, UID: alice, Comm: "docker",
		Request: containers.Request("svc", containers.VerbStart), Groups: []uint32{alice, 999}}); len(acts) > 0 {
		t.Fatalf("a request ended something: %v", acts)
	}
	got := w.tr.ContainersOf(w.session("a"))
	if len(got) != 1 || got[0].ID != "" || got[0].Ref != "svc" || !slices.Equal(got[0].ClientGroups, []uint32{alice, 999}) {
		t.Fatalf("claim = %+v, want one on svc, unresolved, with the client's groups", got)
	}
	k := got[0].Key()
	w.tr.ResolveClaim(k, "not an id")
	w.tr.ResolveClaim(k, containerID(5))
	w.tr.ResolveClaim(k, containerID(6)) // resolved once
	if got := w.tr.ContainersOf(w.session("a")); len(got) != 1 || got[0].ID != containerID(5) {
		t.Fatalf("after resolving: %+v", got)
	}
	back := dumpAndRestore(t, w)
	if got := containerIDs(back.Containers()); !slices.Equal(got, []string{containerID(5)}) {
		t.Errorf("restored: %v", got)
	}
	w.tr.ForgetContainer(containerID(5))
	if got := w.tr.Containers(); len(got) != 0 {
		t.Errorf("after ForgetContainer: %+v", got)
	}
	// A name the engine does not know is forgotten by its key.
	w.start(client, alice, "nosuch")
	got = w.tr.Containers()
	if len(got) != 1 || got[0].Ref != "nosuch" {
		t.Fatalf("claims = %+v", got)
	}
	w.tr.ForgetClaim(got[0].Key())
	if got := w.tr.Containers(); len(got) != 0 {
		t.Errorf("after ForgetClaim: %+v", got)
	}
}

// dumpAndRestore returns a tracker restored from w's saved state.
func dumpAndRestore(t *testing.T, w *world) *Tracker {
	t.Helper()
	b, err := json.Marshal(w.tr.Dump())
	if err != nil {
		t.Fatal(err)
	}
	var back TrackerState
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	tr, err := Restore(w.g, Config{}, testLogger(t), back)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

func TestAMarkerEndsTheOldGenerationsContainersAndSparesTheNewOnes(t *testing.T) {
	h := newMCPHost(t)
	old, neu, own := containerID(5), containerID(6), containerID(7)
	h.dockerRun(h.host, 900, alice, old)
	// The host itself starts one: it belongs to the root, not to a
	// generation.
	h.start(h.host, alice, own)
	_, acts := h.marker()
	wantEnded(t, acts, "h#1")
	cutoff := acts[0].Cutoff
	h.dockerRun(h.host, 950, alice, neu)

	if got := containerIDs(h.tr.ContainersBefore(h.session("h"), cutoff)); !slices.Equal(got, []string{old}) {
		t.Errorf("marker ends %v, want [%s]", got, old)
	}
	if got := containerIDs(h.tr.ContainersOf(h.session("h"))); len(got) != 3 {
		t.Errorf("the session's end ends %v, want all three", got)
	}
}

func TestContainersOfANestedSessionEndWithItAndWithTheEnclosingOne(t *testing.T) {
	w := newWorld(t, Config{})
	host := w.spawn(initID, 600, alice, "mcptrace", "run", "--session", "h", "--", "host")
	sub := w.spawn(host, 610, alice, "mcptrace", "exec", "--session", "srv", "--", "docker", "run", "img")
	w.exec(sub, alice, "docker", "run", "img")
	id := containerID(8)
	w.start(sub, alice, id)
	for _, s := range []string{"h", "srv"} {
		if got := containerIDs(w.tr.ContainersOf(w.session(s))); !slices.Equal(got, []string{id}) {
			t.Errorf("containers of %s = %v, want [%s]", s, got, id)
		}
	}
}

func TestContainerClaimsSurviveDumpAndRestoreAndEndWithTheirSession(t *testing.T) {
	w := newWorld(t, Config{})
	a := w.spawn(initID, 600, alice, "mcptrace", "run", "--session", "a", "--", "host")
	id := containerID(9)
	w.dockerRun(a, 610, alice, id)
	st := w.tr.Dump()
	b, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	var back TrackerState
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	// A claim no tracker could hold is left out.
	back.Containers = append(back.Containers, Container{ID: "not-an-id", Client: lineage.ID{PID: 9, Start: 9}, Below: []Anchor{{Root: a}}},
		Container{Ref: "svc", ID: "not-an-id", Client: lineage.ID{PID: 9, Start: 9}, Below: []Anchor{{Root: a}}})
	// One saved when a contested claim carried the other tree's anchors
	// after its own keeps its own only.
	other := lineage.ID{PID: 700, Start: 7}
	back.Containers = append(back.Containers, Container{ID: containerID(12), Client: lineage.ID{PID: 9, Start: 9}, Top: a, Below: []Anchor{{Root: a}, {Root: other}}})
	tr, err := Restore(w.g, Config{}, testLogger(t), back)
	if err != nil {
		t.Fatal(err)
	}
	s, _ := tr.Find("a")
	if got := containerIDs(tr.ContainersOf(s)); !slices.Equal(got, []string{containerID(12), id}) {
		t.Errorf("restored containers of a = %v, want [%s %s] (by the time of their start)", got, containerID(12), id)
	}
	if got := tr.Containers(); len(got) != 2 || len(got[1].Below) != 1 && len(got[0].Below) != 1 {
		t.Errorf("restored claims %+v, want the legacy one below a alone", got)
	}
	tr.ForgetContainer(containerID(12))
	tr.ForgetContainer(id)
	if got := tr.Containers(); len(got) != 0 {
		t.Errorf("after ForgetContainer: %v", containerIDs(got))
	}
}

func TestContainerClaimsAreBoundedPerOwner(t *testing.T) {
	w := newWorld(t, Config{})
	a := w.spawn(initID, 600, alice, "mcptrace", "run", "--session", "a", "--", "host")
	client := w.spawn(a, 610, alice, "docker", "start")
	for i := range MaxContainersPerUID + 3 {
		id := strings.Repeat("a", 56) + strings.Repeat("0", 8-len(itoa(i))) + itoa(i)
		w.start(client, alice, id)
	}
	if st := w.tr.Stats(); st.Containers != MaxContainersPerUID || st.ContainersRefused != 3 {
		t.Errorf("containers %d refused %d, want %d and 3", st.Containers, st.ContainersRefused, MaxContainersPerUID)
	}
}

func itoa(i int) string {
	const digits = "0123456789"
	if i < 10 {
		return digits[i : i+1]
	}
	return itoa(i/10) + digits[i%10:i%10+1]
}

func TestAContainerReusedByALaterSessionIsThatSessionsOnce(t *testing.T) {
	w := newWorld(t, Config{})
	a := w.spawn(initID, 600, alice, "mcptrace", "run", "--session", "a", "--", "host")
	id := containerID(10)
	w.dockerRun(a, 610, alice, id)
	w.exit(a) // session a ended; its container stopped, not removed
	b := w.spawn(initID, 700, alice, "mcptrace", "run", "--session", "b", "--", "host")
	client := w.spawn(b, 710, alice, "docker", "start", "x")
	w.start(client, alice, id) // docker compose up reuses it
	if got := w.tr.Containers(); len(got) != 1 || got[0].Top != b {
		t.Errorf("claims = %+v, want b's start of the reused container alone", got)
	}
}

func TestAStartSentWhileItsSessionEndsIsStillTheSessions(t *testing.T) {
	w := newWorld(t, Config{})
	a := w.spawn(initID, 600, alice, "mcptrace", "run", "--session", "a", "--", "host")
	sh := w.spawn(a, 610, alice, "sh", "-c", "docker run -d img")
	client := w.spawn(sh, 611, alice, "docker", "run", "-d", "img")
	w.exit(a) // the session ended; its ending is under way
	id := containerID(11)
	w.start(client, alice, id)
	if got := containerIDs(w.tr.ContainersOf(w.session("a"))); !slices.Equal(got, []string{id}) {
		t.Errorf("containers of the ended session = %v, want [%s]", got, id)
	}
}
