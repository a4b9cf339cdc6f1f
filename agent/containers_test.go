package agent

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/mcptrace/mcptrace/containers"
	"github.com/mcptrace/mcptrace/internal/testenv"
	"github.com/mcptrace/mcptrace/lineage"
	"github.com/mcptrace/mcptrace/sessions"
)

// A start is judged for itself, against the instance that runs: a start
// sent after that instance began (the engine answered 304 and started
// nothing) never counts, whatever was judged of an earlier start of the
// same container; one that counted stops counting once the container
// restarted.
func TestEveryStartIsJudgedForTheInstanceItStarted(t *testing.T) {
	const noProof = "no proof of a late start"
	const id = "3f1c9a3b1e2d4c5f6a7b8c9d0e1f2a3b4c5d6e7f8091a2b3c4d5e6f708192a3b"
	sec := uint64(1e9)
	first := lineage.ID{PID: 500, Start: 100 * sec} // the instance that runs
	claim := func(pid uint32, at uint64) sessions.Container {
		return sessions.Container{ID: id, Client: lineage.ID{PID: pid, Start: sec}, At: at}
	}
	running := containerInfo{Running: true, Init: first}
	starter := claim(10, 100*sec-sec/2) // sent half a second before the first process began
	late := claim(20, 200*sec)          // sent for the running container: 304

	v := judgeStart(verdict{}, starter, id, running, noProof)
	if !v.Verified || !v.Final || v.Init != first {
		t.Errorf("the start that started it: %+v", v)
	}
	if w := judgeStart(verdict{}, late, id, running, noProof); w.Verified || !w.Final || !strings.Contains(w.Why, "before its client's start request") {
		t.Errorf("a start of what already ran: %+v", w)
	}
	if w := judgeStart(verdict{}, claim(30, 80*sec), id, running, noProof); w.Verified || !strings.Contains(w.Why, "started 20s after its client's start request, more than 10s, and "+noProof) {
		t.Errorf("a start long before it began: %+v", w)
	}
	if w := judgeStart(verdict{}, claim(30, 80*sec), id, running, ""); !w.Verified || !w.Final {
		t.Errorf("a start long before it began, with lateStart's proof: %+v", w)
	}
	if w := judgeStart(verdict{}, starter, id, containerInfo{}, noProof); w.Verified || w.Final {
		t.Errorf("judged while not running: %+v, want undecided", w)
	}
	if w := judgeStart(v, starter, id, containerInfo{Running: true, Init: lineage.ID{PID: 501, Start: 300 * sec}}, noProof); w.Verified || !w.Final {
		t.Errorf("after a restart: %+v, want no longer counted", w)
	}
	if w := judgeStart(v, starter, id, containerInfo{}, noProof); !w.Verified {
		t.Errorf("stopped since: %+v, want still counted (nothing else ran)", w)
	}

	// Which claims make the container an ending's: every start that
	// started what runs must be within the ending.
	other := claim(40, 100*sec-sec/4) // another tree's start, as early
	cs := &containerState{info: map[string]containerInfo{id: running}, verdicts: map[sessions.ClaimKey]verdict{
		starter.Key(): v,
		late.Key():    judgeStart(verdict{}, late, id, running, noProof),
	}}
	at := cs.attributionLocked([]sessions.Container{starter, late})
	if why, _ := at.decide(starter, map[sessions.ClaimKey]bool{starter.Key(): true}); why != "" {
		t.Errorf("the starter's session: %q, want attributed", why)
	}
	if why, _ := at.decide(late, map[sessions.ClaimKey]bool{late.Key(): true}); !strings.HasPrefix(why, "unattributed: its first process") {
		t.Errorf("the late sender's session: %q", why)
	}
	cs.verdicts[other.Key()] = judgeStart(verdict{}, other, id, running, noProof)
	at = cs.attributionLocked([]sessions.Container{starter, late, other})
	if why, _ := at.decide(starter, map[sessions.ClaimKey]bool{starter.Key(): true}); why != "unattributed: started from two sessions" {
		t.Errorf("two trees' starts may both have started it: %q", why)
	}
	if why, _ := at.decide(starter, map[sessions.ClaimKey]bool{starter.Key(): true, other.Key(): true}); why != "" {
		t.Errorf("an ending holding both starts: %q, want attributed", why)
	}
	if why, pending := at.decide(claim(50, 0), nil); !pending || why == "" {
		t.Errorf("a claim not judged yet: %q pending %v", why, pending)
	}
}

// A start from no session (kept by the tracker for orphans) that may
// have started the instance a claim's start started makes the container
// no one's, as another session's start does; one sent long before that
// instance began changes nothing.
func TestAStartFromNoSessionThatMayHaveStartedTheContainerMakesItNoOnes(t *testing.T) {
	const id = "3f1c9a3b1e2d4c5f6a7b8c9d0e1f2a3b4c5d6e7f8091a2b3c4d5e6f708192a3b"
	sec := uint64(1e9)
	g := lineage.New(lineage.Config{})
	g.Seed([]lineage.Snapshot{{ID: lineage.ID{PID: 1}, Comm: "systemd", Filename: "/usr/lib/systemd/systemd", Argv: []string{"/sbin/init"}}}, 1)
	tr, err := sessions.NewTracker(g, sessions.Config{}, testenv.Logger(t, slog.LevelDebug))
	if err != nil {
		t.Fatal(err)
	}
	a := &Agent{tracker: tr, containers: newContainerState("")}
	first := lineage.ID{PID: 500, Start: 100 * sec}
	starter := sessions.Container{ID: id, Client: lineage.ID{PID: 10, Start: sec}, At: 100*sec - sec/2}
	a.containers.info[id] = containerInfo{Running: true, Init: first}
	a.containers.verdicts[starter.Key()] = judgeStart(verdict{}, starter, id, a.containers.info[id], "")
	decide := func() string {
		why, _ := a.attribution([]sessions.Container{starter}).decide(starter, nil)
		return why
	}
	if why := decide(); why != "" {
		t.Fatalf("the claim alone: %q, want attributed", why)
	}
	outside := func(pid uint32, at uint64) {
		tr.Observe(lineage.Event{Kind: lineage.KindRequest, Time: at, Proc: lineage.ID{PID: pid, Start: 2 * sec}, Comm: "docker", Request: containers.Request(id, containers.VerbStart)})
	}
	outside(20, 80*sec) // 20 s before the instance began: not its start
	if why := decide(); why != "" {
		t.Errorf("with a start from no session 20 s before: %q, want attributed", why)
	}
	outside(21, 100*sec-sec/4) // as early as the claim's
	if why := decide(); why != "unattributed: a start from no session may have started it" {
		t.Errorf("with a start from no session as early: %q", why)
	}
}
