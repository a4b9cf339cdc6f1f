package sessions

import (
	"cmp"
	"log/slog"
	"slices"

	"github.com/mcptrace/mcptrace/containers"
	"github.com/mcptrace/mcptrace/lineage"
)

// Containers: a container's processes are children of the engine's shim,
// not of the client that started it, so lineage alone never ties them to
// a session. The client names the container in its own request
// (lineage.KindRequest: `POST /containers/<id>/start`); a member of an
// active session that sends one claims the container for every session
// above it. Nothing here asks the engine anything: whether the container
// exists and was started after its client began is the agent's to check
// before anything is stopped.

// Bounds of the container claims. A claim beyond them is refused and
// counted (Stats.ContainersRefused): its container goes unattributed,
// never wrongly attributed.
const (
	// MaxContainers bounds the claims on the node.
	MaxContainers = 4096
	// MaxContainersPerUID bounds the claims of one session owner.
	MaxContainersPerUID = 512
)

// Container is a container a session member started.
type Container struct {
	// ID is the engine's full container ID (64 lowercase hex).
	ID string `json:"id"`
	// Client is the member that sent the start; ClientUID its uid then.
	Client    lineage.ID `json:"client"`
	ClientUID uint32     `json:"client_uid"`
	// At is when the kernel saw the request (CLOCK_BOOTTIME ns).
	At uint64 `json:"at_ns"`
	// Owner is the owner of the outermost session the claim belongs to,
	// Top that session's root.
	Owner uint32     `json:"owner_uid"`
	Top   lineage.ID `json:"top"`
	// Below are the roots of the active sessions above the client when it
	// sent the request, innermost first; a contested claim's are followed
	// by those of the other tree's client.
	Below []Anchor `json:"below"`
	// Contested: a member of another session tree claimed the same
	// container too. Which one started it is not certain, so neither
	// session ends it.
	Contested bool `json:"contested,omitempty"`
}

// Anchor places a claim below one session root: Child is the root's child
// the client descends from (what decides the claim's generation), zero
// when the client is the root itself.
type Anchor struct {
	Root        lineage.ID `json:"root"`
	Child       lineage.ID `json:"child,omitzero"`
	ChildCoarse bool       `json:"child_coarse,omitempty"`
}

// anchor returns the claim's anchor below root.
func (c *Container) anchor(root lineage.ID) (Anchor, bool) {
	for _, a := range c.Below {
		if a.Root == root {
			return a, true
		}
	}
	return Anchor{}, false
}

// clone returns c with a slice of its own.
func (c Container) clone() Container {
	c.Below = slices.Clone(c.Below)
	return c
}

// observeRequest takes a container start a process sent.
func (t *Tracker) observeRequest(ev lineage.Event) {
	id, _, ok := containers.ParseRequest(ev.Request)
	if !ok {
		return
	}
	chain := t.chain(ev.Proc)
	var below []Anchor
	for i, a := range chain {
		// An ended session counts too: a member may start a container
		// while its session's ending is under way (the enforcer looks
		// again once no member is left).
		s := t.rootSession(a, false)
		if s == nil {
			continue
		}
		an := Anchor{Root: s.Root}
		if i > 0 {
			an.Child = chain[i-1]
			if p, ok := t.g.Get(an.Child); ok {
				an.ChildCoarse = p.CoarseStart
			}
		}
		below = append(below, an)
	}
	if len(below) == 0 {
		t.st.containersIgnored++ // a start sent from no session
		t.addStart(Start{ID: id, Client: ev.Proc, ClientUID: ev.UID, At: ev.Time})
		return
	}
	top := below[len(below)-1].Root
	owner := uint32(0)
	if s := t.rootSession(top, false); s != nil {
		owner = s.Owner
	}
	claim := &Container{ID: id, Client: ev.Proc, ClientUID: ev.UID, At: ev.Time, Owner: owner, Top: top, Below: below}
	if old, ok := t.containers[id]; ok {
		switch {
		case old.Client == claim.Client && old.At == claim.At:
			return // the same request again (a replay, a duplicate record)
		case old.Top != top && t.rootSession(old.Top, true) == nil:
			// The session tree that started it before is over: this
			// start is the container's now (a container reused, as
			// docker compose up does).
			t.forgetContainer(id)
			t.addClaim(claim)
			return
		case old.Contested:
			return
		case old.Top != top:
			// Two session trees both started it: not certain, so
			// neither ends it.
			// Both trees show it, contested.
			old.Contested = true
			if len(old.Below)+len(below) <= maxAnchors {
				old.Below = append(old.Below, below...)
			}
			t.st.containersContested++
			t.logFor(owner, slog.LevelWarn, "a container was started from two sessions; neither ends it", "container", id[:12], "pid", ev.Proc.PID)
			return
		}
		// The same session tree started it again (docker restart, a
		// second docker start): the newer start decides its generation.
		claim.Owner = old.Owner
		t.containers[id] = claim
		return
	}
	t.addClaim(claim)
}

// addClaim keeps a new claim within the bounds; t.mu is held.
func (t *Tracker) addClaim(claim *Container) {
	owner := claim.Owner
	if len(t.containers) >= MaxContainers || t.containersPerUID[owner] >= MaxContainersPerUID {
		t.st.containersRefused++
		t.logFor(owner, slog.LevelWarn, "too many containers claimed; this one is not attributed", "container", claim.ID[:12], "owner_uid", owner)
		return
	}
	t.containers[claim.ID] = claim
	t.containersPerUID[owner]++
	t.st.containersClaimed++
}

// forgetContainer removes the claim on id; t.mu is held.
func (t *Tracker) forgetContainer(id string) {
	c, ok := t.containers[id]
	if !ok {
		return
	}
	delete(t.containers, id)
	if t.containersPerUID[c.Owner]--; t.containersPerUID[c.Owner] <= 0 {
		delete(t.containersPerUID, c.Owner)
	}
}

// ForgetContainer removes the claim on a container the engine no longer
// has (removed, or ended with its session).
func (t *Tracker) ForgetContainer(id string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.forgetContainer(id)
}

// dropContainersBelow forgets the claims whose outermost session is the
// one rooted at root, once it is forgotten; t.mu is held.
func (t *Tracker) dropContainersBelow(root lineage.ID) {
	for id, c := range t.containers {
		if c.Top == root {
			t.forgetContainer(id)
		}
	}
}

// Containers returns every claim, contested ones included, sorted by ID.
func (t *Tracker) Containers() []Container {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]Container, 0, len(t.containers))
	for _, c := range t.containers {
		out = append(out, c.clone())
	}
	slices.SortFunc(out, func(a, b Container) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

// ContainersIn returns the claims below session s (the instance: its
// root), contested ones included, sorted by the time of their start.
func (t *Tracker) ContainersIn(s Session) []Container {
	return t.containersWhere(s, func(Anchor) bool { return true })
}

// ContainersOf returns what the end of session s ends: the uncontested
// claims below its root.
func (t *Tracker) ContainersOf(s Session) []Container {
	return uncontested(t.ContainersIn(s))
}

// ContainersBefore returns what a destroy marker at cutoff ends of
// session s: the uncontested claims below a child of the root created
// before cutoff (as MembersBefore decides for processes). A container the
// root itself started belongs to the root and ends with the session.
func (t *Tracker) ContainersBefore(s Session, cutoff uint64) []Container {
	return uncontested(t.containersWhere(s, func(a Anchor) bool {
		if a.Child.IsZero() {
			return false
		}
		before, known := t.createdBefore(lineage.Process{ID: a.Child, CoarseStart: a.ChildCoarse}, cutoff)
		return before && known
	}))
}

func (t *Tracker) containersWhere(s Session, keep func(Anchor) bool) []Container {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []Container
	for _, c := range t.containers {
		if a, ok := c.anchor(s.Root); ok && keep(a) {
			out = append(out, c.clone())
		}
	}
	slices.SortFunc(out, func(a, b Container) int { return cmp.Or(cmp.Compare(a.At, b.At), cmp.Compare(a.ID, b.ID)) })
	return out
}

func uncontested(cs []Container) []Container {
	return slices.DeleteFunc(cs, func(c Container) bool { return c.Contested })
}

// restoreContainers puts saved claims back; invalid ones are left out.
func (t *Tracker) restoreContainers(cs []Container) {
	for _, c := range cs {
		if c.Top.IsZero() && len(c.Below) > 0 {
			c.Top = c.Below[len(c.Below)-1].Root
		}
		if !containers.ValidID(c.ID) || len(c.Below) == 0 || len(c.Below) > maxAnchors || c.Client.PID == 0 {
			t.log.Warn("saved container claim left out", "container", c.ID)
			continue
		}
		if _, dup := t.containers[c.ID]; dup || len(t.containers) >= MaxContainers || t.containersPerUID[c.Owner] >= MaxContainersPerUID {
			continue
		}
		c := c.clone()
		t.containers[c.ID] = &c
		t.containersPerUID[c.Owner]++
	}
}

// maxAnchors bounds the sessions a saved claim may be below: sessions
// nest as deep as creator chains go, far fewer in practice.
const maxAnchors = 64
