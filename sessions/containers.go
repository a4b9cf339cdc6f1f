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
// (lineage.KindRequest: `POST /containers/<ref>/start`); a member of a
// session that sends one makes a claim for every session above it. A
// claim is one start request and nothing more: every start is kept as a
// claim of its own (a few per container), and nothing here says which of
// them started the container that runs, or whether any did. That is the
// agent's to judge, claim by claim, with the engine: a start that started
// nothing (the container was already running) is no one's proof, and a
// verdict about one start is never carried over to another.

// Bounds of the container claims. A claim beyond them is refused and
// counted (Stats.ContainersRefused): its container goes unattributed,
// never wrongly attributed.
const (
	// MaxContainers bounds the claims on the node.
	MaxContainers = 4096
	// MaxContainersPerUID bounds the claims of one session owner.
	MaxContainersPerUID = 512
	// MaxClaimsPerContainer bounds the claims kept for what one request
	// named: a further start from a session tree makes that tree's oldest
	// go (its newest start is the one that can have started what runs),
	// and is refused when every claim kept is another tree's.
	MaxClaimsPerContainer = 4
)

// Container is a claim: one start request a session member sent.
type Container struct {
	// ID is the engine's full container ID (64 lowercase hex): what the
	// request named, or for a request that named a name or an ID prefix
	// (Ref), the container the agent found it named when it verified the
	// start (ResolveClaim); "" until then.
	ID string `json:"id"`
	// Ref is what the request named when that was not a full ID: a name
	// or an ID prefix (containers.ValidRef).
	Ref string `json:"ref,omitempty"`
	// Client is the member that sent the start; ClientUID its uid then,
	// ClientGroups its groups then, as the kernel held them
	// (lineage.Event.Groups; nil when they could not be read).
	Client       lineage.ID `json:"client"`
	ClientUID    uint32     `json:"client_uid"`
	ClientGroups []uint32   `json:"client_groups,omitempty"`
	// At is when the kernel saw the request (CLOCK_BOOTTIME ns).
	At uint64 `json:"at_ns"`
	// Owner is the owner of the outermost session the claim belongs to,
	// Top that session's root.
	Owner uint32     `json:"owner_uid"`
	Top   lineage.ID `json:"top"`
	// Below are the roots of the sessions above the client when it sent
	// the request, innermost first (Top last).
	Below []Anchor `json:"below"`
}

// ClaimKey names one claim: what its request named, who sent it, when.
type ClaimKey struct {
	Ref    string
	Client lineage.ID
	At     uint64
}

// Key is c's ClaimKey.
func (c *Container) Key() ClaimKey { return ClaimKey{Ref: c.ref(), Client: c.Client, At: c.At} }

// ref is what c's request named.
func (c *Container) ref() string { return cmp.Or(c.Ref, c.ID) }

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

// clone returns c with slices of its own.
func (c Container) clone() Container {
	c.Below = slices.Clone(c.Below)
	c.ClientGroups = slices.Clone(c.ClientGroups)
	return c
}

// observeRequest takes a container start a process sent.
func (t *Tracker) observeRequest(ev lineage.Event) {
	ref, _, ok := containers.ParseRequest(ev.Request)
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
		if containers.ValidID(ref) {
			t.addStart(Start{ID: ref, Client: ev.Proc, ClientUID: ev.UID, At: ev.Time})
		}
		return
	}
	top := below[len(below)-1].Root
	owner := uint32(0)
	if s := t.rootSession(top, false); s != nil {
		owner = s.Owner
	}
	claim := &Container{Client: ev.Proc, ClientUID: ev.UID, ClientGroups: slices.Clone(ev.Groups), At: ev.Time, Owner: owner, Top: top, Below: below}
	if containers.ValidID(ref) {
		claim.ID = ref
	} else {
		claim.Ref = ref
	}
	list := t.containers[ref]
	for _, old := range list {
		if old.Client == claim.Client && old.At == claim.At {
			return // the same request again (a replay, a duplicate record)
		}
	}
	other := false
	for _, old := range slices.Clone(list) {
		switch {
		case old.Top == top:
		case t.rootSession(old.Top, true) == nil:
			// The session tree that sent it is over: its claims can end
			// nothing any more (a container reused, as docker compose up
			// does).
			t.forgetClaim(old)
		default:
			other = true
		}
	}
	if other {
		// Two session trees both sent a start: only one that started
		// what runs can count, and if both can, neither does (the
		// agent judges).
		t.st.containersContested++
		t.logFor(owner, slog.LevelWarn, "a container was started from two sessions; only a start that started it counts", "container", ref[:min(len(ref), 12)], "pid", ev.Proc.PID)
	}
	if list := t.containers[ref]; len(list) >= MaxClaimsPerContainer {
		// The tree's own oldest start goes (its newest is the one that
		// can have started what runs); another tree's starts never make
		// room for this one's.
		i := slices.IndexFunc(list, func(o *Container) bool { return o.Top == top })
		if i < 0 {
			t.st.containersRefused++
			return
		}
		t.forgetClaim(list[i])
	}
	t.addClaim(claim)
}

// addClaim keeps a new claim within the bounds; t.mu is held.
func (t *Tracker) addClaim(claim *Container) {
	owner := claim.Owner
	if t.nContainers >= MaxContainers || t.containersPerUID[owner] >= MaxContainersPerUID {
		t.st.containersRefused++
		t.logFor(owner, slog.LevelWarn, "too many containers claimed; this one is not attributed", "container", claim.ref()[:min(len(claim.ref()), 12)], "owner_uid", owner)
		return
	}
	ref := claim.ref()
	t.containers[ref] = append(t.containers[ref], claim)
	t.nContainers++
	t.containersPerUID[owner]++
	t.st.containersClaimed++
}

// forgetClaim removes one claim; t.mu is held.
func (t *Tracker) forgetClaim(c *Container) {
	ref := c.ref()
	list := t.containers[ref]
	i := slices.Index(list, c)
	if i < 0 {
		return
	}
	list = slices.Delete(list, i, i+1)
	if len(list) == 0 {
		delete(t.containers, ref)
	} else {
		t.containers[ref] = list
	}
	t.nContainers--
	if t.containersPerUID[c.Owner]--; t.containersPerUID[c.Owner] <= 0 {
		delete(t.containersPerUID, c.Owner)
	}
}

// ForgetContainer removes every claim on container id (a full ID), by
// whatever name its request named it: the engine no longer has it
// (removed, or ended with its session).
func (t *Tracker) ForgetContainer(id string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, list := range t.containers {
		for _, c := range slices.Clone(list) {
			if c.ID == id {
				t.forgetClaim(c)
			}
		}
	}
}

// ForgetClaim removes the claim k: the container its request named is
// not there (a name the engine does not know).
func (t *Tracker) ForgetClaim(k ClaimKey) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if c := t.claim(k); c != nil {
		t.forgetClaim(c)
	}
}

// ResolveClaim records the container a claim's request named by name or
// ID prefix, as the agent found it when it judged the start: from then
// on the claim is about that container, whatever the name names later.
// A claim that named a full ID, or is resolved already, is left as it is.
func (t *Tracker) ResolveClaim(k ClaimKey, id string) {
	if !containers.ValidID(id) {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if c := t.claim(k); c != nil && c.Ref != "" && c.ID == "" {
		c.ID = id
	}
}

// claim returns the claim k; t.mu is held.
func (t *Tracker) claim(k ClaimKey) *Container {
	for _, c := range t.containers[k.Ref] {
		if c.Client == k.Client && c.At == k.At {
			return c
		}
	}
	return nil
}

// dropContainersBelow forgets the claims whose outermost session is the
// one rooted at root, once it is forgotten; t.mu is held.
func (t *Tracker) dropContainersBelow(root lineage.ID) {
	for _, list := range t.containers {
		for _, c := range slices.Clone(list) {
			if c.Top == root {
				t.forgetClaim(c)
			}
		}
	}
}

// Containers returns every claim, sorted by what they named, then by
// the time of their start.
func (t *Tracker) Containers() []Container {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]Container, 0, t.nContainers)
	for _, list := range t.containers {
		for _, c := range list {
			out = append(out, c.clone())
		}
	}
	slices.SortFunc(out, byRefThenTime)
	return out
}

func byRefThenTime(a, b Container) int {
	return cmp.Or(cmp.Compare(a.ref(), b.ref()), cmp.Compare(a.At, b.At), cmp.Compare(a.Client.PID, b.Client.PID))
}

// ContainersIn returns the claims below session s (the instance: its
// root), sorted by the time of their start.
func (t *Tracker) ContainersIn(s Session) []Container {
	return t.containersWhere(s, func(Anchor) bool { return true })
}

// ContainersOf returns the claims the end of session s ends: every
// claim below its root. Whether a claim's start started what runs, and
// whether another claim's did too, is the agent's to judge.
func (t *Tracker) ContainersOf(s Session) []Container {
	return t.ContainersIn(s)
}

// ContainersBefore returns the claims a destroy marker at cutoff ends
// of session s: those below a child of the root created before cutoff
// (as MembersBefore decides for processes). A container the root itself
// started belongs to the root and ends with the session.
func (t *Tracker) ContainersBefore(s Session, cutoff uint64) []Container {
	return t.containersWhere(s, func(a Anchor) bool {
		if a.Child.IsZero() {
			return false
		}
		before, known := t.createdBefore(lineage.Process{ID: a.Child, CoarseStart: a.ChildCoarse}, cutoff)
		return before && known
	})
}

func (t *Tracker) containersWhere(s Session, keep func(Anchor) bool) []Container {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []Container
	for _, list := range t.containers {
		for _, c := range list {
			if a, ok := c.anchor(s.Root); ok && keep(a) {
				out = append(out, c.clone())
			}
		}
	}
	slices.SortFunc(out, func(a, b Container) int { return cmp.Or(cmp.Compare(a.At, b.At), byRefThenTime(a, b)) })
	return out
}

// restoreContainers puts saved claims back; invalid ones are left out.
// A claim saved by an agent that kept one claim per container, marked
// contested, carries the other tree's anchors after its own: they are
// cut off (the other tree's start was not kept).
func (t *Tracker) restoreContainers(cs []Container) {
	for _, c := range cs {
		if c.Top.IsZero() && len(c.Below) > 0 {
			c.Top = c.Below[len(c.Below)-1].Root
		}
		if i := slices.IndexFunc(c.Below, func(a Anchor) bool { return a.Root == c.Top }); i >= 0 {
			c.Below = c.Below[:i+1]
		}
		validRef := c.Ref == "" && containers.ValidID(c.ID) ||
			c.Ref != "" && containers.ValidRef(c.Ref) && !containers.ValidID(c.Ref) && (c.ID == "" || containers.ValidID(c.ID))
		if !validRef || len(c.Below) == 0 || len(c.Below) > maxAnchors || c.Client.PID == 0 || len(c.ClientGroups) > maxGroups {
			t.log.Warn("saved container claim left out", "container", c.ref())
			continue
		}
		ref := c.ref()
		if t.claim(c.Key()) != nil || len(t.containers[ref]) >= MaxClaimsPerContainer ||
			t.nContainers >= MaxContainers || t.containersPerUID[c.Owner] >= MaxContainersPerUID {
			continue
		}
		c := c.clone()
		t.containers[ref] = append(t.containers[ref], &c)
		t.nContainers++
		t.containersPerUID[c.Owner]++
	}
}

// maxAnchors bounds the sessions a saved claim may be below: sessions
// nest as deep as creator chains go, far fewer in practice.
const maxAnchors = 64

// maxGroups bounds a saved claim's groups: the kernel's NGROUPS_MAX and
// the effective gid.
const maxGroups = 65536 + 1
