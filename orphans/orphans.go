package orphans

import (
	"cmp"
	"fmt"
	"path"
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
	// Certain: it is an MCP server and nothing can ever use it again
	// (see the package doc).
	Certain Confidence = "certain"
	// Likely: it is an MCP server and the evidence points to a leak
	// without proving that nothing can use it.
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
	// (docker run -i) whose client the kernel saw exit.
	ClientGone Kind = "client-gone"
)

// Proof is what shows a process is an MCP server (see the package doc).
type Proof string

const (
	// ProofLineage: the agent saw a recognised host (a host rule) or
	// `mcptrace run|exec` start its chain.
	ProofLineage Proof = "lineage"
	// ProofNameAndStdio: a name of the MCP ecosystem (MCPName), and its
	// stdin and stdout both connected to one host that vanished or that
	// superseded it.
	ProofNameAndStdio Proof = "name-and-stdio"
	// ProofContainer: a container its client attached to its stdin
	// (docker run -i), by a client the kernel saw.
	ProofContainer Proof = "docker-run-i"
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
	// Facts are its stdin, stdout, uids and cgroup; FactsOK is false
	// when they could not be read (it is then never listed).
	Facts   procfs.Facts
	FactsOK bool
	// Stdio is what the kernel says of its stdin and stdout now
	// (procfs.ReadStdio): zero when they are no pipe or socket, or could
	// not be read.
	Stdio procfs.Stdio
	// CutFor is how long its stdin (a pipe or a socket) has been seen cut
	// off, across looks: no writer left, as the kernel counts them
	// (procfs.ReadStdio). 0 when it is not cut off now, or that could
	// not be told. OutCutFor is the same of its stdout: no reader left.
	CutFor, OutCutFor time.Duration
	// IdleFor is how long its I/O counters have stood still (0: they
	// moved since the last look, or there was none).
	IdleFor time.Duration
	Usage   procfs.Usage
}

// owner is the uid p runs as now, from /proc (the graph keeps the uid
// of its last exec or fork): ok only when its real, effective and saved
// uids are one, so that ending it under that uid is ending all of it.
func (p *Proc) owner() (uint32, bool) {
	if !p.FactsOK {
		return 0, false
	}
	u := p.Facts.UIDs
	return u.Real, u.Real == u.Effective && u.Real == u.Saved
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
	// HoldsStdio reports whether holder, alive, holds the other end of
	// both p's stdin and its stdout (nil: it never does).
	HoldsStdio func(holder lineage.Process, p *Proc) bool
	// IdleAfter is how long a superseded server must have been idle.
	IdleAfter time.Duration
	// ConfirmAfter is how long a stdin must have been seen cut off before
	// that counts as evidence: a server of a one-shot pipeline whose
	// writer has just closed may still be finishing its work.
	ConfirmAfter time.Duration
	// Read, when set, reads what /proc says of p now into it (PPID,
	// Facts, FactsOK, Stdio, CutFor, OutCutFor, IdleFor, Usage); Procs
	// then come with their lineage only. Find calls it for the processes
	// a listing can use and no other (needed): on a node where a shell
	// script started 10,000 programs, none of which has a server's
	// shape, it reads none of them. nil: Procs come read.
	Read func(p *Proc)
}

// Found is what Find found.
type Found struct {
	Orphans []Orphan
	// Candidates are MCP servers (proved as Orphans are) whose evidence
	// of a leak is still being gathered: superseded ones not idle long
	// enough yet, ones whose stdio was cut off too recently. Each one's
	// Evidence says what is still missing ("idle 3m of 30m"). They are
	// shown, never ended.
	Candidates []Orphan
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
	// starter down to it, then its program: short names, never an
	// argument.
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
	// Proof is what shows it is an MCP server.
	Proof Proof `json:"proof"`
	// Evidence says, in words, why it is listed.
	Evidence []string `json:"evidence"`
	// UID is the uid every process from Top down runs as, real,
	// effective and saved, as /proc said at the look.
	UID uint32 `json:"uid"`
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
	server  bool   // an MCP server's shape: the first program past the wrappers, naming its package
	proof   Proof  // "" when nothing shows it is an MCP server (yet: name-and-stdio is judged with the evidence)
	host    string // the host rule that names an ancestor, for ProofLineage
	uid     uint32 // owner()
	uidOK   bool
}

// Untitled returns p with every image read from /proc whose command
// line is a process title the program wrote over its argv (npm's `npx`
// shows one string, "npm exec PKG ARGS…", padded with empty elements)
// split back into words, so that roles reads it as the wrapper it is
// rather than as a program named by its whole title. Images the kernel
// reported at exec are kept as they are: they are what was executed.
func Untitled(p lineage.Process) lineage.Process {
	cloned := false
	for i, im := range p.Images {
		if im.Source != lineage.SourceProc || len(im.Argv) == 0 || !strings.Contains(im.Argv[0], " ") {
			continue
		}
		if slices.ContainsFunc(im.Argv[1:], func(a string) bool { return a != "" }) {
			continue
		}
		if !cloned { // the graph's copy is shared: change a copy
			p.Images, cloned = slices.Clone(p.Images), true
		}
		p.Images[i].Argv = strings.Fields(im.Argv[0])
	}
	return p
}

// Find lists the leaked servers among in.Procs, sorted by host kind,
// name, confidence and start.
func Find(in Input) Found {
	byID := make(map[lineage.ID]*candidate, len(in.Procs))
	cands := make([]*candidate, 0, len(in.Procs))
	for i := range in.Procs {
		c := &candidate{Proc: &in.Procs[i]}
		c.Process = Untitled(c.Process)
		byID[c.ID] = c
		cands = append(cands, c)
	}
	chains := map[lineage.ID][]lineage.Process{}
	for _, c := range cands {
		shape(in, c, chains)
	}
	if in.Read != nil {
		need := needed(cands)
		for _, c := range cands {
			if need[c.ID] {
				in.Read(c.Proc)
			}
		}
	}
	for _, c := range cands {
		settle(c)
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
	var out, pend []Orphan
	pending, confirmIn := 0, time.Duration(0)
	for _, c := range cands {
		if !c.server || !c.uidOK || below(c) {
			continue
		}
		v := judge(in, c, byID, cands)
		switch {
		case v.listed:
			out = append(out, v.o)
		case v.candidate:
			pend = append(pend, v.o)
		}
		if v.confirmIn > 0 {
			pending++
			confirmIn = max(confirmIn, v.confirmIn)
		}
	}
	for i := range out {
		total(&out[i], cands)
	}
	for i := range pend {
		total(&pend[i], cands)
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
	sortOrphans(out)
	sortOrphans(pend)
	return Found{Orphans: out, Candidates: pend, Pending: pending, ConfirmIn: confirmIn}
}

func sortOrphans(out []Orphan) {
	for i := range out {
		out[i].HostKind = cmp.Or(out[i].HostKind, UnknownHost)
	}
	slices.SortFunc(out, func(a, b Orphan) int {
		return cmp.Or(cmp.Compare(a.HostKind, b.HostKind), cmp.Compare(a.Name, b.Name), cmp.Compare(a.Confidence, b.Confidence),
			cmp.Compare(a.Server.Start, b.Server.Start), cmp.Compare(a.Server.PID, b.Server.PID))
	})
}

// shape decides from its lineage alone whether c has an MCP server's
// shape, and whether its lineage proves it one; settle then rules out
// what /proc says may not be one.
func shape(in Input, c *candidate, chains map[lineage.ID][]lineage.Process) {
	if c.Exited || c.Kernel || (in.Spared != nil && in.Spared(c.Process)) {
		return
	}
	// A creator younger than its child is a PID guessed at a seed or
	// repair that was reused since: the chain stops below it.
	if ch := creators(in, c.Creator, chains); len(ch) > 0 && ch[0].ID.Start <= c.ID.Start {
		c.chain = ch
	}
	// The chain from the starter down: the wrappers above c, nearest
	// first, up to the first process that is not one. Counted first: the
	// list is made once at its size (a look makes one per candidate).
	wrappers := len(c.chain)
	for i := range c.chain {
		if _, wrapper := roles.Identity(c.chain[i].Current()); !wrapper {
			c.starter, wrappers = &c.chain[i], i
			break
		}
	}
	procs := make([]lineage.Process, 0, wrappers+2)
	procs = append(procs, c.Process)
	procs = append(procs, c.chain[:wrappers]...)
	var root lineage.ID
	if c.starter != nil {
		root = c.starter.ID
		procs = append(procs, *c.starter)
	}
	slices.Reverse(procs)
	ms := roles.Classify(root, true, procs)
	c.member = ms[len(ms)-1]
	c.server = c.member.Role == roles.Server && (c.member.Named || roles.Packaged(c.Process))
	if !c.server {
		return
	}
	// Lineage: a recognised host, or `mcptrace run|exec`, above it.
	for _, a := range c.chain {
		if in.HostKind != nil {
			if k := in.HostKind(a); k != "" {
				c.proof, c.host = ProofLineage, k
				return
			}
		}
		if mcptraceWrapper(a) {
			c.proof = ProofLineage
			return
		}
	}
}

// creators is the chain from creator up, nearest first, as a candidate
// it created holds it (candidate.chain): npm's titles read as words
// (Untitled), and up to the first creator younger than the one below it
// (a reused PID). Chains are shared, by creator, in chains: a shell's
// ten thousand children hold one copy of the shell's ancestry, not ten
// thousand. Nobody modifies them.
func creators(in Input, creator lineage.ID, chains map[lineage.ID][]lineage.Process) []lineage.Process {
	if in.Ancestors == nil || creator.IsZero() {
		return nil
	}
	if ch, ok := chains[creator]; ok {
		return ch
	}
	anc := in.Ancestors(creator)
	for i := 1; i < len(anc); i++ {
		if anc[i].ID.Start > anc[i-1].ID.Start {
			anc = anc[:i]
			break
		}
	}
	ch := make([]lineage.Process, len(anc))
	for i, a := range anc {
		ch[i] = Untitled(a)
	}
	chains[creator] = ch
	return ch
}

// needed is what Find has read of /proc (Input.Read): every process of
// a server's shape, the wrappers above it up to its starter (top and
// reparented read them), and every process below one of those (total
// counts them). Nothing else's facts are read by Find.
func needed(cands []*candidate) map[lineage.ID]bool {
	need := map[lineage.ID]bool{}
	for _, c := range cands {
		if !c.server {
			continue
		}
		need[c.ID] = true
		for _, a := range c.chain {
			if c.starter != nil && a.ID == c.starter.ID {
				break
			}
			need[a.ID] = true
		}
	}
	var below []lineage.ID
	for _, c := range cands {
		if !need[c.ID] && slices.ContainsFunc(c.chain, func(a lineage.Process) bool { return need[a.ID] }) {
			below = append(below, c.ID)
		}
	}
	for _, x := range below {
		need[x] = true
	}
	return need
}

// settle takes in what /proc says of c: its owner, and no server (nor
// a chain, which total and top follow) when its facts are unknown or
// it runs in a daemon's or a container's cgroup.
func settle(c *candidate) {
	c.uid, c.uidOK = c.owner()
	if !c.FactsOK || Daemon(c.Facts.Cgroup) {
		*c = candidate{Proc: c.Proc, uid: c.uid, uidOK: c.uidOK}
	}
}

// mcptraceWrapper: p ran `mcptrace run|exec … --` (a wrapper whose
// program is mcptrace): a session was declared on its chain.
func mcptraceWrapper(p lineage.Process) bool {
	for _, im := range p.Images {
		prog := im.Filename
		if len(im.Argv) > 0 {
			prog = im.Argv[0]
		}
		if path.Base(strings.ReplaceAll(prog, `\`, "/")) != "mcptrace" {
			continue
		}
		if _, wrapper := roles.Identity(im); wrapper {
			return true
		}
	}
	return false
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
// c's uid (real, effective and saved), neither spared nor in a daemon's
// cgroup, and above no other server (a wrapper two servers share is
// neither's to end).
func top(in Input, c *candidate, byID map[lineage.ID]*candidate, cands []*candidate) *candidate {
	t := c
	for _, a := range c.chain {
		w := byID[a.ID]
		if w == nil || w.Exited || !w.FactsOK || (c.starter != nil && a.ID == c.starter.ID) || !w.uidOK || w.uid != c.uid ||
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
	return Orphan{Server: c.ID, Top: t.ID, Name: c.member.Server, Chain: c.member.Chain, Kind: kind, UID: c.uid, Argv: c.Current().Argv}
}

// verdict is what judge decided of one server.
type verdict struct {
	o         Orphan
	listed    bool          // o is leaked
	candidate bool          // o is an MCP server whose evidence is still being gathered
	confirmIn time.Duration // > 0: a cut-off seen too recently, countable in this long
}

// judge decides c, an MCP server's shape of a uid it may be listed
// under: leaked (its host is gone, or it was superseded), a candidate,
// or nothing.
func judge(in Input, c *candidate, byID map[lineage.ID]*candidate, cands []*candidate) verdict {
	if v, ok := hostGone(in, c, byID, cands); ok {
		return v
	}
	return superseded(in, c, cands, byID)
}

// stdioBoth: c's stdin and stdout are both a pipe or a unix socket (a
// host's stdio, not a file, a tty or a network socket), and where both
// are sockets, the same process made their peers.
func stdioBoth(c *candidate) bool {
	st := c.Stdio
	if !st.InLocal || !st.OutLocal {
		return false
	}
	return st.InPeer == 0 || st.OutPeer == 0 || st.InPeer == st.OutPeer
}

// hostGone judges c by its stdio: its stdin cut off (and, for a server
// its name proves, its stdout too, from one host) long enough is a leak.
func hostGone(in Input, c *candidate, byID map[lineage.ID]*candidate, cands []*candidate) (verdict, bool) {
	if c.CutFor == 0 {
		return verdict{}, false
	}
	proof := c.proof
	outCut := c.OutCutFor > 0 || !c.Stdio.OutLocal
	if proof == "" {
		// A name with stdio evidence: its stdin and stdout were both
		// connected to one host, and both are cut off. A name alone, or
		// stdin alone, proves nothing.
		if !MCPName(c.member.Server) || !stdioBoth(c) || c.OutCutFor == 0 {
			return verdict{}, false
		}
		proof = ProofNameAndStdio
	}
	t := top(in, c, byID, cands)
	o := newOrphan(c, t, HostGone)
	o.Proof = proof
	if c.starter != nil && in.HostKind != nil {
		o.HostKind = in.HostKind(*c.starter)
	}
	o.HostKind = cmp.Or(o.HostKind, c.host)
	o.Evidence = []string{proofWords(c, proof)}
	cut := c.CutFor
	if proof == ProofNameAndStdio {
		cut = min(c.CutFor, c.OutCutFor)
	}
	if cut < in.ConfirmAfter {
		o.Evidence = append(o.Evidence, fmt.Sprintf("its stdio was cut off %s of the %s that confirm it",
			cut.Round(time.Second), in.ConfirmAfter))
		return verdict{o: o, candidate: true, confirmIn: in.ConfirmAfter - cut}, true
	}
	o.Confidence = Likely
	if outCut && c.Stdio.OutLocal {
		o.Evidence = append(o.Evidence, fmt.Sprintf("its stdin (a %s) has had no writer and its stdout no reader for %s: whoever started it can no longer talk to it",
			c.Facts.Stdin, cut.Round(time.Second)))
	} else {
		o.Evidence = append(o.Evidence, fmt.Sprintf("its stdin (a %s) has had no writer for %s: whoever started it can no longer talk to it",
			c.Facts.Stdin, cut.Round(time.Second)))
	}
	if c.starter != nil && c.starter.Exited {
		o.Evidence = append(o.Evidence, "the program that started it exited")
	}
	// Nothing can use it again when both ends of its stdio are dead: no
	// writer of its stdin, no reader of its stdout, whoever its parent is
	// (a parent that holds neither cannot talk to it). A stdout that is
	// no pipe or socket says nothing: then its chain must have been
	// reparented, its host gone.
	both := c.Stdio.OutLocal && c.OutCutFor >= in.ConfirmAfter
	moved := false
	switch {
	case t.PPID == 1:
		moved = true
		o.Evidence = append(o.Evidence, "reparented to init (pid 1)")
	case reparented(t):
		moved = true
		o.Evidence = append(o.Evidence, fmt.Sprintf("reparented to pid %d, not its creator", t.PPID))
	default:
		o.Evidence = append(o.Evidence, fmt.Sprintf("its parent pid %d still runs", t.PPID))
	}
	if !outCut {
		o.Evidence = append(o.Evidence, "its stdout still has a reader")
	}
	if both || (moved && !c.Stdio.OutLocal) {
		o.Confidence = Certain
	}
	return verdict{o: o, listed: true}, true
}

// proofWords says what shows c is an MCP server.
func proofWords(c *candidate, p Proof) string {
	switch {
	case p == ProofLineage && c.host != "":
		return fmt.Sprintf("an MCP server: the agent saw a %s host start it", c.host)
	case p == ProofLineage:
		return "an MCP server: the agent saw `mcptrace run|exec` start it"
	}
	return fmt.Sprintf("an MCP server: %s is an MCP name, and its stdin and stdout both led to the same host", c.member.Server)
}

// reparented: t's parent now is not the process that created it.
func reparented(t *candidate) bool {
	if len(t.chain) == 0 {
		return false
	}
	creator := t.chain[0]
	return creator.Exited || creator.ID.PID != t.PPID
}

// superseded judges c by its live starter: one that started the same
// server again later leaves c leaked once c has been idle long enough
// (or its stdin is cut off), and a candidate until then.
func superseded(in Input, c *candidate, cands []*candidate, byID map[lineage.ID]*candidate) verdict {
	if c.starter == nil || c.starter.Exited || c.starter.ID.PID <= 1 {
		return verdict{}
	}
	if c.proof == "" && (!MCPName(c.member.Server) || !stdioBoth(c)) {
		return verdict{}
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
		return verdict{}
	}
	proof := c.proof
	if proof == "" {
		// A name with stdio evidence: the live starter holds the other end
		// of both its stdin and its stdout (asked last: it reads the
		// starter's open files).
		if in.HoldsStdio == nil || !in.HoldsStdio(*c.starter, c.Proc) {
			return verdict{}
		}
		proof = ProofNameAndStdio
	}
	t := top(in, c, byID, cands)
	for _, a := range newer.chain {
		if a.ID == t.ID {
			return verdict{} // the newer instance is below what would end
		}
	}
	o := newOrphan(c, t, Superseded)
	o.Proof = proof
	o.Host, o.HostUID, o.Newer = c.starter.ID, c.starter.UID, newer.ID
	if in.HostKind != nil {
		o.HostKind = in.HostKind(*c.starter)
	}
	o.HostKind = cmp.Or(o.HostKind, c.host)
	after := time.Duration(newer.ID.Start - c.ID.Start).Round(time.Second)
	o.Evidence = []string{proofWords(c, proof), fmt.Sprintf("the program that started it still runs and started the same server again %s later (pid %d)",
		after, newer.ID.PID)}
	idle := in.IdleAfter > 0 && c.IdleFor >= in.IdleAfter
	if !idle {
		o.Evidence = append(o.Evidence, fmt.Sprintf("idle %s of the %s that confirm it", c.IdleFor.Round(time.Second), in.IdleAfter))
		return verdict{o: o, candidate: true}
	}
	o.Confidence = Likely
	o.Evidence = append(o.Evidence, fmt.Sprintf("no I/O for %s", c.IdleFor.Round(time.Second)))
	return verdict{o: o, listed: true}
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
// (docker run -i) whose client the kernel saw send the start of this
// very instance and then exit, once the container's stdin has had no
// writer for long enough: nothing can attach it again. A closed stdin
// alone says nothing of the client (a `docker run -i` whose own stdin
// reached its end closes the container's while it still runs and waits
// for the output), so a container whose client is not known, or could
// be one of several, is never listed; nor while any client of it runs.
// It is Certain when it is an MCP server too: its image has an MCP name
// (MCPName), or a recognised host started its client; Likely otherwise.
func clientGone(in Input, c Container) (Orphan, bool) {
	if !c.AttachedStdin || c.CutFor == 0 || c.CutFor < in.ConfirmAfter || c.Init.Exited ||
		(in.Spared != nil && in.Spared(c.Init)) || !clientSeenGone(c) {
		return Orphan{}, false
	}
	o := Orphan{Server: c.Init.ID, Top: c.Init.ID, Name: c.Image, Chain: []string{"container " + shortID(c.ID)}, Kind: ClientGone,
		Proof: ProofContainer, Container: c.ID, Client: c.Client, UID: c.ClientUID, Processes: c.Processes, RSSBytes: c.RSSBytes,
		CPUSeconds: c.CPUSeconds, Confidence: Likely,
		Evidence: []string{fmt.Sprintf("the client that started it (pid %d, uid %d) exited, and its stdin, attached to that client (docker run -i), has had no writer for %s: nothing can attach it again",
			c.Client.PID, c.ClientUID, c.CutFor.Round(time.Second))}}
	if in.HostKind != nil && in.Ancestors != nil {
		for _, a := range in.Ancestors(c.Client) {
			if k := in.HostKind(a); k != "" {
				o.HostKind = k
				break
			}
		}
	}
	switch {
	case o.HostKind != "":
		o.Confidence = Certain
		o.Evidence = append(o.Evidence, fmt.Sprintf("an MCP server: the agent saw a %s host start its client", o.HostKind))
	case MCPName(roles.ImageName(c.Image)):
		o.Confidence = Certain
		o.Evidence = append(o.Evidence, fmt.Sprintf("an MCP server: its image %s has an MCP name", roles.ImageName(c.Image)))
	default:
		o.Evidence = append(o.Evidence, "nothing shows it is an MCP server: likely")
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
