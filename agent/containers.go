package agent

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/mcptrace/mcptrace/api"
	"github.com/mcptrace/mcptrace/containers"
	"github.com/mcptrace/mcptrace/enforcer"
	"github.com/mcptrace/mcptrace/lineage"
	"github.com/mcptrace/mcptrace/procfs"
	"github.com/mcptrace/mcptrace/sessions"
)

// Containers: the tracker holds which containers session members started
// (sessions.Container, from the requests the kernel reads); here the
// agent asks the engine about them, so that only a container proven to
// have been started after its client began is ever stopped, and stops
// them for the enforcer (engineStopper). The engine being missing or
// unreachable turns attribution off, said once, shown in status and
// metrics; it is asked again every containerCheckInterval.

// containerCheckInterval is how often claims are checked with the engine
// and an engine that was down is tried again.
const containerCheckInterval = time.Second

// verifyWindow is how long after its client's start request a container's
// first process may start and still count as started by that request.
const verifyWindow = 10 * time.Second

// containerInfo is what the engine said about a claimed container.
type containerInfo struct {
	Image string
	Name  string
	// Init is the container's first process (its PID in this PID
	// namespace, start time from /proc or the graph), zero when not
	// running.
	Init    lineage.ID
	Running bool
	// Verified: the engine has it and its first process started within
	// verifyWindow after the client's start request; Init is that process
	// (a container restarted since is not the one the request started).
	// Why says why not; Final: it never will be, so the engine is not
	// asked again.
	Verified bool
	Final    bool
	Why      string
}

// containerState is the engine and what it said.
type containerState struct {
	engine *containers.Engine // nil: no socket configured
	socket string

	mu      sync.Mutex
	up      bool
	version containers.Version
	off     string // why attribution is off ("" when on)
	// offClass is the kind of reason off holds (no hook, no engine, …):
	// a change of class is logged, a new message of the same class (a
	// timeout that took 5.01 s instead of 5.02 s) is not.
	offClass string
	info     map[string]containerInfo
}

func newContainerState(socket string) *containerState {
	cs := &containerState{socket: socket, info: map[string]containerInfo{}}
	if socket != "" {
		cs.engine = containers.NewEngine(socket)
	}
	return cs
}

// containerStatus reports attribution and the engine.
func (a *Agent) containerStatus() api.ContainerStatus {
	cs := a.containers
	claims := a.tracker.Containers()
	cs.mu.Lock()
	defer cs.mu.Unlock()
	st := api.ContainerStatus{Attribution: "on", Socket: cs.socket, Claimed: len(claims)}
	if cs.off != "" {
		st.Attribution, st.Reason = "off", cs.off
	}
	if cs.up {
		st.Engine, st.API = cs.version.Engine, cs.version.Using
	}
	for _, c := range claims {
		if i := cs.info[c.ID]; c.Contested || !i.Verified {
			st.Unattributed++
		}
	}
	return st
}

// Classes of the reasons container attribution is off (containerState.offClass).
const (
	offHook    = "hook"    // the kernel's request reader is not attached
	offConfig  = "config"  // no engine socket is configured
	offEngine  = "engine"  // the engine does not answer, or not as expected
	offVersion = "version" // the engine's API versions and ours do not meet
)

// setOff records why attribution is off (class "" when it is on) and logs
// a change of class once.
func (cs *containerState) setOff(a *Agent, class, why string) {
	cs.mu.Lock()
	changed := class != cs.offClass
	cs.off, cs.offClass = why, class
	if class != "" {
		cs.up = false
	}
	cs.mu.Unlock()
	switch {
	case !changed:
	case class == "":
		a.log.Info("container attribution is on", "engine_socket", cs.socket)
	default:
		a.log.Warn("container attribution is off: containers started by sessions are not ended with them", "reason", why)
	}
}

// watchContainers checks the engine and the claims until ctx ends.
func (a *Agent) watchContainers(ctx context.Context) {
	t := time.NewTicker(containerCheckInterval)
	defer t.Stop()
	for {
		a.checkContainers(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// checkContainers is one round of watchContainers.
func (a *Agent) checkContainers(ctx context.Context) {
	cs := a.containers
	if err := a.sensor.RequestsErr(); err != nil {
		cs.setOff(a, offHook, err.Error())
		return
	}
	if cs.engine == nil {
		cs.setOff(a, offConfig, "no container engine socket is configured (containers.engine-socket)")
		return
	}
	// The kernel knows the engine by its socket's inode, which a
	// restarted engine replaces.
	sockErr := a.sensor.SetEngineSockets([]string{cs.socket})
	cs.mu.Lock()
	up := cs.up
	cs.mu.Unlock()
	if !up {
		nctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		v, err := cs.engine.Negotiate(nctx)
		cancel()
		switch {
		case err != nil && errors.Is(err, containers.ErrUnreachable):
			cs.setOff(a, offEngine, err.Error())
			return
		case err != nil:
			cs.setOff(a, offVersion, err.Error())
			return
		case sockErr != nil:
			cs.setOff(a, offEngine, fmt.Sprintf("the engine answers, but its socket cannot be watched: %v", sockErr))
			return
		}
		cs.mu.Lock()
		cs.up, cs.version = true, v
		cs.mu.Unlock()
		cs.setOff(a, "", "")
	}
	claims := a.tracker.Containers()
	if len(claims) == 0 && !a.tracker.HasStarts() {
		return
	}
	// One list of the running containers a round; a claim is inspected
	// only when it is undecided or its running state changed, and the
	// starts no session sent are kept for running containers only.
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	list, err := cs.engine.List(lctx)
	cancel()
	if err != nil {
		if ctx.Err() == nil {
			cs.setOff(a, offEngine, err.Error())
		}
		return
	}
	running := make(map[string]bool, len(list))
	for _, x := range list {
		running[x.ID] = true
	}
	a.pruneStarts(running)
	live := map[string]bool{}
	for _, c := range claims {
		live[c.ID] = true
		cs.mu.Lock()
		old, known := cs.info[c.ID]
		cs.mu.Unlock()
		if known && (old.Final || old.Running == running[c.ID]) {
			continue // decided for good, or nothing changed since asked
		}
		info, err := a.inspectClaim(ctx, c, old)
		switch {
		case errors.Is(err, containers.ErrNotFound):
			// Removed (--rm, docker rm): nothing is left to end.
			a.tracker.ForgetContainer(c.ID)
			delete(live, c.ID)
			continue
		case errors.Is(err, containers.ErrUnreachable):
			if ctx.Err() == nil {
				cs.setOff(a, offEngine, err.Error())
			}
			return
		case err != nil:
			// This claim's answer was unusable; the others are asked.
			info = old
			info.Why = err.Error()
		}
		cs.mu.Lock()
		cs.info[c.ID] = info
		cs.mu.Unlock()
	}
	cs.mu.Lock()
	for id := range cs.info {
		if !live[id] {
			delete(cs.info, id)
		}
	}
	cs.mu.Unlock()
}

// inspectClaim asks the engine about a claimed container and verifies it
// against what was known (old): a container counts as the claim's only
// if its first process started within verifyWindow after the client's
// start request, both on the kernel's boot clock; one that restarted
// since is not the one the request started.
func (a *Agent) inspectClaim(ctx context.Context, c sessions.Container, old containerInfo) (containerInfo, error) {
	ictx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	x, err := a.containers.engine.Inspect(ictx, c.ID)
	if err != nil {
		return containerInfo{}, err
	}
	info := old
	info.Image, info.Name, info.Running, info.Init = x.Image, x.Name, x.Running, lineage.ID{}
	if x.Running && x.Pid > 0 {
		info.Init = a.initOf(uint32(x.Pid))
	}
	switch {
	case old.Verified && !info.Init.IsZero() && (info.Init.PID != old.Init.PID || info.Init.Tick() != old.Init.Tick()):
		info.Verified, info.Final = false, true
		info.Why = "it restarted since its client started it"
	case old.Verified:
		if info.Init.IsZero() {
			info.Init = old.Init // stopped: the cgroup fallback has nothing to do anyway
		}
	case info.Init.IsZero():
		info.Why = "not running"
	default:
		why := startedBy(info.Init, c.Client, c.At)
		info.Verified, info.Final, info.Why = why == "", why != "", why
	}
	return info, nil
}

// initOf is the identity of a container's first process, pid in this
// PID namespace: the graph's when it knows that process, else /proc's (to
// a clock tick); zero when it is gone.
func (a *Agent) initOf(pid uint32) lineage.ID {
	st, err := procfs.ReadStat(a.opts.ProcRoot, pid)
	if err != nil {
		return lineage.ID{}
	}
	if p, ok := a.graph.Lookup(pid); ok && p.ID.Tick() == st.StartTicks {
		return p.ID
	}
	return lineage.ID{PID: pid, Start: st.StartTicks * lineage.TickNS}
}

// startedBy says why a container whose first process is init was not
// started by client's start request at `at` ("" when it was): its first
// process must have started within verifyWindow after the request. The
// first process's start is known to a clock tick (/proc), the request's
// to the nanosecond: the process counts as started after the request
// when its tick ends after it.
func startedBy(init, client lineage.ID, at uint64) string {
	first := init.Tick() * lineage.TickNS
	switch {
	case first+lineage.TickNS <= at:
		return fmt.Sprintf("its first process (pid %d) started before its client's start request (pid %d): the request did not start it", init.PID, client.PID)
	case first > at+uint64(verifyWindow):
		return fmt.Sprintf("its first process (pid %d) started more than %s after its client's start request", init.PID, verifyWindow)
	}
	return ""
}

// containerInfoOf returns what the engine said about a claimed container.
func (a *Agent) containerInfoOf(id string) (containerInfo, bool) {
	a.containers.mu.Lock()
	defer a.containers.mu.Unlock()
	i, ok := a.containers.info[id]
	return i, ok
}

// endingContainers turns claims into what the enforcer ends: verified
// ones to stop, the rest recorded unattributed with the reason. A claim
// the engine was not asked about yet is asked now.
func (a *Agent) endingContainers(ctx context.Context, claims []sessions.Container) []enforcer.Container {
	var out []enforcer.Container
	ask := a.containers.engine != nil // until the engine fails to answer once
	for _, c := range claims {
		ec := enforcer.Container{ID: c.ID, UID: c.ClientUID}
		// Asked again now: a container that restarted since it was
		// verified is not the one its client's request started.
		info, ok := a.containerInfoOf(c.ID)
		if !info.Final && ask {
			ictx, cancel := context.WithTimeout(ctx, 2*time.Second)
			i, err := a.inspectClaim(ictx, c, info)
			cancel()
			switch {
			case errors.Is(err, containers.ErrNotFound):
				a.tracker.ForgetContainer(c.ID)
				continue
			case err == nil:
				info, ok = i, true
			case errors.Is(err, containers.ErrUnreachable):
				ask = false
			}
		}
		ec.Image, ec.Init = info.Image, info.Init
		if !ok {
			ec.Unattributed = "unattributed: the container engine was never reached to verify it"
		} else {
			ec.Unattributed = unattributed(c, info)
		}
		out = append(out, ec)
	}
	return out
}

// engineStopper is the enforcer's ContainerEngine: the engine's API, and
// the container's cgroup when the engine does not answer.
type engineStopper struct {
	a *Agent
}

func (s engineStopper) Stop(ctx context.Context, c enforcer.Container, grace time.Duration) (bool, error) {
	e := s.a.containers.engine
	if e == nil {
		return false, errors.New("no container engine socket is configured")
	}
	id := c.ID
	ictx, cancel := context.WithTimeout(ctx, 5*time.Second)
	x, err := e.Inspect(ictx, id)
	cancel()
	switch {
	case errors.Is(err, containers.ErrNotFound):
		return true, nil
	case err != nil:
		return false, engineErr(err)
	case !x.Running:
		return true, nil
	}
	// The engine stops by ID, with no condition: a container that
	// restarted since it was attributed is another instance, not stopped
	// (a restart between this check and the stop remains possible).
	if !c.Init.IsZero() {
		if cur := s.a.initOf(uint32(x.Pid)); cur.PID != c.Init.PID || cur.Tick() != c.Init.Tick() {
			return false, fmt.Errorf("container %s restarted since it was attributed (first process pid %d, was %d): not stopped", id[:12], x.Pid, c.Init.PID)
		}
	}
	err = e.Stop(ctx, id, grace)
	if errors.Is(err, containers.ErrNotFound) {
		return false, nil // removed once stopped (--rm)
	}
	return false, engineErr(err)
}

// engineErr marks an engine that did not answer as the enforcer knows it
// (enforcer.ErrEngineUnreachable): only then does it go around the engine.
func engineErr(err error) error {
	if errors.Is(err, containers.ErrUnreachable) {
		return fmt.Errorf("%w: %w", enforcer.ErrEngineUnreachable, err)
	}
	return err
}

func (s engineStopper) KillCgroup(ctx context.Context, c enforcer.Container) (int, error) {
	if c.Init.PID == 0 {
		return 0, errors.New("its first process is not known")
	}
	st, err := procfs.ReadStat(s.a.opts.ProcRoot, c.Init.PID)
	if err != nil || st.StartTicks != c.Init.Tick() {
		// Stopped, or restarted with another first process: its cgroup
		// is not found by guessing.
		return 0, fmt.Errorf("its first process (pid %d) is gone: the container stopped or restarted", c.Init.PID)
	}
	dir, err := containers.CgroupDir(int(c.Init.PID), c.ID)
	if err != nil {
		return 0, err
	}
	return containers.CgroupKill(dir)
}

func (s engineStopper) MayStop(uid uint32) (bool, string) {
	return mayUseEngine(s.a.containers.socket, uid, userGroups)
}

// sessionContainers is what the API shows of the containers a session's
// members started.
func (a *Agent) sessionContainers(s sessions.Session) []api.Container {
	var out []api.Container
	for _, c := range a.tracker.ContainersIn(s) {
		info, ok := a.containerInfoOf(c.ID)
		v := api.Container{ID: c.ID, Client: c.Client, ClientUID: c.ClientUID, Name: info.Name, Image: info.Image, Init: info.Init, Running: info.Running}
		switch why := unattributed(c, info); {
		case !ok && !c.Contested:
			v.Attribution = "pending"
		case why != "":
			v.Attribution = why
		default:
			v.Attribution = "attributed"
		}
		out = append(out, v)
	}
	return out
}

// unattributed says why a claim the engine was asked about is not ended
// with its session ("" when it is).
func unattributed(c sessions.Container, info containerInfo) string {
	switch {
	case c.Contested:
		return "unattributed: started from two sessions"
	case !info.Verified:
		return "unattributed: " + info.Why
	}
	return ""
}
