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

func TestAContainerStartedFromTwoSessionTreesIsEndedByNeither(t *testing.T) {
	w := newWorld(t, Config{})
	a := w.spawn(initID, 600, alice, "mcptrace", "run", "--session", "a", "--", "host")
	b := w.spawn(initID, 700, alice, "mcptrace", "run", "--session", "b", "--", "host")
	id := containerID(4)
	w.dockerRun(a, 610, alice, id)
	w.dockerRun(b, 710, alice, id)
	for _, s := range []string{"a", "b"} {
		if got := w.tr.ContainersOf(w.session(s)); len(got) != 0 {
			t.Errorf("session %s ends %v, want nothing (contested)", s, containerIDs(got))
		}
		if got := w.tr.ContainersIn(w.session(s)); len(got) != 1 || !got[0].Contested {
			t.Errorf("session %s shows %+v, want its claim marked contested", s, got)
		}
	}
	if st := w.tr.Stats(); st.ContainersContested != 1 {
		t.Errorf("stats = %+v", st)
	}
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
	back.Containers = append(back.Containers, Container{ID: "not-an-id", Client: lineage.ID{PID: 9, Start: 9}, Below: []Anchor{{Root: a}}})
	tr, err := Restore(w.g, Config{}, testLogger(t), back)
	if err != nil {
		t.Fatal(err)
	}
	s, _ := tr.Find("a")
	if got := containerIDs(tr.ContainersOf(s)); !slices.Equal(got, []string{id}) {
		t.Errorf("restored containers of a = %v, want [%s]", got, id)
	}
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
	if got := w.tr.ContainersOf(w.session("b")); len(got) != 1 || got[0].Contested || got[0].Top != b {
		t.Errorf("containers of b = %+v, want the reused container, uncontested", got)
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
