package orphans

import (
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mcptrace/mcptrace/lineage"
	"github.com/mcptrace/mcptrace/procfs"
)

// world is a synthetic node: every process the graph knows, alive or
// exited, by PID.
type world struct {
	all   map[uint32]*Proc
	order []uint32
}

func newWorld() *world { return &world{all: map[uint32]*Proc{}} }

func id(pid uint32) lineage.ID { return lineage.ID{PID: pid, Start: uint64(pid) * 1e9} }

// add a process created by creator (0: none known), running argv, with
// stdin pipe (0: /dev/null) held by writers writers (0: cut off for an
// hour; -1: not known).
func (w *world) add(pid, creator uint32, pipe uint64, writers int, argv ...string) *Proc {
	p := &Proc{Process: lineage.Process{ID: id(pid), Comm: argv[0], UID: 1000,
		Images: []lineage.Image{{Filename: "/usr/bin/" + argv[0], Argv: argv}}},
		PPID: creator, FactsOK: true,
		Facts: procfs.Facts{Stdin: procfs.StdinDevNull, Stdout: procfs.StdinFile, UIDs: procfs.UIDs{Real: 1000, Effective: 1000, Saved: 1000},
			Cgroup: "/user.slice/user-1000.slice/session-2.scope"},
		Usage: procfs.Usage{RSSBytes: 10 << 20}}
	if creator != 0 {
		p.Creator = id(creator)
	}
	if pipe != 0 {
		// A host's stdio: a pipe for stdin and one for stdout.
		p.Facts.Stdin, p.Facts.StdinInode = procfs.StdinPipe, pipe
		p.Facts.Stdout, p.Facts.StdoutInode = procfs.StdinPipe, pipe+1<<20
		p.Stdio = procfs.Stdio{InLocal: true, OutLocal: true}
		if writers == 0 {
			// Cut off since long before this look, both ways.
			p.CutFor, p.OutCutFor = time.Hour, time.Hour
			p.Stdio.InCut, p.Stdio.OutCut = true, true
		}
	}
	w.all[pid] = p
	w.order = append(w.order, pid)
	return p
}

func (w *world) exit(pid uint32) { w.all[pid].Exited = true }

func (w *world) input() Input {
	var procs []Proc
	for _, pid := range w.order {
		if p := w.all[pid]; !p.Exited && pid != 1 {
			procs = append(procs, *p)
		}
	}
	return Input{
		Procs: procs,
		Ancestors: func(x lineage.ID) []lineage.Process {
			var out []lineage.Process
			for p := w.all[x.PID]; p != nil; {
				out = append(out, p.Process)
				if p.Creator.IsZero() {
					break
				}
				p = w.all[p.Creator.PID]
			}
			return out
		},
		HostKind: func(p lineage.Process) string {
			if p.Comm == "claude" || p.Comm == "codex" {
				return p.Comm
			}
			return ""
		},
		IdleAfter:    5 * time.Minute,
		ConfirmAfter: 10 * time.Second,
	}
}

// npxChain adds host → npx → sh → node running pkg, all reading pipe.
func (w *world) npxChain(host, base uint32, pipe uint64, writers int, pkg string) {
	w.add(base, host, pipe, writers, "npx", "-y", pkg)
	w.add(base+1, base, pipe, writers, "sh", "-c", "server")
	w.add(base+2, base+1, pipe, writers, "node", "/home/u/.npm/_npx/1/node_modules/"+pkg+"/dist/index.js")
}

// find is Find, asked twice: with every process read, and with their
// facts read only when Find asks (Input.Read). Both must answer alike.
func find(t *testing.T, in Input) Found {
	t.Helper()
	whole := Find(in)
	lazy, read := lazily(in)
	if got := Find(lazy); !reflect.DeepEqual(got, whole) {
		t.Errorf("Find reading only what it asked for (%d of %d processes):\n%+v\nwith every process read:\n%+v", len(*read), len(in.Procs), got, whole)
	}
	return whole
}

// lazily is in with its Procs' lineage only, and a Read that gives each
// its facts back and records whom it read.
func lazily(in Input) (Input, *[]uint32) {
	facts := map[lineage.ID]Proc{}
	lazy := in
	lazy.Procs = make([]Proc, len(in.Procs))
	for i, p := range in.Procs {
		facts[p.ID] = p
		lazy.Procs[i] = Proc{Process: p.Process}
	}
	var read []uint32
	lazy.Read = func(p *Proc) {
		read = append(read, p.ID.PID)
		f := facts[p.ID]
		f.Process = p.Process // what /proc says, not the lineage Find holds
		*p = f
	}
	return lazy, &read
}

// TestFindReadsOnlyWhatAListingCanUse: a shell script's hundred sleepers,
// each what a wrapper started and cut off from its stdin, are read for
// nothing; a leaked npx chain beside them is read whole, with what its
// server started, and listed.
func TestFindReadsOnlyWhatAListingCanUse(t *testing.T) {
	w := newWorld()
	w.add(1, 0, 0, 0, "systemd")
	w.add(50, 1, 0, 0, "bash")
	w.add(60, 50, 0, 0, "sh", "-c", "for i in $(seq 100); do sleep 3600 & done; wait")
	for pid := uint32(1000); pid < 1100; pid++ {
		w.add(pid, 60, 4242, 0, "sleep", "3600")
	}
	w.add(100, 1, 0, 0, "claude")
	w.npxChain(100, 110, 77, 0, "@acme/server-x")
	w.add(113, 112, 77, 0, "node", "worker.js") // the server's own worker
	w.exit(100)
	w.all[110].PPID = 1
	lazy, read := lazily(w.input())
	got := find(t, w.input())
	Find(lazy)
	if len(got.Orphans) != 1 || got.Orphans[0].Server != id(112) || got.Orphans[0].Processes != 4 {
		t.Fatalf("listed %+v, want the npx chain's server 112, 4 processes with its worker", got.Orphans)
	}
	slices.Sort(*read)
	if want := []uint32{110, 111, 112, 113}; !slices.Equal(*read, want) {
		t.Errorf("read %v, want %v: the chain of the one server and its worker, nothing else", *read, want)
	}
}

func TestFindListsLeakedServersWithTheirEvidenceAndNoBystanders(t *testing.T) {
	w := newWorld()
	w.add(1, 0, 0, 0, "systemd")
	// A Claude session that exited: its npx chain lives on, reparented to
	// init, reading a pipe nobody writes.
	w.add(100, 1, 0, 0, "claude")
	w.npxChain(100, 110, 77, 0, "@acme/server-x")
	w.exit(100)
	for _, pid := range []uint32{110} {
		w.all[pid].PPID = 1
	}
	// A live Codex whose sh -c wrapper exited: the server is reparented
	// but Codex still writes its stdin. Not leaked.
	w.add(200, 1, 0, 0, "codex")
	w.add(210, 200, 88, 1, "sh", "-c", "server")
	w.add(211, 210, 88, 1, "node", "/srv/node_modules/@acme/server-y/index.js")
	w.exit(210)
	w.all[211].PPID = 1
	// Bystanders: a user's own node script cut off from its pipe; a
	// packaged server run as a systemd service; a spared one; a daemon on
	// /dev/null.
	w.add(300, 1, 99, 0, "node", "/home/u/project/app.js")
	svc := w.add(310, 1, 98, 0, "node", "/opt/node_modules/@acme/server-z/index.js")
	svc.Facts.Cgroup = "/system.slice/acme-mcp.service"
	w.add(320, 1, 97, 0, "node", "/opt/node_modules/@acme/keep-me/index.js")
	w.add(330, 1, 0, 0, "node", "/opt/node_modules/@acme/daemon/index.js")
	in := w.input()
	in.Spared = func(p lineage.Process) bool { return strings.Contains(strings.Join(p.Current().Argv, " "), "keep-me") }

	got := find(t, in).Orphans
	if len(got) != 1 {
		t.Fatalf("found %d, want the leaked chain only: %+v", len(got), got)
	}
	o := got[0]
	if o.Server != id(112) || o.Top != id(110) || o.Name != "@acme/server-x" || o.Kind != HostGone || o.Confidence != Certain || o.HostKind != "claude" {
		t.Errorf("orphan %+v", o)
	}
	if o.Processes != 3 || o.RSSBytes != 30<<20 || !slices.Equal(o.Chain, []string{"npx", "sh", "node"}) {
		t.Errorf("totals and chain: %d processes, %d bytes, chain %v", o.Processes, o.RSSBytes, o.Chain)
	}
	if !strings.Contains(strings.Join(o.Evidence, "; "), "reparented to init") {
		t.Errorf("evidence %q", o.Evidence)
	}
}

// Certain needs both ends of the stdio dead. A server whose stdin was
// cut off while its live host still reads its stdout is only likely: the
// host may still mean to use it. With both ends dead it is certain
// whoever its parent is; one whose writers are unknown is not listed.
func TestFindIsCertainOnlyWhenBothEndsOfItsStdioAreDead(t *testing.T) {
	w := newWorld()
	w.add(1, 0, 0, 0, "systemd")
	w.add(50, 1, 0, 0, "claude")
	w.npxChain(50, 60, 5, 0, "@acme/read")
	for _, pid := range []uint32{60, 61, 62} {
		w.all[pid].OutCutFor, w.all[pid].Stdio.OutCut = 0, false
	}
	w.npxChain(50, 70, 6, 0, "@acme/dead")
	w.npxChain(50, 80, 7, -1, "@acme/unknown")
	got := find(t, w.input()).Orphans
	if len(got) != 2 || got[0].Name != "@acme/dead" || got[0].Confidence != Certain || got[1].Name != "@acme/read" ||
		got[1].Confidence != Likely || got[0].HostKind != "claude" {
		t.Fatalf("got %+v", got)
	}
}

// A live host that started the same server again leaves the older
// instance superseded: listed as likely once it has been idle long
// enough; the newer one, and another server with the same name but
// another command line, are not.
func TestFindListsTheOlderIdleInstanceOfAServerItsLiveHostStartedAgain(t *testing.T) {
	for _, tc := range []struct {
		idle time.Duration
		want int
	}{{10 * time.Minute, 1}, {time.Minute, 0}} {
		w := newWorld()
		w.add(1, 0, 0, 0, "systemd")
		w.add(400, 1, 0, 0, "codex")
		w.npxChain(400, 410, 41, 1, "@acme/server-fs")
		w.npxChain(400, 420, 42, 1, "@acme/server-fs")
		w.add(430, 400, 43, 1, "node", "/srv/node_modules/@acme/server-fs/dist/index.js", "--other-root")
		w.all[412].IdleFor = tc.idle
		f := find(t, w.input())
		got := f.Orphans
		if len(got) != tc.want {
			t.Fatalf("idle %v: got %+v", tc.idle, got)
		}
		if tc.want == 0 {
			// Shown at once as a candidate, with what is still missing.
			if len(f.Candidates) != 1 || f.Candidates[0].Server != id(412) ||
				!strings.Contains(strings.Join(f.Candidates[0].Evidence, "; "), "idle 1m0s of the 5m0s") {
				t.Errorf("idle %v: candidates %+v, want the older instance, idle 1m of 5m", tc.idle, f.Candidates)
			}
			continue
		}
		o := got[0]
		if o.Server != id(412) || o.Top != id(410) || o.Newer != id(422) || o.Host != id(400) || o.Kind != Superseded ||
			o.Confidence != Likely || o.HostKind != "codex" {
			t.Errorf("orphan %+v", o)
		}
	}
}

// What a leaked server started is ended with it, not listed again.
func TestFindListsAServerNotTheServersItStarted(t *testing.T) {
	w := newWorld()
	w.add(1, 0, 0, 0, "systemd")
	w.npxChain(1, 500, 50, 0, "@acme/parent-mcp")
	w.add(510, 502, 50, 0, "node", "/home/u/.npm/_npx/1/node_modules/@acme/worker-mcp/index.js")
	got := find(t, w.input()).Orphans
	if len(got) != 1 || got[0].Server != id(502) || got[0].Processes != 4 {
		t.Fatalf("got %+v", got)
	}
}

// A wrapper two servers share is not the top of either's leaked chain:
// ending the older instance must not end the newer one below it.
func TestFindNeverTopsAChainWithAWrapperTwoServersShare(t *testing.T) {
	w := newWorld()
	w.add(1, 0, 0, 0, "systemd")
	w.add(600, 1, 0, 0, "codex")
	w.add(610, 600, 61, 1, "sh", "-c", "npx -y @acme/s & npx -y @acme/s")
	w.add(620, 610, 61, 1, "npx", "-y", "@acme/s")
	w.add(621, 620, 61, 1, "node", "/srv/node_modules/@acme/s/index.js")
	w.add(630, 610, 61, 1, "npx", "-y", "@acme/s")
	w.add(631, 630, 61, 1, "node", "/srv/node_modules/@acme/s/index.js")
	w.all[621].IdleFor = time.Hour
	got := find(t, w.input()).Orphans
	if len(got) != 1 || got[0].Server != id(621) || got[0].Top != id(620) {
		t.Fatalf("got %+v, want the older server topped by its own npx, not the shared sh", got)
	}
}

// A stdin seen cut off only just now is pending, not listed: the server
// of a one-shot pipeline may still be finishing.
func TestFindWaitsForACutOffToLast(t *testing.T) {
	w := newWorld()
	w.add(1, 0, 0, 0, "systemd")
	w.npxChain(1, 700, 70, 0, "@acme/just-cut-mcp")
	for _, pid := range []uint32{700, 701, 702} {
		w.all[pid].CutFor, w.all[pid].OutCutFor = time.Second, 2*time.Second
	}
	f := find(t, w.input())
	if len(f.Orphans) != 0 || f.Pending != 1 || f.ConfirmIn != 9*time.Second || len(f.Candidates) != 1 {
		t.Fatalf("found %+v, want one pending, confirmable in 9s", f)
	}
	if ev := strings.Join(f.Candidates[0].Evidence, "; "); !strings.Contains(ev, "cut off 1s of the 10s") {
		t.Errorf("the candidate's evidence says nothing of what is still missing: %q", ev)
	}
}

// A creator younger than its child (a PID guessed at seed time and
// reused since) is not part of the child's chain.
func TestFindIgnoresACreatorYoungerThanItsChild(t *testing.T) {
	w := newWorld()
	w.add(1, 0, 0, 0, "systemd")
	w.add(800, 1, 80, 0, "node", "/srv/node_modules/@acme/old-mcp/index.js")
	w.add(900, 1, 80, 0, "npx", "-y", "@acme/victim-mcp")
	w.all[800].Creator = id(900) // reused PID guessed as creator
	got := find(t, w.input()).Orphans
	if len(got) != 1 || got[0].Top != id(800) || got[0].Name != "@acme/old-mcp" {
		t.Fatalf("got %+v, want @acme/old-mcp topped by itself", got)
	}

	// The same further up: a server's wrapper, whose creator is the
	// reused PID, tops the chain.
	w = newWorld()
	w.add(1, 0, 0, 0, "systemd")
	w.add(810, 1, 80, 0, "sh", "-c", "exec node /srv/node_modules/@acme/deep-mcp/index.js")
	w.add(811, 810, 80, 0, "node", "/srv/node_modules/@acme/deep-mcp/index.js")
	w.add(950, 1, 80, 0, "npx", "-y", "@acme/victim-mcp")
	w.all[810].Creator = id(950)
	got = find(t, w.input()).Orphans
	if len(got) != 1 || got[0].Server != id(811) || got[0].Top != id(810) {
		t.Fatalf("got %+v, want @acme/deep-mcp topped by its sh -c, not by the younger npx", got)
	}
}

// A container is listed only when it was started attached to its
// client's stdin (docker run -i), the kernel saw the client that started
// it exit, and its stdin stayed cut off: certain, its client's; never
// while its client still runs, never when its client is not known, and
// never on a cut stdin alone.
func TestAContainerIsListedOnlyWhenItsDockerRunClientIsGone(t *testing.T) {
	const cid = "4c1e0d5c0b2f4e3a9f8e7d6c5b4a39281706f5e4d3c2b1a0f9e8d7c6b5a49382"
	client := lineage.ID{PID: 300, Start: 3e9}
	leaked := func(f func(*Container)) Container {
		c := Container{ID: cid, Image: "ghcr.io/acme/mcp:1", AttachedStdin: true, CutFor: time.Hour,
			Init: lineage.Process{ID: lineage.ID{PID: 400, Start: 4e9}, Comm: "server"}, Client: client, ClientUID: 1000, ClientExited: true}
		if f != nil {
			f(&c)
		}
		return c
	}
	for _, tc := range []struct {
		name    string
		c       Container
		want    Confidence // "": not listed
		uid     uint32
		pending int
	}{
		{"its client exited and its image has an MCP name: certain, and its client's", leaked(nil), Certain, 1000, 0},
		{"its client exited, its image has no MCP name: likely", leaked(func(c *Container) { c.Image = "alpine:3" }), Likely, 1000, 0},
		{"its client is not known: never (a closed stdin says nothing of the client)", leaked(func(c *Container) { c.Client, c.ClientUID, c.ClientExited = lineage.ID{}, 0, false }), "", 0, 0},
		{"its client still runs", leaked(func(c *Container) { c.ClientExited = false }), "", 0, 0},
		{"another client of it still runs", leaked(func(c *Container) { c.ClientsAlive = 1 }), "", 0, 0},
		{"two clients could have started it: never", leaked(func(c *Container) { c.Client, c.ClientUID, c.ClientExited, c.Contested = lineage.ID{}, 0, false, true }), "", 0, 0},
		{"its client is not known, its stdin cut off just now: not even pending", leaked(func(c *Container) { c.Client, c.ClientExited, c.CutFor = lineage.ID{}, false, time.Second }), "", 0, 0},
		{"started detached or by compose: never", leaked(func(c *Container) { c.AttachedStdin = false }), "", 0, 0},
		{"its stdin still has a writer", leaked(func(c *Container) { c.CutFor = 0 }), "", 0, 0},
		{"its stdin was cut off just now: pending", leaked(func(c *Container) { c.CutFor = time.Second }), "", 0, 1},
		{"spared by a rule", leaked(func(c *Container) { c.Init.Comm = "spared" }), "", 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := find(t, Input{Containers: []Container{tc.c}, ConfirmAfter: 10 * time.Second,
				Spared: func(p lineage.Process) bool { return p.Comm == "spared" }})
			if f.Pending != tc.pending {
				t.Errorf("pending = %d, want %d", f.Pending, tc.pending)
			}
			if tc.want == "" {
				if len(f.Orphans) != 0 {
					t.Errorf("listed %+v", f.Orphans)
				}
				return
			}
			if len(f.Orphans) != 1 {
				t.Fatalf("listed %d, want 1", len(f.Orphans))
			}
			o := f.Orphans[0]
			if o.Confidence != tc.want || o.Kind != ClientGone || o.UID != tc.uid || o.Container != cid || o.Server != tc.c.Init.ID ||
				o.Top != tc.c.Init.ID || o.Name != tc.c.Image || o.HostKind != UnknownHost {
				t.Errorf("orphan = %+v", o)
			}
		})
	}
}

// The evidence rule, one shape at a time: what ordinary programs look
// like in the states that make a leak look real (their stdin and stdout
// pipes cut off under init, their live parent having started them
// twice), and what proves an MCP server. A name alone, or a stdin alone,
// never lists anything.
func TestFindProvesAnMCPServerByLineageOrByNameWithStdio(t *testing.T) {
	type shape struct {
		name  string
		build func(w *world) // adds pid 100 (its chain) under init (pid 1)
		in    func(in *Input)
		want  Confidence // "": not listed, nor a candidate
		proof Proof
		uid   uint32
	}
	cut := func(argv ...string) func(w *world) {
		return func(w *world) { w.add(100, 1, 10, 0, argv...) }
	}
	holds := func(in *Input) { in.HoldsStdio = func(lineage.Process, *Proc) bool { return true } }
	twice := func(argv ...string) func(w *world) {
		return func(w *world) {
			w.add(90, 1, 0, 0, "editor")
			w.add(100, 90, 10, 1, argv...)
			w.add(101, 90, 11, 1, argv...)
			w.all[100].IdleFor = time.Hour
		}
	}
	for _, tc := range []shape{
		// Bystanders whose stdin and stdout pipes were cut off under init.
		{name: "python3 -m http.server", build: cut("python3", "-m", "http.server", "8000")},
		{name: "uvicorn", build: cut("python3", "-m", "uvicorn", "app:app")},
		{name: "celery worker", build: cut("python3", "-m", "celery", "-A", "proj", "worker")},
		{name: "jupyter lab", build: cut("python3", "-m", "jupyterlab")},
		{name: "vite", build: cut("node", "/srv/app/node_modules/vite/bin/vite.js")},
		{name: "npx http-server", build: func(w *world) { w.npxChain(1, 100, 10, 0, "http-server") }},
		{name: "typescript-language-server --stdio", build: cut("node", "/home/u/node_modules/typescript-language-server/lib/cli.mjs", "--stdio")},
		{name: "pyright-langserver --stdio", build: cut("node", "/home/u/node_modules/pyright/langserver.index.js", "--stdio")},
		{name: "the MCP Inspector", build: func(w *world) { w.npxChain(1, 100, 10, 0, "@modelcontextprotocol/inspector") }},
		// An MCP name without the stdio evidence.
		{name: "an MCP name, stdin cut, stdout a file", build: func(w *world) {
			p := w.add(100, 1, 10, 0, "node", "/srv/node_modules/mcp-server-x/index.js")
			p.Facts.Stdout, p.Stdio.OutLocal, p.Stdio.OutCut, p.OutCutFor = procfs.StdinFile, false, false, 0
		}},
		{name: "an MCP name on /dev/null", build: func(w *world) { w.add(100, 1, 0, 0, "node", "/srv/node_modules/mcp-server-x/index.js") }},
		{name: "an MCP name on a TCP socket whose client hung up (inetd-style)", build: func(w *world) {
			p := w.add(100, 1, 10, 0, "node", "/srv/node_modules/mcp-server-x/index.js")
			p.Facts.Stdin, p.Facts.Stdout = procfs.StdinSocket, procfs.StdinSocket
			p.Stdio.InLocal, p.Stdio.OutLocal = false, false
		}},
		{name: "an MCP name on socketpairs two processes made", build: func(w *world) {
			p := w.add(100, 1, 10, 0, "node", "/srv/node_modules/mcp-server-x/index.js")
			p.Stdio.InPeer, p.Stdio.OutPeer = 40, 41
		}},
		{name: "an MCP name, stdin cut, stdout still read", build: func(w *world) {
			p := w.add(100, 1, 10, 0, "node", "/srv/node_modules/mcp-server-x/index.js")
			p.OutCutFor, p.Stdio.OutCut = 0, false
		}},
		{name: "an MCP name whose uid changed (setuid)", build: func(w *world) {
			w.add(100, 1, 10, 0, "node", "/srv/node_modules/mcp-server-x/index.js").Facts.UIDs.Effective = 0
		}},
		// Superseded by a live parent: bystanders, then an MCP server.
		{name: "a language server its live editor started twice", build: twice("node", "/home/u/node_modules/typescript-language-server/lib/cli.mjs", "--stdio"), in: holds},
		{name: "python3 -m http.server a live supervisor started twice", build: twice("python3", "-m", "http.server"), in: holds},
		{name: "an MCP server its live host started twice, stdio not held by the host", build: twice("npx", "-y", "mcp-server-fetch")},
		{name: "an MCP server its live host started twice and holds", build: twice("python3", "-m", "mcp_server_fetch"), in: holds,
			want: Likely, proof: ProofNameAndStdio, uid: 1000},
		// MCP servers whose host vanished.
		{name: "an MCP name, stdin and stdout cut, reparented", build: func(w *world) { w.npxChain(1, 100, 10, 0, "@acme/weather-mcp") },
			want: Certain, proof: ProofNameAndStdio, uid: 1000},
		{name: "a listed server without an MCP word", build: func(w *world) { w.npxChain(1, 100, 10, 0, "@wonderwhy-er/desktop-commander") },
			want: Certain, proof: ProofNameAndStdio, uid: 1000},
		{name: "an MCP name, both ends cut off, under its live creator", build: func(w *world) {
			w.add(90, 1, 0, 0, "bash")
			w.npxChain(90, 100, 10, 0, "@acme/weather-mcp")
		}, want: Certain, proof: ProofNameAndStdio, uid: 1000},
		{name: "no MCP name, but a Claude host started it", build: func(w *world) {
			w.add(90, 1, 0, 0, "claude")
			w.npxChain(90, 100, 10, 0, "@acme/tools")
			w.exit(90)
		}, want: Certain, proof: ProofLineage, uid: 1000},
		{name: "no MCP name, but `mcptrace run` started it", build: func(w *world) {
			w.add(90, 1, 0, 0, "mcptrace", "run", "--", "npx", "-y", "@acme/tools")
			w.add(100, 90, 10, 0, "npx", "-y", "@acme/tools")
			w.add(101, 100, 10, 0, "node", "/srv/node_modules/@acme/tools/index.js")
			w.exit(90)
		}, want: Certain, proof: ProofLineage, uid: 1000},
		{name: "an MCP server that became another uid since its exec: listed under the uid it runs as", build: func(w *world) {
			p := w.add(100, 1, 10, 0, "node", "/srv/node_modules/mcp-server-x/index.js")
			p.Facts.UIDs = procfs.UIDs{Real: 0, Effective: 0, Saved: 0}
		}, want: Certain, proof: ProofNameAndStdio, uid: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld()
			w.add(1, 0, 0, 0, "systemd")
			tc.build(w)
			in := w.input()
			in.IdleAfter = time.Minute
			if tc.in != nil {
				tc.in(&in)
			}
			f := find(t, in)
			if tc.want == "" {
				if len(f.Orphans)+len(f.Candidates) != 0 {
					t.Errorf("listed %+v, candidates %+v", f.Orphans, f.Candidates)
				}
				return
			}
			if len(f.Orphans) != 1 {
				t.Fatalf("listed %+v, want one", f.Orphans)
			}
			o := f.Orphans[0]
			if o.Confidence != tc.want || o.Proof != tc.proof || o.UID != tc.uid {
				t.Errorf("listed %s by %s as uid %d (%q), want %s by %s as uid %d", o.Confidence, o.Proof, o.UID, o.Evidence, tc.want, tc.proof, tc.uid)
			}
			for _, e := range o.Chain {
				if strings.ContainsAny(e, "=/") || strings.Contains(e, "-y") || strings.HasPrefix(e, "-") {
					t.Errorf("a chain element carries an argument: %q", o.Chain)
				}
			}
		})
	}
}

// A day-one chain read from /proc: npm rewrote its npx process's argv
// into one title ("npm exec PKG ARGS…", padded with empty elements).
// The server is the node process below it, named from its package, and
// no element of the chain carries an argument.
func TestFindReadsNpmsProcessTitleAsTheWrapperItIs(t *testing.T) {
	w := newWorld()
	w.add(1, 0, 0, 0, "systemd")
	npx := w.add(100, 1, 10, 0, "npm exec @modelcontextprotocol/server-filesystem /home/u/secret-project", "", "", "")
	npx.Comm = "npm exec @model"
	npx.Images[0] = lineage.Image{Filename: "/usr/bin/node", Argv: npx.Images[0].Argv, Source: lineage.SourceProc}
	w.add(101, 100, 10, 0, "sh", "-c", "mcp-server-filesystem /home/u/secret-project")
	w.add(102, 101, 10, 0, "node", "/home/u/.npm/_npx/9/node_modules/.bin/mcp-server-filesystem", "/home/u/secret-project")
	for _, pid := range []uint32{101, 102} {
		w.all[pid].Images[0].Source = lineage.SourceProc
	}
	got := find(t, w.input()).Orphans
	if len(got) != 1 {
		t.Fatalf("got %+v, want the filesystem server", got)
	}
	o := got[0]
	if o.Server != id(102) || o.Top != id(100) || o.Name != "@modelcontextprotocol/server-filesystem" || o.Confidence != Certain {
		t.Errorf("orphan %+v", o)
	}
	if !slices.Equal(o.Chain, []string{"npm exec", "sh", "node"}) {
		t.Errorf("chain %q, want the wrappers' short names and the program", o.Chain)
	}
	if img := w.all[100].Images[0].Argv; len(img) != 4 {
		t.Errorf("Find changed the graph's copy of the title: %q", img)
	}
}

func TestMCPNameKnowsTheEcosystemAndNothingElse(t *testing.T) {
	for name, want := range map[string]bool{
		"@modelcontextprotocol/server-filesystem": true, "mcp-server-fetch": true, "mcp_server_time": true,
		"ghcr.io/github/github-mcp-server": true, "@playwright/mcp": true, "@upstash/context7-mcp": true, "mcp/fetch": true,
		"@wonderwhy-er/desktop-commander": true,
		"@modelcontextprotocol/inspector": false, "mcp-inspector": false, "mcp": false, "mcptrace": false, "fastmcpx": false,
		"http-server": false, "typescript-language-server": false, "pyright": false, "uvicorn": false, "<redacted>": false, "": false,
	} {
		if got := MCPName(name); got != want {
			t.Errorf("MCPName(%q) = %v, want %v", name, got, want)
		}
	}
}

// BenchmarkFindAmongAShellsSleepers is the look the agent's metrics make
// on a node where a script's bash -c started 10,000 sleepers: each is a
// candidate (what a wrapper started), none a server.
func BenchmarkFindAmongAShellsSleepers(b *testing.B) {
	w := newWorld()
	w.add(2, 0, 0, 0, "bash")
	w.add(3, 2, 0, 0, "bash", "-c", "for i in $(seq 10000); do sleep 3600 & done; wait")
	for i := range uint32(10_000) {
		w.add(10+i, 3, 0, 0, "sleep", "3600")
	}
	in := w.input()
	b.ReportAllocs()
	for b.Loop() {
		if f := Find(in); len(f.Orphans) != 0 {
			b.Fatalf("%d sleepers listed", len(f.Orphans))
		}
	}
}
