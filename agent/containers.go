package agent

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
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
// first process may start and still count as started by that request
// on that ground alone; a later one counts only with lateStart's proof.
const verifyWindow = 10 * time.Second

// containerInfo is what the engine said about a container, by its full
// ID.
type containerInfo struct {
	Image string
	Name  string
	// Init is the container's first process (its PID in this PID
	// namespace, start time from /proc or the graph), zero when not
	// running.
	Init    lineage.ID
	Running bool
}

// verdict is the judgement of one claim (one start request): whether
// that start started the instance of the container that ran when the
// engine was asked. It belongs to that start alone: another start of the
// same container, by the same client or anyone, is judged for itself.
type verdict struct {
	// ID is the container the request named, as the engine answered (a
	// name resolved when the start was judged).
	ID string
	// Init is the instance the start was judged against: the first
	// process that ran then; zero until judged.
	Init lineage.ID
	// Verified: Init started within verifyWindow after the request.
	// Final: judged for good (it was running when asked), so the engine
	// is not asked again but when its running state changes. Why says
	// why not verified.
	Verified bool
	Final    bool
	Why      string
	// listed is whether the engine's list showed the container running
	// when it was last asked about it.
	listed bool
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
	info     map[string]containerInfo      // by full container ID
	verdicts map[sessions.ClaimKey]verdict // by claim
	// The kernel's count of container requests it read and dropped
	// (sensor.RequestDrops), read each round: drops as last read,
	// dropsRead whether it was, droppedAt the boot time of the round
	// that saw it grow (or first read it above 0: when is not known).
	drops     uint64
	dropsRead bool
	droppedAt uint64
}

func newContainerState(socket string) *containerState {
	cs := &containerState{socket: socket, info: map[string]containerInfo{}, verdicts: map[sessions.ClaimKey]verdict{}}
	if socket != "" {
		cs.engine = containers.NewEngine(socket)
	}
	return cs
}

// containerStatus reports attribution and the engine.
func (a *Agent) containerStatus() api.ContainerStatus {
	cs := a.containers
	claims := a.tracker.Containers()
	at := a.attribution(claims)
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
		if why, _ := at.decide(c, nil); why != "" {
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
	a.readRequestDrops()
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
	// One list of the running containers a round; a claim is asked about
	// only when it is not judged for good or its container's running
	// state changed, and the starts no session sent are kept for running
	// containers only.
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
	listed := func(c sessions.Container) bool {
		if c.ID != "" {
			return running[c.ID]
		}
		for _, x := range list {
			if slices.Contains(x.Names, c.Ref) || strings.HasPrefix(x.ID, c.Ref) {
				return true
			}
		}
		return false
	}
	j := a.newJudge(ctx)
	for _, c := range claims {
		now := listed(c)
		cs.mu.Lock()
		v, judged := cs.verdicts[c.Key()]
		cs.mu.Unlock()
		if judged && v.listed == now && (v.Final || !now) {
			continue // judged for good, or not running: nothing changed since asked
		}
		if err := j.judge(c, now); errors.Is(err, containers.ErrUnreachable) {
			if ctx.Err() == nil {
				cs.setOff(a, offEngine, err.Error())
			}
			return
		}
	}
	// What no claim names any more is forgotten.
	claims = a.tracker.Containers()
	keys, ids := map[sessions.ClaimKey]bool{}, map[string]bool{}
	for _, c := range claims {
		keys[c.Key()] = true
		ids[c.ID] = true
	}
	cs.mu.Lock()
	for k, v := range cs.verdicts {
		if !keys[k] {
			delete(cs.verdicts, k)
		} else {
			ids[v.ID] = true
		}
	}
	for id := range cs.info {
		if !ids[id] {
			delete(cs.info, id)
		}
	}
	cs.mu.Unlock()
}

// judge asks the engine about claims and judges each start for itself,
// asking about each container at most once.
type judge struct {
	a     *Agent
	ctx   context.Context
	asked map[string]askResult // by what the claim's request named
	// named is, for lateStart, the claims by what each names (its full
	// ID, the container it was judged for, its name or ID prefix); made
	// at its first use, once a round.
	named map[string][]sessions.ClaimKey
	// prefixes are the names and ID prefixes among named's keys.
	prefixes []string
}

type askResult struct {
	x   containers.Container
	err error
}

func (a *Agent) newJudge(ctx context.Context) *judge {
	return &judge{a: a, ctx: ctx, asked: map[string]askResult{}}
}

// judge asks the engine about the container claim c names (its full ID,
// or, while unresolved, the name or ID prefix its request sent) and
// judges c's start against the instance that runs: c's verdict only,
// never another claim's. A container the engine does not have is
// forgotten (every claim on it, or this claim when its name names
// none). It returns the engine's error, nil when c was judged or
// forgotten.
func (j *judge) judge(c sessions.Container, listed bool) error {
	a, cs := j.a, j.a.containers
	ref := cmp.Or(c.ID, c.Ref)
	r, ok := j.asked[ref]
	if !ok {
		ictx, cancel := context.WithTimeout(j.ctx, 5*time.Second)
		r.x, r.err = cs.engine.Inspect(ictx, ref)
		cancel()
		j.asked[ref] = r
	}
	k := c.Key()
	switch {
	case errors.Is(r.err, containers.ErrNotFound) && c.ID != "":
		// Removed (--rm, docker rm): nothing is left to end.
		a.tracker.ForgetContainer(c.ID)
		return nil
	case errors.Is(r.err, containers.ErrNotFound):
		a.tracker.ForgetClaim(k) // a name that names no container
		return nil
	case errors.Is(r.err, containers.ErrUnreachable):
		return r.err
	case r.err != nil:
		// This claim's answer was unusable; the others are asked.
		cs.mu.Lock()
		v := cs.verdicts[k]
		v.Why = r.err.Error()
		cs.verdicts[k] = v
		cs.mu.Unlock()
		return r.err
	}
	info := containerInfo{Image: r.x.Image, Name: r.x.Name, Running: r.x.Running}
	if r.x.Running && r.x.Pid > 0 {
		info.Init = a.initOf(uint32(r.x.Pid))
	}
	late := ""
	if !info.Init.IsZero() && info.Init.Tick()*lineage.TickNS > c.At+uint64(verifyWindow) {
		late = j.lateStart(c, r.x)
	}
	cs.mu.Lock()
	cs.info[r.x.ID] = info
	old := cs.verdicts[k]
	v := judgeStart(old, c, r.x.ID, info, late)
	v.listed = listed
	cs.verdicts[k] = v
	cs.mu.Unlock()
	if v.Verified && !old.Verified {
		a.emitContainerStart(c, r.x.ID, r.x.Image)
	}
	if c.ID == "" && v.Final {
		// Resolved once, when it was judged: a name the engine gives
		// another container later changes nothing about this start.
		a.tracker.ResolveClaim(k, r.x.ID)
	}
	return nil
}

// judgeStart judges claim c's start against container id as the engine
// now runs it (x), given what was judged of that start before (v): a
// start counts only for the instance whose first process started within
// verifyWindow after the request, both on the kernel's boot clock, or
// later with lateStart's proof (late: why there is none, "" when there
// is). A start for a container already running (the engine answers 304
// and starts nothing) never counts, whoever sent it and whatever an
// earlier start of it was judged; one that counted stops counting once
// the container restarted.
func judgeStart(v verdict, c sessions.Container, id string, x containerInfo, late string) verdict {
	switch {
	case v.Final && v.ID != id:
		// Judged for another container (a claim restored from before
		// it was resolved): that judgement stands.
	case v.Final && v.Verified && !x.Init.IsZero() && !sameInstance(x.Init, v.Init):
		v.Verified = false
		v.Why = "it restarted since its client started it"
	case v.Final:
	case x.Init.IsZero():
		v.ID, v.Why = id, "not running"
	default:
		why := startedBy(x.Init, c.Client, c.At, late)
		v.ID, v.Init, v.Verified, v.Final, v.Why = id, x.Init, why == "", true, why
	}
	return v
}

// sameInstance reports whether two identities of a container's first
// process are the same process (to the clock tick /proc knows).
func sameInstance(a, b lineage.ID) bool { return a.PID == b.PID && a.Tick() == b.Tick() }

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
// process must have started after the request, within verifyWindow or
// later with lateStart's proof (late: why there is none). The first
// process's start is known to a clock tick (/proc), the request's to the
// nanosecond: the process counts as started after the request when its
// tick ends after it.
func startedBy(init, client lineage.ID, at uint64, late string) string {
	first := init.Tick() * lineage.TickNS
	switch {
	case first+lineage.TickNS <= at:
		return fmt.Sprintf("its first process (pid %d) started before its client's start request (pid %d): the request did not start it", init.PID, client.PID)
	case first > at+uint64(verifyWindow) && late != "":
		return fmt.Sprintf("its first process (pid %d) started %s after its client's start request, more than %s, and %s",
			init.PID, time.Duration(first-at).Round(time.Second), verifyWindow, late)
	}
	return ""
}

// lateStart says why claim c's start is not proven to have started the
// instance of container x that runs, given that its first process began
// more than verifyWindow after the request ("" when it is proven). An
// engine under load takes longer than the window: two hundred `docker
// run -i` at once on two cores took minutes
// (TestFirstDockerRunOfEverySessionAcrossARestartIsAttributed). The
// start then counts only when nothing else can have started that
// instance:
//   - it is the container's first: the engine says it never stopped and
//     its restart policy never restarted it;
//   - the container was created after the client began (docker run
//     creates it, then starts it);
//   - the client still runs: it waits for its start's answer, so it ran
//     from the request until the instance began;
//   - no other start of the container is known: no other claim, from any
//     session, names it, and no start from no session is kept for it;
//   - the kernel dropped no container request since this one was sent
//     (a start it dropped could be the one that started it).
//
// What no proof covers, within the window or after it: a start sent by
// a program the reader does not read (curl on the socket) while this one
// waited (docs/ARCHITECTURE.md, Containers a session started).
func (j *judge) lateStart(c sessions.Container, x containers.Container) string {
	a := j.a
	if !x.FinishedAt.IsZero() || x.RestartCount > 0 {
		return "it ran before: that instance is not known to be the start's"
	}
	now, wall := procfs.BootTimeNow(), time.Now()
	if age := wall.Sub(x.Created); x.Created.IsZero() || age < 0 || uint64(age) >= now || now-uint64(age) <= c.Client.Start {
		return "it was created before its client began"
	}
	if st, err := procfs.ReadStat(a.opts.ProcRoot, c.Client.PID); err != nil || st.StartTicks != c.Client.Tick() {
		return "its client is gone: it did not wait for that instance"
	}
	if len(a.tracker.StartsOf(x.ID)) > 0 {
		return "a start of it from no session is known"
	}
	cs := a.containers
	if j.named == nil {
		j.named = map[string][]sessions.ClaimKey{}
		all := a.tracker.Containers()
		cs.mu.Lock()
		for _, o := range all {
			k := o.Key()
			for _, ref := range []string{o.ID, o.Ref, cs.verdicts[k].ID} {
				if ref != "" && !slices.Contains(j.named[ref], k) {
					j.named[ref] = append(j.named[ref], k)
				}
			}
			if o.Ref != "" && !containers.ValidID(o.Ref) {
				j.prefixes = append(j.prefixes, o.Ref) // a name, or an ID prefix
			}
		}
		cs.mu.Unlock()
	}
	k := c.Key()
	for ref, keys := range map[string][]sessions.ClaimKey{x.ID: j.named[x.ID], x.Name: j.named[x.Name]} {
		if ref != "" && slices.ContainsFunc(keys, func(o sessions.ClaimKey) bool { return o != k }) {
			return "another start of it is known"
		}
	}
	for _, ref := range j.prefixes {
		if strings.HasPrefix(x.ID, ref) && slices.ContainsFunc(j.named[ref], func(o sessions.ClaimKey) bool { return o != k }) {
			return "another start of it is known"
		}
	}
	cs.mu.Lock()
	read, droppedAt := cs.dropsRead, cs.droppedAt
	cs.mu.Unlock()
	switch {
	case !read:
		return "the kernel's count of dropped requests cannot be read"
	case droppedAt >= c.At:
		return "the kernel dropped container requests since it was sent"
	}
	return ""
}

// readRequestDrops reads the kernel's count of dropped container
// requests and notes when it grew (lateStart).
func (a *Agent) readRequestDrops() {
	var n uint64
	var err error = errors.New("no sensor")
	if a.sensor != nil {
		var node, overUID uint64
		node, overUID, err = a.sensor.RequestDrops()
		n = node + overUID
	}
	now := procfs.BootTimeNow()
	cs := a.containers
	cs.mu.Lock()
	defer cs.mu.Unlock()
	switch {
	case err != nil:
		cs.dropsRead = false
		return
	case !cs.dropsRead && n > 0, cs.dropsRead && n != cs.drops:
		// First read above 0 (dropped before this agent counted them,
		// when is not known), or grown since the last round.
		cs.droppedAt = now
	}
	cs.drops, cs.dropsRead = n, true
}

// attribution is, at one moment, which claims' starts started what the
// engine runs: per container, the claims verified for its current
// instance, and whether a start from no session may have started it.
type attribution struct {
	verdicts map[sessions.ClaimKey]verdict
	info     map[string]containerInfo
	started  map[string][]sessions.ClaimKey // by full container ID
	outside  map[string]bool                // by full container ID
}

// attribution judges claims with what the engine said so far, and the
// starts from no session the tracker keeps (sessions.Start): one sent
// within verifyWindow before the first process of an instance a claim
// started may have started it as well.
func (a *Agent) attribution(claims []sessions.Container) attribution {
	cs := a.containers
	cs.mu.Lock()
	at := cs.attributionLocked(claims)
	cs.mu.Unlock()
	for id, keys := range at.started {
		init := at.info[id].Init
		if init.IsZero() {
			init = at.verdicts[keys[0]].Init // stopped: the instance its start started
		}
		for _, st := range a.tracker.StartsOf(id) {
			if startedBy(init, st.Client, st.At, "no start from no session counts later") == "" {
				at.outside[id] = true
			}
		}
	}
	return at
}

// attributionLocked is attribution; cs.mu is held.
func (cs *containerState) attributionLocked(claims []sessions.Container) attribution {
	at := attribution{verdicts: map[sessions.ClaimKey]verdict{}, info: map[string]containerInfo{}, started: map[string][]sessions.ClaimKey{}, outside: map[string]bool{}}
	for _, c := range claims {
		k := c.Key()
		v, ok := cs.verdicts[k]
		if !ok {
			continue
		}
		at.verdicts[k] = v
		info, known := cs.info[v.ID]
		if known {
			at.info[v.ID] = info
		}
		// A start counts for the instance it started, while that one
		// runs (or nothing runs: a stopped container has no other).
		if v.Verified && (info.Init.IsZero() || sameInstance(info.Init, v.Init)) {
			at.started[v.ID] = append(at.started[v.ID], k)
		}
	}
	return at
}

// decide says why claim c does not make its container one that an
// ending of the claims within ends ("" when it does): its start must
// have started the instance that runs, and every other start that may
// have started it must be within too (nil within: c's own session's
// claims only; a start from elsewhere that may have started it, another
// session tree's or one from no session, makes the container no one's).
// pending: the engine was not asked about c yet.
func (at attribution) decide(c sessions.Container, within map[sessions.ClaimKey]bool) (why string, pending bool) {
	k := c.Key()
	v, ok := at.verdicts[k]
	switch {
	case !ok:
		return "unattributed: the container engine was not asked about it yet", true
	case !v.Verified:
		return "unattributed: " + v.Why, !v.Final
	case !slices.Contains(at.started[v.ID], k):
		return "unattributed: it restarted since its client started it", false
	case at.outside[v.ID]:
		return "unattributed: a start from no session may have started it", false
	}
	for _, o := range at.started[v.ID] {
		if o != k && (within == nil || !within[o]) {
			return "unattributed: started from two sessions", false
		}
	}
	return "", false
}

// endingContainers turns the claims an ending ends into what the
// enforcer ends, one per container: stopped when a claim's start started
// the instance that runs and no start from outside the ending may have,
// else recorded unattributed with the reason. A claim not judged for good
// is asked about now.
func (a *Agent) endingContainers(ctx context.Context, claims []sessions.Container) []enforcer.Container {
	if a.containers.engine != nil {
		j := a.newJudge(ctx)
		for _, c := range claims {
			a.containers.mu.Lock()
			v := a.containers.verdicts[c.Key()]
			a.containers.mu.Unlock()
			if v.Final {
				continue
			}
			// Asked now: a container that restarted since it was
			// verified is not the one its client's request started.
			if err := j.judge(c, v.listed); errors.Is(err, containers.ErrUnreachable) {
				break // the rest are not asked: each would wait as long
			}
		}
	}
	all := a.tracker.Containers()
	at := a.attribution(all)
	within := make(map[sessions.ClaimKey]bool, len(claims))
	for _, c := range claims {
		within[c.Key()] = true
	}
	live := make(map[sessions.ClaimKey]bool, len(all))
	for _, c := range all {
		live[c.Key()] = true
	}
	var out []enforcer.Container
	index := map[string]int{} // container → its entry in out
	for _, c := range claims {
		k := c.Key()
		if !live[k] {
			continue // forgotten since: the engine does not have it
		}
		v := at.verdicts[k]
		id := cmp.Or(v.ID, c.ID, c.Ref)
		why, _ := at.decide(c, within)
		ec := enforcer.Container{ID: id, Image: at.info[id].Image, Init: v.Init, UID: c.ClientUID, Groups: c.ClientGroups, Unattributed: why}
		if c.ClientUID == c.Owner {
			ec.OwnerGroups = c.ClientGroups
		}
		if ec.Init.IsZero() {
			ec.Init = at.info[id].Init
		}
		i, seen := index[id]
		switch {
		case !seen:
			index[id] = len(out)
			out = append(out, ec)
		case out[i].Unattributed != "":
			out[i] = ec // a later start of it: the one that counts, if any does
		}
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

func (s engineStopper) MayStop(uid uint32, groups []uint32) (bool, string) {
	return mayUseEngine(s.a.containers.socket, uid, groups, userGroups)
}

// sessionContainers is what the API shows of the containers a session's
// members started: one entry per container, its start that counts when
// one does, else its latest.
func (a *Agent) sessionContainers(s sessions.Session) []api.Container {
	claims := a.tracker.ContainersIn(s)
	at := a.attribution(a.tracker.Containers())
	within := make(map[sessions.ClaimKey]bool, len(claims))
	for _, c := range claims {
		within[c.Key()] = true
	}
	var out []api.Container
	index := map[string]int{}
	for _, c := range claims {
		v := at.verdicts[c.Key()]
		id := cmp.Or(v.ID, c.ID, c.Ref)
		info := at.info[id]
		x := api.Container{ID: id, Client: c.Client, ClientUID: c.ClientUID, Name: cmp.Or(info.Name, c.Ref), Image: info.Image, Init: info.Init, Running: info.Running}
		switch why, pending := at.decide(c, within); {
		case pending:
			x.Attribution = "pending"
		case why != "":
			x.Attribution = why
		default:
			x.Attribution = "attributed"
		}
		i, seen := index[id]
		switch {
		case !seen:
			index[id] = len(out)
			out = append(out, x)
		case out[i].Attribution != "attributed":
			out[i] = x
		}
	}
	return out
}
