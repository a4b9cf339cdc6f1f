package enforcer

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcptrace/mcptrace/lineage"
)

// scriptedEngine answers as told and records what it was asked: the
// enforcer's decisions are under test here, not an engine (the e2e tests
// stop real containers of a real dockerd).
type scriptedEngine struct {
	script
	mu      sync.Mutex
	stops   []string
	graces  []time.Duration
	cgroups []string
}

// script is what a scriptedEngine answers.
type script struct {
	stopErr error
	gone    bool
	cgroupN int
	cgroupE error
	mayStop bool
}

func (s *scriptedEngine) Stop(_ context.Context, c Container, grace time.Duration) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stops = append(s.stops, c.ID)
	s.graces = append(s.graces, grace)
	return s.gone, s.stopErr
}

func (s *scriptedEngine) KillCgroup(_ context.Context, c Container) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cgroups = append(s.cgroups, c.ID)
	return s.cgroupN, s.cgroupE
}

// engineGroup is the group of the scripted engine's socket.
const engineGroup = 999

func (s *scriptedEngine) MayStop(_ uint32, groups []uint32) (bool, string) {
	if s.mayStop || slices.Contains(groups, engineGroup) {
		return true, ""
	}
	return false, "uid 1000 may not use the container engine"
}

func TestContainerEndingsFollowPolicyAuthorityAndAttribution(t *testing.T) {
	const id = "5b1c9a3b1e2d4c5f6a7b8c9d0e1f2a3b4c5d6e7f8091a2b3c4d5e6f708192a3b"
	for _, tc := range []struct {
		name         string
		cfg          Config
		owner        uint32
		ownerOnly    bool
		c            Container
		eng          script
		result       string // prefix
		signal       string
		stops, cgrps int
		grace        time.Duration
	}{
		{name: "an attributed container is stopped with the grace period", cfg: Config{Grace: 3 * time.Second}, c: Container{ID: id},
			eng: script{mayStop: true}, result: ResultKilled, signal: SignalContainerStop, stops: 1, grace: 3 * time.Second},
		{name: "the immediate policy stops it with no grace", cfg: Config{Policy: PolicyImmediate}, c: Container{ID: id},
			eng: script{mayStop: true}, result: ResultKilled, signal: SignalContainerKill, stops: 1},
		{name: "a container already gone is no error", c: Container{ID: id}, eng: script{gone: true, mayStop: true},
			result: ResultExitedBeforeSignal, signal: SignalContainerStop, stops: 1, grace: DefaultGrace},
		{name: "an unattributed container is never stopped", c: Container{ID: id, Unattributed: "unattributed: started from two sessions"},
			eng: script{mayStop: true}, result: ResultRefused + ": unattributed"},
		{name: "audit mode stops nothing", cfg: Config{Mode: ModeAudit}, c: Container{ID: id}, eng: script{mayStop: true},
			result: ResultWouldKill, signal: SignalContainerStop},
		{name: "an owner who could not use the engine has nothing stopped", owner: 1000, c: Container{ID: id},
			eng: script{}, result: ResultSparedPrivilege},
		// The groups the kernel gave the processes (LDAP, setgroups at
		// exec), each checked for its own uid.
		{name: "an owner and a client whose groups hold the engine's may", owner: 1000,
			c:   Container{ID: id, UID: 1000, Groups: []uint32{1000, engineGroup}, OwnerGroups: []uint32{1000, engineGroup}},
			eng: script{}, result: ResultKilled, signal: SignalContainerStop, stops: 1, grace: DefaultGrace},
		{name: "a client's groups say nothing of another owner's", owner: 1000,
			c:   Container{ID: id, UID: 1001, Groups: []uint32{1001, engineGroup}},
			eng: script{}, result: ResultSparedPrivilege},
		{name: "an owner's groups say nothing of another client's", owner: 1000,
			c:   Container{ID: id, UID: 1001, OwnerGroups: []uint32{engineGroup}},
			eng: script{}, result: ResultSparedPrivilege},
		{name: "cross-uid stops a session's container for an owner who could not", cfg: Config{CrossUID: true}, owner: 1000,
			c: Container{ID: id}, eng: script{}, result: ResultKilled, signal: SignalContainerStop, stops: 1, grace: DefaultGrace},
		{name: "what a user asks to end directly stays within their authority whatever cross-uid says", cfg: Config{CrossUID: true},
			owner: 1000, ownerOnly: true, c: Container{ID: id, UID: 1000}, eng: script{}, result: ResultSparedPrivilege},
		{name: "what root asks to end directly needs no authority of the client's", owner: 0, ownerOnly: true,
			c: Container{ID: id, UID: 1000}, eng: script{}, result: ResultKilled, signal: SignalContainerStop, stops: 1, grace: DefaultGrace},
		{name: "a dry run says what the owner's authority would spare", cfg: Config{Mode: ModeAudit}, owner: 1000, ownerOnly: true,
			c: Container{ID: id, UID: 1000}, eng: script{}, result: ResultSparedPrivilege},
		{name: "root's sessions need no engine authority", owner: 0, c: Container{ID: id}, eng: script{},
			result: ResultKilled, signal: SignalContainerStop, stops: 1, grace: DefaultGrace},
		{name: "an engine that does not answer falls back to the cgroup", c: Container{ID: id, Init: lineage.ID{PID: 9, Start: 9}},
			eng: script{mayStop: true, stopErr: ErrEngineUnreachable, cgroupN: 2}, result: ResultKilled, signal: SignalCgroupKill,
			stops: 1, cgrps: 1, grace: DefaultGrace},
		{name: "a cgroup already empty counts as exited", c: Container{ID: id}, eng: script{mayStop: true, stopErr: ErrEngineUnreachable},
			result: ResultExitedBeforeSignal, signal: SignalCgroupKill, stops: 1, cgrps: 1, grace: DefaultGrace},
		{name: "an engine that refuses is a failure, not a reason to go around it", c: Container{ID: id},
			eng: script{mayStop: true, stopErr: errors.New("authorization denied by plugin")}, result: ResultFailed + ": authorization denied by plugin",
			signal: SignalContainerStop, stops: 1, grace: DefaultGrace},
		{name: "a client of another uid that could not use the engine has nothing stopped", owner: 0, c: Container{ID: id, UID: 1000},
			eng: script{}, result: ResultSparedPrivilege},
		{name: "both failing is a failure naming both", c: Container{ID: id},
			eng:    script{mayStop: true, stopErr: ErrEngineUnreachable, cgroupE: errors.New("no cgroup")},
			result: ResultFailed + ": engine: the container engine did not answer; cgroup: no cgroup", signal: SignalCgroupKill, stops: 1, cgrps: 1, grace: DefaultGrace},
	} {
		t.Run(tc.name, func(t *testing.T) {
			eng := &scriptedEngine{script: tc.eng}
			cfg := tc.cfg
			cfg.Containers = eng
			e := New(cfg, nil, slog.New(slog.DiscardHandler))
			en := Ending{Session: "s", Owner: tc.owner, OwnerOnly: tc.ownerOnly, Containers: func() []Container { return []Container{tc.c} }}
			recs := e.endContainers(context.Background(), &en, map[string]bool{}, func() time.Duration { return time.Millisecond })
			if len(recs) != 1 {
				t.Fatalf("records = %+v", recs)
			}
			r := recs[0]
			if !strings.HasPrefix(r.Result, tc.result) || r.Signal != tc.signal || r.Container != id || r.Comm != CommContainer {
				t.Errorf("record = %+v, want result %q signal %q", r, tc.result, tc.signal)
			}
			if len(eng.stops) != tc.stops || len(eng.cgroups) != tc.cgrps {
				t.Errorf("engine stops %v, cgroup kills %v; want %d and %d", eng.stops, eng.cgroups, tc.stops, tc.cgrps)
			}
			if tc.stops > 0 && eng.graces[0] != tc.grace {
				t.Errorf("grace %s, want %s", eng.graces[0], tc.grace)
			}
		})
	}
}
