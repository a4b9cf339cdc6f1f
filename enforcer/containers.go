package enforcer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/mcptrace/mcptrace/lineage"
)

// Container is a container an ending ends: one a member of the session
// started, as the agent attributed it (sessions.Container) and the
// engine confirmed it.
type Container struct {
	// ID is the engine's full container ID; Image what it runs.
	ID    string
	Image string
	// Init is the container's first process as the agent found it, zero
	// when not known (then only the engine can stop it).
	Init lineage.ID
	// UID is the uid of the client that started it: who else may see the
	// record. Groups are that client's groups as the kernel held them
	// when it sent the start (nil: not known); OwnerGroups the groups of
	// a process of the ending's owner, where one was read (the client's,
	// when it ran as the owner). MayStop decides on them.
	UID         uint32
	Groups      []uint32
	OwnerGroups []uint32
	// Unattributed, when not "", says why the container is not proven to
	// be the session's (started from two sessions, or not started after
	// its client began): it is recorded refused and never stopped.
	Unattributed string
}

// ContainerEngine stops containers. It must be safe for concurrent use.
type ContainerEngine interface {
	// Stop has the engine stop the container: SIGTERM, then SIGKILL once
	// grace passed (0: SIGKILL at once), and returns once it stopped.
	// gone reports a container that was already stopped or removed: not
	// an error. A container whose first process is no longer c.Init (it
	// restarted since it was attributed) is not stopped: an error.
	Stop(ctx context.Context, c Container, grace time.Duration) (gone bool, err error)
	// KillCgroup kills the container's processes through its cgroup,
	// without the engine (cgroup.kill on v2, every pid of the cgroup,
	// each by pidfd, on v1); it returns how many it signalled.
	KillCgroup(ctx context.Context, c Container) (killed int, err error)
	// MayStop reports whether uid could stop the engine's containers
	// itself (root, a member of the socket's group, the owner of a
	// rootless engine's socket), given groups a process of uid held as
	// the kernel kept them (nil: none read); why says why not.
	MayStop(uid uint32, groups []uint32) (ok bool, why string)
}

// ErrEngineUnreachable is what a ContainerEngine's Stop wraps when the
// engine did not answer: only then are the container's processes killed
// through its cgroup. Any other error (the engine refused, an
// authorization plugin said no) is recorded as a failure.
var ErrEngineUnreachable = errors.New("the container engine did not answer")

// Signals of container records: what was asked of whom.
const (
	SignalContainerStop = "engine stop"    // SIGTERM, SIGKILL after the grace
	SignalContainerKill = "engine kill"    // stop with no grace: SIGKILL
	SignalCgroupKill    = "cgroup SIGKILL" // the engine did not answer
	// CommContainer is the Comm of a container's record.
	CommContainer = "container"
)

// maxContainerStops bounds the containers one ending stops at once.
const maxContainerStops = 8

// endContainers ends what en.Containers returns, but the containers in
// done, and returns one record per container ended, in that order, adding
// their IDs to done. latency measures from the ending's time.
func (e *Enforcer) endContainers(ctx context.Context, en *Ending, done map[string]bool, latency func() time.Duration) []KillRecord {
	if en.Containers == nil {
		return nil
	}
	cs := slices.DeleteFunc(en.Containers(), func(c Container) bool { return done[c.ID] })
	for _, c := range cs {
		done[c.ID] = true
	}
	recs := make([]KillRecord, len(cs))
	var wg sync.WaitGroup
	sem := make(chan struct{}, maxContainerStops)
	for i, c := range cs {
		recs[i] = KillRecord{
			Session: en.Session, Generation: en.Generation, Owner: en.Owner,
			Process: c.Init, UID: c.UID, Comm: CommContainer, Container: c.ID, Argv: []string{c.Image},
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			e.endContainer(ctx, en, c, &recs[i], latency)
		}()
	}
	wg.Wait()
	return recs
}

func (e *Enforcer) endContainer(ctx context.Context, en *Ending, c Container, rec *KillRecord, latency func() time.Duration) {
	defer func() {
		rec.At = time.Now()
		e.logRecord(*rec, "container", short(c.ID), "image", c.Image)
	}()
	grace, signal := e.cfg.Grace, SignalContainerStop
	if e.cfg.Policy == PolicyImmediate {
		grace, signal = 0, SignalContainerKill
	}
	if c.Unattributed != "" {
		rec.Result = ResultRefused + ": " + c.Unattributed
		return
	}
	if e.cfg.Containers != nil && (!e.cfg.CrossUID || en.OwnerOnly) {
		// The session's owner, and the client that started it, must
		// each be able to use the engine themselves; what a user asks
		// to end directly (OwnerOnly) needs that user's authority alone.
		type who struct {
			uid    uint32
			groups []uint32
		}
		whos := []who{{en.Owner, c.OwnerGroups}, {c.UID, c.Groups}}
		if en.OwnerOnly {
			whos = whos[:1]
		}
		for _, w := range whos {
			if w.uid == 0 {
				continue
			}
			if ok, why := e.cfg.Containers.MayStop(w.uid, w.groups); !ok {
				rec.Result = ResultSparedPrivilege + ": " + why
				return
			}
		}
	}
	switch {
	case e.cfg.Mode == ModeAudit:
		rec.Signal, rec.Result = signal, ResultWouldKill
		return
	case e.cfg.Containers == nil:
		rec.Result = ResultFailed + ": no container engine is configured"
		return
	}
	rec.Signal = signal
	gone, err := e.cfg.Containers.Stop(ctx, c, grace)
	switch {
	case err == nil && gone:
		rec.Result = ResultExitedBeforeSignal
		return
	case err == nil:
		rec.Result, rec.Latency = ResultKilled, latency()
		return
	case ctx.Err() != nil:
		rec.Result = ResultFailed + ": interrupted: " + err.Error()
		return
	case !errors.Is(err, ErrEngineUnreachable):
		rec.Result = ResultFailed + ": " + err.Error()
		return
	}
	e.log.Warn("the container engine did not stop a container; killing its processes through its cgroup", "session", en.Session, "container", short(c.ID), "err", err)
	rec.Signal = SignalCgroupKill
	n, kerr := e.cfg.Containers.KillCgroup(ctx, c)
	switch {
	case kerr != nil:
		rec.Result = fmt.Sprintf("%s: engine: %v; cgroup: %v", ResultFailed, err, kerr)
	case n == 0:
		rec.Result = ResultExitedBeforeSignal
	default:
		rec.Result, rec.Latency = ResultKilled, latency()
	}
}

// short is a container ID as docker shows it.
func short(id string) string { return id[:min(len(id), 12)] }
