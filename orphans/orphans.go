package orphans

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/mcptrace/mcptrace/lineage"
	"github.com/mcptrace/mcptrace/procfs"
	"github.com/mcptrace/mcptrace/roles"
)

// Confidence says how sure a listing is.
type Confidence string

const (
	// Certain: the evidence proves the server leaked (see the package doc).
	Certain Confidence = "certain"
	// Likely: the evidence points to a leak without proving it.
	Likely Confidence = "likely"
)

// Kind is the evidence a server was listed on.
type Kind string

const (
	// HostGone: its stdin pipe has no writer left.
	HostGone Kind = "host-gone"
	// Superseded: its live starter started the same server again.
	Superseded Kind = "superseded"
	// ClientGone: a container started attached to its client's stdin
	// (docker run -i) whose stdin has no writer left.
	ClientGone Kind = "client-gone"
)

// DefaultConfirmAfter is how long a stdin must stay cut off before it
// counts as evidence (Input.ConfirmAfter) by default.
const DefaultConfirmAfter = 10 * time.Second

// UnknownHost is the host kind of a server whose host is not known: it
// predates the agent, or no host rule names it.
const UnknownHost = "unknown"

// Proc is a live process no session owns, as the agent read it.
type Proc struct {
	lineage.Process // with its images
	// PPID is its parent now, from /proc.
	PPID uint32
	// Facts are its stdin and cgroup; FactsOK is false when they could
	// not be read (it is then never listed).
	Facts   procfs.Facts
	FactsOK bool
	// CutFor is how long its stdin (a pipe or a socket) has been seen cut
	// off, across looks: no writer left, as the kernel counts them
	// (procfs.StdinCutOff). 0 when it is not cut off now, or that could
	// not be told.
	CutFor time.Duration
	// IdleFor is how long its I/O counters have stood still (0: they
	// moved since the last look, or there was none).
	IdleFor time.Duration
	Usage   procfs.Usage
}

// Container is a running container no session claims, as the agent
// read it from the engine, the kernel's record of its start
// (sessions.Start) and /proc.
type Container struct {
	// ID is the engine's full container ID; Name and Image its name and
	// image as the engine tells them.
	ID, Name, Image string
	// Init is its first process, as the graph or /proc knows it.
	Init lineage.Process
	// AttachedStdin: created to read its client's stdin once (docker run
	// -i; containers.Container.AttachedStdin).
	AttachedStdin bool
	// CutFor is how long Init's stdin has been seen with no writer, as
	// Proc.CutFor.
	CutFor time.Duration
	// Client is the process the kernel saw send its start, verified to
	// have started this instance; zero when not known (the start predates
	// the agent, or was not kept, or more than one client's start could
	// have started it: Contested). ClientUID is its uid; ClientExited
	// whether it is gone.
	Client       lineage.ID
	ClientUID    uint32
	ClientExited bool
	Contested    bool
	// ClientsAlive counts the clients the kernel saw send a start of this
	// container that still run, whichever instance they started: while
	// one does, the container is not listed (it may be the one talking
	// to it, or about to).
	ClientsAlive int
	// Processes, RSSBytes and CPUSeconds add up its live processes.
	Processes  int
	RSSBytes   uint64
	CPUSeconds float64
}

// Input is what Find looks at.
type Input struct {
	// Procs are the live processes, in scope, that no session owns.
	Procs []Proc
	// Containers are the running containers no session claims.
	Containers []Container
	// Ancestors returns id's process first, then its creators up to the
	// top (lineage.Graph.Ancestors), alive or exited.
	Ancestors func(lineage.ID) []lineage.Process
	// Spared reports a process a spare rule protects (nil: none).
	Spared func(lineage.Process) bool
	// HostKind names the host a process is (a host rule's name), "" when
	// it is none (nil: none is).
	HostKind func(lineage.Process) string
	// IdleAfter is how long a superseded server must have been idle.
	IdleAfter time.Duration
	// ConfirmAfter is how long a stdin must have been seen cut off before
	// that counts as evidence: a server of a one-shot pipeline whose
	// writer has just closed may still be finishing its work.
	ConfirmAfter time.Duration
}

// Found is what Find found.
type Found struct {
	Orphans []Orphan
	// Pending counts the servers whose stdin was seen cut off too
	// recently to count (Input.ConfirmAfter): listed at a later look if
	// they stay so. ConfirmIn is how long until the last of them can be.
	Pending   int
	ConfirmIn time.Duration
	// ContainersUnchecked counts the running containers not looked at
	// (the engine did not answer, or more than one look inspects);
	// ContainersWhy says why. Set by the agent, not by Find.
	ContainersUnchecked int
	ContainersWhy       string
}

// Orphan is one leaked server.
type Orphan struct {
	// Server is the server process; Top the topmost process of its leaked
	// chain (a wrapper above it, or itself): ending an orphan ends Top
	// and everything Top created.
	Server lineage.ID `json:"server"`
	Top    lineage.ID `json:"top"`
	// Name is the server's identity (roles); Chain the wrappers from its
	// starter down to it, then its program.
	Name  string   `json:"name"`
	Chain []string `json:"chain,omitempty"`
	// HostKind is the host rule that names the starter, or UnknownHost.
	HostKind string `json:"host_kind"`
	// Host is the live starter of a superseded server; zero for HostGone.
	// HostUID is its uid: the API shows Host only to root and to that
	// uid.
	Host    lineage.ID `json:"host"`
	HostUID uint32     `json:"-"`
	// Newer is the instance that supersedes a Superseded server.
	Newer      lineage.ID `json:"newer"`
	Kind       Kind       `json:"kind"`
	Confidence Confidence `json:"confidence"`
	// Evidence says, in words, why it is listed.
	Evidence []string `json:"evidence"`
	UID      uint32   `json:"uid"`
	// Processes, RSSBytes and CPUSeconds add up the live processes from
	// Top down that Find was given.
	Processes  int     `json:"processes"`
	RSSBytes   uint64  `json:"rss_bytes"`
	CPUSeconds float64 `json:"cpu_seconds"`
	// Argv is the server's command line (the API redacts it).
	Argv []string `json:"argv,omitempty"`
	// Container is the container a ClientGone orphan is (its full ID;
	// Server is its first process, Name its image); Client the process
	// that started it, when the kernel saw it.
	Container string     `json:"container,omitempty"`
	Client    lineage.ID `json:"client,omitzero"`
}

// candidate is a Proc with what Find derived of it.
type candidate struct {
	*Proc
	chain   []lineage.Process // creators above it, nearest first
	starter *lineage.Process  // the first non-wrapper above it; nil when none
	member  roles.Member
	server  bool // an MCP server by the rules above
}

// Find lists the leaked servers among in.Procs, sorted by host kind,
// name, confidence and start.
func Find(in Input) Found {
	byID := make(map[lineage.ID]*candidate, len(in.Procs))
	cands := make([]*candidate, 0, len(in.Procs))
	for i := range in.Procs {
		c := &candidate{Proc: &in.Procs[i]}
		byID[c.ID] = c
		cands = append(cands, c)
	}
	for _, c := range cands {
		classify(in, c)
	}
	// A server below another listed server is that server's business
	// (ended with it), not a second leak.
	below := func(c *candidate) bool {
		for _, a := range c.chain {
			if o := byID[a.ID]; o != nil && o.server {
				return true
			}
		}
		return false
	}
	var out []Orphan
	pending, confirmIn := 0, time.Duration(0)
	for _, c := range cands {
		if !c.server || below(c) {
			continue
		}
		if c.CutFor > 0 && c.CutFor < in.ConfirmAfter {
			pending++
			confirmIn = max(confirmIn, in.ConfirmAfter-c.CutFor)
		}
		if o, ok := hostGone(in, c, byID, cands); ok {
			out = append(out, o)
		} else if o, ok := superseded(in, c, cands, byID); ok {
			out = append(out, o)
		}
	}
	for i := range out {
		total(&out[i], cands)
	}
	for _, c := range in.Containers {
		if c.AttachedStdin && c.CutFor > 0 && c.CutFor < in.ConfirmAfter && clientSeenGone(c) {
			pending++
			confirmIn = max(confirmIn, in.ConfirmAfter-c.CutFor)
		}
		if o, ok := clientGone(in, c); ok {
			out = append(out, o)
		}
	}
	for i := range out {
		out[i].HostKind = cmp.Or(out[i].HostKind, UnknownHost)
	}
	slices.SortFunc(out, func(a, b Orphan) int {
		return cmp.Or(cmp.Compare(a.HostKind, b.HostKind), cmp.Compare(a.Name, b.Name), cmp.Compare(a.Confidence, b.Confidence),
			cmp.Compare(a.Server.Start, b.Server.Start), cmp.Compare(a.Server.PID, b.Server.PID))
	})
	return Found{Orphans: out, Pending: pending, ConfirmIn: confirmIn}
}

// classify decides whether c is an MCP server that may be listed.
func classify(in Input, c *candidate) {
	if c.Exited || c.Kernel || !c.FactsOK || (in.Spared != nil && in.Spared(c.Process)) || Daemon(c.Facts.Cgroup) {
		return
	}
	if in.Ancestors != nil {
		anc := in.Ancestors(c.ID)
		// A creator younger than its child is a PID guessed at a seed or
		// repair that was reused since: the chain stops below it.
		for i := 1; i < len(anc); i++ {
			if anc[i].ID.Start > anc[i-1].ID.Start {
				anc = anc[:i]
				break
			}
		}
		if len(anc) > 1 {
			c.chain = anc[1:]
		}
	}
	// The chain from the starter down: the wrappers above c, nearest
	// first, up to the first process that is not one.
	procs := []lineage.Process{c.Process}
	for i := range c.chain {
		a := &c.chain[i]
		if _, wrapper := roles.Identity(a.Current()); !wrapper {
			c.starter = a
			break
		}
		procs = append(procs, *a)
	}
	var root lineage.ID
	if c.starter != nil {
		root = c.starter.ID
		procs = append(procs, *c.starter)
	}
	slices.Reverse(procs)
	ms := roles.Classify(root, true, procs)
	c.member = ms[len(ms)-1]
	c.server = c.member.Role == roles.Server && (c.member.Named || roles.Packaged(c.Process))
}

// Daemon: a systemd service's cgroup (any component a "….service" but
// the user manager's own), a container's or a machine's; or no cgroup
// read at all, which proves nothing.
func Daemon(cgroup string) bool {
	if cgroup == "" {
		return true
	}
	for _, part := range strings.Split(cgroup, "/") {
		if strings.HasSuffix(part, ".service") && !strings.HasPrefix(part, "user@") {
			return true
		}
	}
	for _, s := range []string{"/docker/", "/docker-", "/libpod-", "/kubepods", "/containerd/", "/lxc.payload", "/lxc/",
		"/machine.slice", "/k8s.io/", "/default/", "/crio-", "/garden/"} {
		if strings.Contains(cgroup, s) {
			return true
		}
	}
	return false
}

// top is the topmost process of c's leaked chain: c, or the live
// wrappers above it that read the same stdin, that no session owns, of
// c's uid, neither spared nor in a daemon's cgroup, and above no other
// server (a wrapper two servers share is neither's to end).
func top(in Input, c *candidate, byID map[lineage.ID]*candidate, cands []*candidate) *candidate {
	t := c
	for _, a := range c.chain {
		w := byID[a.ID]
		if w == nil || w.Exited || !w.FactsOK || (c.starter != nil && a.ID == c.starter.ID) || w.UID != c.UID ||
			Daemon(w.Facts.Cgroup) || (in.Spared != nil && in.Spared(w.Process)) {
			break
		}
		if _, wrapper := roles.Identity(w.Current()); !wrapper || w.Facts.Stdin != c.Facts.Stdin || w.Facts.StdinInode != c.Facts.StdinInode {
			break
		}
		if shared(w, c, cands) {
			break
		}
		t = w
	}
	return t
}

// shared: another live server, not one below c, has w above it.
func shared(w, c *candidate, cands []*candidate) bool {
	above := func(d *candidate, x lineage.ID) bool {
		for _, a := range d.chain {
			if a.ID == x {
				return true
			}
		}
		return false
	}
	for _, d := range cands {
		if d != c && d.server && !d.Exited && above(d, w.ID) && !above(d, c.ID) {
			return true
		}
	}
	return false
}

func newOrphan(c, t *candidate, kind Kind) Orphan {
	return Orphan{Server: c.ID, Top: t.ID, Name: c.member.Server, Chain: c.member.Chain, Kind: kind, UID: c.UID, Argv: c.Current().Argv}
}

// hostGone lists c when its stdin has been cut off long enough.
func hostGone(in Input, c *candidate, byID map[lineage.ID]*candidate, cands []*candidate) (Orphan, bool) {
	if c.CutFor == 0 || c.CutFor < in.ConfirmAfter {
		return Orphan{}, false
	}
	t := top(in, c, byID, cands)
	o := newOrphan(c, t, HostGone)
	if in.HostKind != nil && c.starter != nil {
		o.HostKind = in.HostKind(*c.starter)
	}
	o.Confidence = Likely
	o.Evidence = []string{fmt.Sprintf("its stdin (a %s) has had no writer for %s: whoever started it can no longer talk to it",
		c.Facts.Stdin, c.CutFor.Round(time.Second))}
	if c.starter != nil && c.starter.Exited {
		o.Evidence = append(o.Evidence, "the program that started it exited")
	}
	switch {
	case t.PPID == 1:
		o.Confidence = Certain
		o.Evidence = append(o.Evidence, "reparented to init (pid 1)")
	case reparented(t):
		o.Confidence = Certain
		o.Evidence = append(o.Evidence, fmt.Sprintf("reparented to pid %d, not its creator", t.PPID))
	default:
		o.Evidence = append(o.Evidence, fmt.Sprintf("its parent pid %d still runs", t.PPID))
	}
	return o, true
}

// cutOff: c reads a pipe or socket that no writer holds any more, and
// has for long enough.
func cutOff(in Input, c *candidate) bool {
	return c.CutFor > 0 && c.CutFor >= in.ConfirmAfter
}

// reparented: t's parent now is not the process that created it.
func reparented(t *candidate) bool {
	if len(t.chain) == 0 {
		return false
	}
	creator := t.chain[0]
	return creator.Exited || creator.ID.PID != t.PPID
}

// superseded lists c when its live starter started the same server again
// later and c is idle or cut off.
func superseded(in Input, c *candidate, cands []*candidate, byID map[lineage.ID]*candidate) (Orphan, bool) {
	if c.starter == nil || c.starter.Exited || c.starter.ID.PID <= 1 {
		return Orphan{}, false
	}
	key := roles.CommandKey(c.Process)
	var newer *candidate
	for _, d := range cands {
		if d == c || !d.server || d.starter == nil || d.starter.ID != c.starter.ID || d.member.Server != c.member.Server ||
			d.ID.Start <= c.ID.Start || roles.CommandKey(d.Process) != key {
			continue
		}
		if newer == nil || d.ID.Start > newer.ID.Start {
			newer = d
		}
	}
	if newer == nil {
		return Orphan{}, false
	}
	idle := in.IdleAfter > 0 && c.IdleFor >= in.IdleAfter
	cut := cutOff(in, c)
	if !idle && !cut {
		return Orphan{}, false
	}
	t := top(in, c, byID, cands)
	for _, a := range newer.chain {
		if a.ID == t.ID {
			return Orphan{}, false // the newer instance is below what would end
		}
	}
	o := newOrphan(c, t, Superseded)
	o.Host, o.HostUID, o.Newer, o.Confidence = c.starter.ID, c.starter.UID, newer.ID, Likely
	if in.HostKind != nil {
		o.HostKind = in.HostKind(*c.starter)
	}
	after := time.Duration(newer.ID.Start - c.ID.Start).Round(time.Second)
	o.Evidence = []string{fmt.Sprintf("the program that started it still runs and started the same server again %s later (pid %d)",
		after, newer.ID.PID)}
	if idle {
		o.Evidence = append(o.Evidence, fmt.Sprintf("no I/O for %s", c.IdleFor.Round(time.Second)))
	}
	if cut {
		o.Evidence = append(o.Evidence, fmt.Sprintf("its stdin (a %s) has had no writer for %s", c.Facts.Stdin, c.CutFor.Round(time.Second)))
	}
	return o, true
}

// total adds up the live candidates from o.Top down.
func total(o *Orphan, cands []*candidate) {
	for _, c := range cands {
		if c.Exited {
			continue
		}
		in := c.ID == o.Top
		for _, a := range c.chain {
			in = in || a.ID == o.Top
		}
		if in {
			o.Processes++
			o.RSSBytes += c.Usage.RSSBytes
			o.CPUSeconds += c.Usage.CPUSeconds()
		}
	}
}

// clientGone lists a container started attached to its client's stdin
// (docker run -i) when the kernel saw the client that started this very
// instance (its start request, verified against the instance's first
// process) and that client has exited, and the container's stdin has
// had no writer for long enough since. A cut stdin alone proves nothing
// (it closes when the client's own stdin reaches EOF, while the client
// still runs and waits for the output); a container whose client is not
// known, or more than one client's start could have started, is never
// listed.
func clientGone(in Input, c Container) (Orphan, bool) {
	if !c.AttachedStdin || c.CutFor == 0 || c.CutFor < in.ConfirmAfter || c.Init.Exited ||
		(in.Spared != nil && in.Spared(c.Init)) || !clientSeenGone(c) {
		return Orphan{}, false
	}
	o := Orphan{Server: c.Init.ID, Top: c.Init.ID, Name: c.Image, Chain: []string{"container " + shortID(c.ID)}, Kind: ClientGone,
		Container: c.ID, Client: c.Client, Processes: c.Processes, RSSBytes: c.RSSBytes, CPUSeconds: c.CPUSeconds,
		UID: c.ClientUID, Confidence: Certain,
		Evidence: []string{
			fmt.Sprintf("the client that started it (pid %d, uid %d) exited", c.Client.PID, c.ClientUID),
			fmt.Sprintf("started attached to its client's stdin (docker run -i), which has had no writer for %s: nothing can attach it again",
				c.CutFor.Round(time.Second))}}
	if in.HostKind != nil && in.Ancestors != nil {
		for _, a := range in.Ancestors(c.Client) {
			if _, wrapper := roles.Identity(a.Current()); !wrapper {
				o.HostKind = in.HostKind(a)
				break
			}
		}
	}
	return o, true
}

// clientSeenGone reports whether the kernel saw the one client that
// started c's running instance, and saw it exit, with no other client
// of c still running.
func clientSeenGone(c Container) bool {
	return !c.Client.IsZero() && !c.Contested && c.ClientExited && c.ClientsAlive == 0
}

// shortID is a container ID as docker ps shows it.
func shortID(id string) string { return id[:min(12, len(id))] }
