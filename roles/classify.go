package roles

import (
	"github.com/mcptrace/mcptrace/lineage"
	"github.com/mcptrace/mcptrace/redact"
)

// maxChain bounds Member.Chain: the wrappers nearest the host, then the
// server's program.
const maxChain = 8

// Member is what Classify says of one process.
type Member struct {
	Role Role `json:"role"`
	// Server is the identity of the server this process is, or wraps, or
	// runs under (a descendant of a server); "" when none (the host,
	// processes outside any server chain).
	Server string `json:"server,omitempty"`
	// Chain is the short names of the wrappers from the host down to this
	// server, then the server's program, e.g. ["npx","sh","node"]: set on
	// Role==Server only; at most 8 entries (the wrappers nearest the host
	// are kept). A wrapper's short name is fixed ("npx", "npm exec",
	// "docker run", "mcptrace exec"); the program's is a name like Server.
	Chain []string `json:"chain,omitempty"`
	// ServerID: for members below or at a server, the lineage.ID of that
	// server process (zero otherwise); lets callers sum a server's subtree
	// (memory of a server and its children).
	ServerID lineage.ID `json:"server_id"`
	// Named: Server came from argv (a package, a module or an image a
	// wrapper or the server itself names), not from the basename
	// fallback (Name) and not the redaction marker. Set on Role==Server
	// only. Two servers whose names are basenames ("index") may be
	// anything; two Named ones run the same package.
	Named bool `json:"named,omitempty"`
}

// Classify classifies procs, the members of one session (any order; a
// session's member list as sessions.Tracker.MembersOf returns it, root
// included when present). root is the session's root. rootIsHost: the
// root is an agent host (sessions that spare their root: host rules,
// `mcptrace run`, `session begin`); false for `mcptrace exec`
// sub-sessions, whose root IS the server. The result is parallel to procs.
// It is ClassifyHost with a HostTable that knows nothing of the host.
func Classify(root lineage.ID, rootIsHost bool, procs []lineage.Process) []Member {
	if !rootIsHost {
		return classify(root, false, nil, procs)
	}
	return classify(root, true, &HostTable{}, procs)
}

// ClassifyHost classifies procs, the members of a session whose root is
// the agent host h describes (see Classify).
//
// The root is the Host. Below it, by creator edge, a server is a process
// its host started to speak MCP over stdio:
//   - the host's own processes are the Host: a process that never
//     executed anything of its own (a fork) created by one, and a
//     program h.Self matches that one created (a native binary its npm
//     launcher starts);
//   - a process the host's own processes created is a Tool, with
//     everything below it, when h.Tools matches it, when it is
//     mcptrace's own CLI (`mcptrace mark destroy`; `mcptrace exec` is a
//     wrapper), or when its stdio at exec was not pipes or sockets on
//     both (git reading /dev/null, a shell tool on a terminal); and so is
//     a branch that exited within ShortLived with nothing in it alive and
//     no server in it that names its package;
//   - otherwise a process whose current image is a wrapper (Identity) is
//     a Wrapper; the first process that is not, below the host and
//     wrappers only, is a Server, unless h.Tools matches it or it is
//     mcptrace's CLI (a Tool) or its stdio at exec was not pipes or
//     sockets on both (Other: a launcher's helper, started on /dev/null,
//     is not a second server); everything a server created, wrappers
//     included, is Other with that server's identity and ID.
//
// A fork below a wrapper is a Wrapper, elsewhere Other. A process whose
// creator is not in procs is read as if it were the host's child. Stdio
// that was not recorded (older records, Windows) is no evidence either
// way.
//
// A server's identity is the first one named by its own images, newest
// first, then by the images of the wrappers above it, nearest first;
// failing that, Name. A wrapper shows the identity of the server below it
// when there is exactly one, else the identity its own images name.
//
// ClassifyHost costs O(len(procs)) plus one match of h's rules per
// process the host's own processes created and per server candidate:
// each image is parsed at most once and each chain walked once.
func ClassifyHost(root lineage.ID, h HostTable, procs []lineage.Process) []Member {
	return classify(root, true, &h, procs)
}

func classify(root lineage.ID, rootIsHost bool, h *HostTable, procs []lineage.Process) []Member {
	c := newClassifier(root, rootIsHost, procs)
	c.host = h
	for i := range procs {
		c.resolve(i)
	}
	c.foldShortBranches()
	c.countServers()
	out := make([]Member, len(procs))
	for i := range procs {
		out[i] = c.member(i)
	}
	return out
}

// kind is the classifier's view of a process; it maps to a Role.
type kind uint8

const (
	kUnset   kind = iota
	kHost         // the root, a host
	kPlain        // outside any server chain: a host's fork → Other
	kWrapper      // a wrapper above servers (or none yet)
	kServer       // a server
	kBelow        // below a server → Other
	kTool         // a command the host ran for itself, and what it started → Tool
)

// Special creator indexes.
const (
	noCreator  = -1 // the creator is not in procs (or a cycle was cut)
	absentRoot = -2 // the creator is the root, which is not in procs
)

type classifier struct {
	procs      []lineage.Process
	root       lineage.ID
	rootIsHost bool
	host       *HostTable // nil when the root is not a host

	// s holds what the classifier knows of each process, by its index
	// in procs: one allocation for them all.
	s []slot
	// order lists the processes as resolved: every one after its creator.
	order []int32
	walk  []int32 // scratch
}

// slot is what the classifier knows of one process.
type slot struct {
	up    int32 // creator's index, noCreator or absentRoot
	srv   int32 // kServer: itself; kBelow: its server (absentRoot: the root)
	one   int32 // a server below a wrapper
	kind  kind
	count uint8 // servers below a wrapper, up to 2
	state uint8 // 0 new, 1 on the stack, 2 resolved
	named bool  // the name came from argv (Member.Named)

	parsedOK, ownOK, upNameOK, nameOK, chainOK bool

	parsed parsed   // the current image's, when parsedOK
	own    string   // the identity a process's own images name
	upName string   // a wrapper's own identity, else the one above it
	name   string   // a server's identity
	chain  []string // a wrapper's chain (wrapperChain), when chainOK
}

// smallClassify is the most processes newClassifier indexes by looking
// along the list instead of making a map.
const smallClassify = 16

func newClassifier(root lineage.ID, rootIsHost bool, procs []lineage.Process) *classifier {
	n := len(procs)
	c := &classifier{
		procs: procs, root: root, rootIsHost: rootIsHost,
		s: make([]slot, n), order: make([]int32, 0, n),
	}
	// The index of an ID, the first process that has it: a map for a
	// session, a look along the list for a chain (what a look for
	// orphans classifies, once per candidate).
	var idx map[lineage.ID]int32
	if n > smallClassify {
		idx = make(map[lineage.ID]int32, n)
		for i := range procs {
			if _, dup := idx[procs[i].ID]; !dup {
				idx[procs[i].ID] = int32(i)
			}
		}
	}
	index := func(id lineage.ID) (int32, bool) {
		if idx != nil {
			u, ok := idx[id]
			return u, ok
		}
		for j := range procs {
			if procs[j].ID == id {
				return int32(j), true
			}
		}
		return 0, false
	}
	for i := range procs {
		cr := procs[i].Creator
		switch u, ok := index(cr); {
		case cr == root && !ok:
			c.s[i].up = absentRoot
		case !ok || int(u) == i || cr.IsZero():
			c.s[i].up = noCreator
		default:
			c.s[i].up = u
		}
	}
	return c
}

// resolve decides the kind of process i and of its creators, creators
// first, without recursion. A creator cycle (only bad input has one) is
// cut where it is found.
func (c *classifier) resolve(i int) {
	if c.s[i].state == 2 {
		return
	}
	stack := append(c.walk[:0], int32(i))
	c.s[i].state = 1
	for len(stack) > 0 {
		t := stack[len(stack)-1]
		if u := c.s[t].up; u >= 0 && c.s[u].state != 2 {
			if c.s[u].state == 1 {
				c.s[t].up = noCreator
			} else {
				c.s[u].state = 1
				stack = append(stack, u)
				continue
			}
		}
		c.s[t].kind, c.s[t].srv = c.decide(int(t))
		c.s[t].state = 2
		c.order = append(c.order, t)
		stack = stack[:len(stack)-1]
	}
	c.walk = stack
}

// decide returns the kind of process t, whose creator is resolved.
func (c *classifier) decide(t int) (kind, int32) {
	p := &c.procs[t]
	if p.ID == c.root {
		if c.rootIsHost {
			return kHost, -1
		}
		return kServer, int32(t)
	}
	pk, ps := kUnset, int32(-1)
	switch u := c.s[t].up; {
	case u == absentRoot && c.rootIsHost:
		pk = kHost
	case u == absentRoot:
		pk, ps = kServer, absentRoot
	case u >= 0:
		pk, ps = c.s[u].kind, c.s[u].srv
	}
	host := pk == kHost || pk == kUnset && c.rootIsHost // created by the host's own processes
	switch {
	case pk == kServer || pk == kBelow:
		return kBelow, ps
	case pk == kTool:
		return kTool, -1
	case !executed(p):
		switch {
		case pk == kWrapper:
			return kWrapper, -1
		case pk == kHost && len(p.Images) > 0:
			return kHost, -1 // a fork of the host runs the host's code
		}
		return kPlain, -1
	case host && c.host != nil && matchCurrent(c.host.Self, p):
		return kHost, -1
	case host && c.forItself(t):
		return kTool, -1
	case c.current(t).wrapper:
		return kWrapper, -1
	case c.host != nil && matchCurrent(c.host.Tools, p) || c.isCLI(t):
		return kTool, -1
	case disconnected(p):
		return kPlain, -1 // a helper started on /dev/null, say: not a server
	}
	return kServer, int32(t)
}

// forItself reports whether process t, which the host's own processes
// created, is a command the host runs for itself: its table says so, it
// is mcptrace's CLI, or it was not started on pipes or sockets.
func (c *classifier) forItself(t int) bool {
	p := &c.procs[t]
	return c.host != nil && matchCurrent(c.host.Tools, p) || c.isCLI(t) || disconnected(p)
}

// isCLI reports whether t runs mcptrace's own CLI, other than as a
// wrapper (`mcptrace exec|run -- …`).
func (c *classifier) isCLI(t int) bool {
	pr := c.current(t)
	return !pr.wrapper && pr.top != nil && progKey(pr.top.argv[0]) == "mcptrace"
}

// disconnected reports whether p's current image was executed with a
// stdin or a stdout that is no pipe or socket: nothing can speak MCP
// with it over stdio. Unrecorded stdio says nothing.
func disconnected(p *lineage.Process) bool {
	s := p.Current().Stdio
	return s.Known() && !s.Connected()
}

// foldShortBranches makes a Tool of every branch below the host that
// exited within ShortLived, with nothing in it alive and no server in
// it that names its package: the commands a host runs for itself by the
// dozen (git, lsb_release, a shell snapshot) whose stdio looked like a
// server's.
func (c *classifier) foldShortBranches() {
	if !c.rootIsHost {
		return
	}
	keep := make([]bool, len(c.procs)) // something in t's subtree is alive or a named server
	for k := len(c.order) - 1; k >= 0; k-- {
		t := int(c.order[k])
		if !c.procs[t].Exited || c.s[t].kind == kServer && c.s[c.nameOf(t)].named {
			keep[t] = true
		}
		if keep[t] {
			if u := c.s[t].up; u >= 0 {
				keep[u] = true
			}
		}
	}
	for _, t := range c.order {
		switch {
		case c.s[t].kind == kHost || c.s[t].kind == kTool:
		case c.s[t].up >= 0 && c.s[c.s[t].up].kind == kTool:
			c.s[t].kind, c.s[t].srv = kTool, -1
		case keep[t] || !Short(&c.procs[t]):
		case c.s[t].up < 0 || c.s[c.s[t].up].kind == kHost:
			c.s[t].kind, c.s[t].srv = kTool, -1
		}
	}
}

// nameOf resolves server t's identity and returns t (for c.named).
func (c *classifier) nameOf(t int) int {
	c.serverName(t)
	return t
}

// executed reports whether p runs an image of its own, not its creator's.
func executed(p *lineage.Process) bool {
	return len(p.Images) > 0 && p.Images[len(p.Images)-1].Source != lineage.SourceInherited
}

// current returns what process t's current image says.
func (c *classifier) current(t int) *parsed {
	if !c.s[t].parsedOK {
		c.s[t].parsed = parseImage(c.procs[t].Current())
		c.s[t].parsedOK = true
	}
	return &c.s[t].parsed
}

// ownIdentity returns the first identity t's own images name, newest first.
func (c *classifier) ownIdentity(t int) string {
	if c.s[t].ownOK {
		return c.s[t].own
	}
	c.s[t].ownOK = true
	ims := c.procs[t].Images
	for k := len(ims) - 1; k >= 0; k-- {
		if ims[k].Source == lineage.SourceInherited {
			continue
		}
		var n string
		if k == len(ims)-1 {
			n = c.current(t).id.safe()
		} else {
			n, _ = Identity(ims[k])
		}
		if n != "" {
			c.s[t].own = n
			break
		}
	}
	return c.s[t].own
}

// wrapperAbove returns t's creator when it is a wrapper, else -1.
func (c *classifier) wrapperAbove(t int) int {
	if u := c.s[t].up; u >= 0 && c.s[u].kind == kWrapper {
		return int(u)
	}
	return -1
}

// nearestIdentity returns the identity wrapper w names, or failing that
// the nearest wrapper above it; each wrapper is looked at once.
func (c *classifier) nearestIdentity(w int) string {
	path := c.walk[:0]
	found := ""
	for x := w; x >= 0; x = c.wrapperAbove(x) {
		if c.s[x].upNameOK {
			found = c.s[x].upName
			break
		}
		path = append(path, int32(x))
		if n := c.ownIdentity(x); n != "" {
			found = n
			break
		}
	}
	for _, x := range path {
		c.s[x].upName, c.s[x].upNameOK = found, true
	}
	c.walk = path
	return found
}

// serverName returns server t's identity.
func (c *classifier) serverName(t int) string {
	if c.s[t].nameOK {
		return c.s[t].name
	}
	n := c.ownIdentity(t)
	if n == "" && c.procs[t].ID != c.root {
		if w := c.wrapperAbove(t); w >= 0 {
			n = c.nearestIdentity(w)
		}
	}
	c.s[t].named = n != "" && n != redact.Marker
	if n == "" {
		n = Name(c.procs[t])
	}
	c.s[t].name, c.s[t].nameOK = n, true
	return n
}

// countServers counts the servers below each wrapper (up to 2) and keeps
// one of them, children before their creators.
func (c *classifier) countServers() {
	for k := len(c.order) - 1; k >= 0; k-- {
		t := int(c.order[k])
		var add uint8
		var one int32
		switch c.s[t].kind {
		case kServer:
			if c.procs[t].ID == c.root {
				continue
			}
			add, one = 1, int32(t)
		case kWrapper:
			add, one = c.s[t].count, c.s[t].one
		}
		if add == 0 {
			continue
		}
		if w := c.wrapperAbove(t); w >= 0 {
			if c.s[w].count == 0 {
				c.s[w].one = one
			}
			c.s[w].count = min(c.s[w].count+add, 2)
		}
	}
}

// wrapperChain returns the short names of the wrappers from the host down
// to wrapper w (the first maxChain-1), creators before children.
func (c *classifier) wrapperChain(w int) []string {
	if w < 0 {
		return nil
	}
	if c.s[w].chainOK {
		return c.s[w].chain
	}
	path := c.walk[:0]
	for x := w; x >= 0 && !c.s[x].chainOK; x = c.wrapperAbove(x) {
		path = append(path, int32(x))
	}
	for k := len(path) - 1; k >= 0; k-- {
		x := int(path[k])
		var above []string
		if u := c.wrapperAbove(x); u >= 0 {
			above = c.s[u].chain
		}
		ch := above
		if executed(&c.procs[x]) && len(above) < maxChain-1 {
			ch = make([]string, len(above)+1)
			copy(ch, above)
			ch[len(above)] = c.current(x).prog
		}
		c.s[x].chain, c.s[x].chainOK = ch, true
	}
	c.walk = path
	return c.s[w].chain
}

// program returns the short name of server t's program: the basename of
// its argv[0] (or filename), else its comm.
func (c *classifier) program(t int) string {
	var n string
	if top := c.current(t).top; top != nil {
		n = cand{basename(top.argv[0]), top, 0}.safe()
	}
	if n == "" {
		n = cand{c.procs[t].Comm, nil, -1}.safe()
	}
	return n
}

func (c *classifier) member(t int) Member {
	switch c.s[t].kind {
	case kHost:
		return Member{Role: Host}
	case kWrapper:
		if c.s[t].count == 1 {
			return Member{Role: Wrapper, Server: c.serverName(int(c.s[t].one))}
		}
		return Member{Role: Wrapper, Server: c.ownIdentity(t)}
	case kServer:
		above := c.wrapperChain(c.wrapperAbove(t))
		chain := make([]string, len(above), len(above)+1)
		copy(chain, above)
		if pr := c.program(t); pr != "" {
			chain = append(chain, pr)
		}
		if len(chain) == 0 {
			chain = nil
		}
		name := c.serverName(t)
		return Member{Role: Server, Server: name, Chain: chain, ServerID: c.procs[t].ID, Named: c.s[t].named}
	case kTool:
		return Member{Role: Tool}
	case kBelow:
		if s := c.s[t].srv; s >= 0 {
			return Member{Role: Other, Server: c.serverName(int(s)), ServerID: c.procs[s].ID}
		}
		return Member{Role: Other, ServerID: c.root}
	}
	return Member{Role: Other}
}
