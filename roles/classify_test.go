package roles

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/mcptrace/mcptrace/lineage"
	"github.com/mcptrace/mcptrace/redact"
)

func id(pid uint32) lineage.ID { return lineage.ID{PID: pid, Start: uint64(pid) * 1000} }

// mk makes process pid, created by creator (0: unknown), with images.
func mk(pid, creator uint32, ims ...lineage.Image) lineage.Process {
	p := lineage.Process{ID: id(pid), Parent: id(creator), Images: ims}
	if creator != 0 {
		p.Creator = id(creator)
	}
	if len(ims) > 0 {
		p.Comm = basename(p.Current().Filename)
	}
	return p
}

// exe is an image executed by the process itself; inh one inherited.
func exe(filename string, argv ...string) lineage.Image {
	return lineage.Image{Filename: filename, Argv: argv, Source: lineage.SourceKernel}
}

func inh(im lineage.Image) lineage.Image {
	im.Source = lineage.SourceInherited
	return im
}

func exited(p lineage.Process) lineage.Process {
	p.Exited = true
	return p
}

// byPID classifies procs and returns the members by pid.
func byPID(root uint32, rootIsHost bool, procs []lineage.Process) map[uint32]Member {
	ms := Classify(id(root), rootIsHost, procs)
	out := make(map[uint32]Member, len(ms))
	for i, m := range ms {
		out[procs[i].ID.PID] = m
	}
	return out
}

func checkMembers(t *testing.T, got map[uint32]Member, want map[uint32]Member) {
	t.Helper()
	for pid, w := range want {
		if g := got[pid]; !reflect.DeepEqual(g, w) {
			t.Errorf("pid %d: got %+v, want %+v", pid, g, w)
		}
	}
}

const fsPkg = "@modelcontextprotocol/server-filesystem"

var hostImage = exe("/usr/bin/node", "node", "host.mjs", "/tmp/d")

// sdkChain is what the official SDK's StdioClientTransport leaves when a
// host starts `npx --no-install @modelcontextprotocol/server-filesystem
// /tmp/d`: npx (a node script with a "#!/usr/bin/env node" shebang) runs
// the package's bin through sh -c, and that bin is a node script too.
func sdkChain() []lineage.Process {
	npx := exe("/usr/bin/node", "node", "/usr/bin/npx", "--no-install", fsPkg, "/tmp/d")
	sh := exe("/bin/sh", "sh", "-c", "mcp-server-filesystem /tmp/d")
	return []lineage.Process{
		mk(100, 1, hostImage),
		mk(101, 100, inh(hostImage),
			exe("/usr/bin/npx", "/usr/bin/env", "node", "/usr/bin/npx", "--no-install", fsPkg, "/tmp/d"),
			npx),
		mk(102, 101, inh(npx), sh),
		mk(103, 102,
			exe("/root/.npm/_npx/1234/node_modules/.bin/mcp-server-filesystem",
				"/usr/bin/env", "node", "/root/.npm/_npx/1234/node_modules/.bin/mcp-server-filesystem", "/tmp/d"),
			exe("/usr/bin/node", "node", "/root/.npm/_npx/1234/node_modules/.bin/mcp-server-filesystem", "/tmp/d")),
	}
}

func TestSDKFilesystemChainNamesTheNpxPackage(t *testing.T) {
	checkMembers(t, byPID(100, true, sdkChain()), map[uint32]Member{
		100: {Role: Host},
		101: {Role: Wrapper, Server: fsPkg},
		102: {Role: Wrapper, Server: fsPkg},
		103: {Role: Server, Server: fsPkg, Chain: []string{"npx", "sh", "node"}, ServerID: id(103), Named: true},
	})
}

func TestExitedWrappersStillNameTheServer(t *testing.T) {
	procs := sdkChain()
	procs[1], procs[2] = exited(procs[1]), exited(procs[2])
	checkMembers(t, byPID(100, true, procs), map[uint32]Member{
		101: {Role: Wrapper, Server: fsPkg},
		102: {Role: Wrapper, Server: fsPkg},
		103: {Role: Server, Server: fsPkg, Chain: []string{"npx", "sh", "node"}, ServerID: id(103), Named: true},
	})
}

func TestFoldedWrappersLeaveTheServersOwnName(t *testing.T) {
	// The graph folded the exited npx and sh out of the chain: the server
	// names the host as its creator.
	procs := sdkChain()
	srv := procs[3]
	srv.Creator, srv.CreatorsElided = id(100), 2
	checkMembers(t, byPID(100, true, []lineage.Process{procs[0], srv}), map[uint32]Member{
		103: {Role: Server, Server: "mcp-server-filesystem", Chain: []string{"node"}, ServerID: id(103)},
	})
}

func TestUvxChainNamesThePythonPackage(t *testing.T) {
	uvx := exe("/root/.local/bin/uvx", "uvx", "mcp-server-fetch")
	py := "/root/.cache/uv/archive-v0/ab12/bin/python"
	procs := []lineage.Process{
		mk(100, 1, hostImage),
		mk(101, 100, inh(hostImage), uvx),
		mk(102, 101, inh(uvx), exe(py, py, "/root/.cache/uv/archive-v0/ab12/bin/mcp-server-fetch")),
	}
	checkMembers(t, byPID(100, true, procs), map[uint32]Member{
		101: {Role: Wrapper, Server: "mcp-server-fetch"},
		102: {Role: Server, Server: "mcp-server-fetch", Chain: []string{"uvx", "python"}, ServerID: id(102), Named: true},
	})
}

func TestDockerClientIsAWrapperNamingItsImage(t *testing.T) {
	// The container runs under containerd, not below the client: the
	// client is a wrapper with no server below.
	procs := []lineage.Process{
		mk(100, 1, hostImage),
		mk(101, 100, inh(hostImage), exe("/usr/bin/docker", "docker", "run", "-i", "--rm", "-e", "GITHUB_TOKEN", "ghcr.io/github/github-mcp-server:v1")),
	}
	checkMembers(t, byPID(100, true, procs), map[uint32]Member{
		101: {Role: Wrapper, Server: "ghcr.io/github/github-mcp-server"},
	})
}

func TestPythonModuleServerNamesItsModule(t *testing.T) {
	procs := []lineage.Process{
		mk(100, 1, hostImage),
		mk(101, 100, inh(hostImage), exe("/usr/bin/python3", "python3", "-m", "mcp_server_time", "--local-timezone=UTC")),
	}
	checkMembers(t, byPID(100, true, procs), map[uint32]Member{
		101: {Role: Server, Server: "mcp_server_time", Chain: []string{"python3"}, ServerID: id(101), Named: true},
	})
}

func TestDirectBinaryChildIsAServerNamedByItsBasename(t *testing.T) {
	procs := []lineage.Process{
		mk(100, 1, hostImage),
		mk(101, 100, inh(hostImage), exe("/usr/local/bin/github-mcp-server", "github-mcp-server", "stdio")),
	}
	checkMembers(t, byPID(100, true, procs), map[uint32]Member{
		101: {Role: Server, Server: "github-mcp-server", Chain: []string{"github-mcp-server"}, ServerID: id(101)},
	})
}

func TestServerHelpersAreOtherUnderTheirServer(t *testing.T) {
	procs := append(sdkChain(),
		// The server's own helpers, wrappers included, are its subtree.
		mk(104, 103, exe("/bin/sh", "sh", "-c", "git status")),
		mk(105, 104, exe("/usr/bin/git", "git", "status")),
		mk(106, 103, inh(exe("/usr/bin/node", "node", "x"))),
		mk(107, 103, exe("/usr/bin/npx", "npx", "-y", "other-server")),
	)
	under := Member{Role: Other, Server: fsPkg, ServerID: id(103)}
	checkMembers(t, byPID(100, true, procs), map[uint32]Member{
		104: under, 105: under, 106: under, 107: under,
	})
}

func TestExecSubSessionRootIsTheServer(t *testing.T) {
	// `mcptrace exec --session s -- uvx mcp-server-fetch`: the root execs
	// uvx, which starts python.
	uvx := exe("/root/.local/bin/uvx", "uvx", "mcp-server-fetch")
	procs := []lineage.Process{
		mk(200, 100, inh(hostImage), exe("/usr/local/bin/mcptrace", "mcptrace", "exec", "--session", "s", "--", "uvx", "mcp-server-fetch"), uvx),
		mk(201, 200, inh(uvx), exe("/x/bin/python", "/x/bin/python", "/x/bin/mcp-server-fetch")),
	}
	checkMembers(t, byPID(200, false, procs), map[uint32]Member{
		200: {Role: Server, Server: "mcp-server-fetch", Chain: []string{"uvx"}, ServerID: id(200), Named: true},
		201: {Role: Other, Server: "mcp-server-fetch", ServerID: id(200)},
	})
	// Without the root in the list, its children are still below it.
	checkMembers(t, byPID(200, false, procs[1:]), map[uint32]Member{
		201: {Role: Other, ServerID: id(200)},
	})
}

func TestMissingCreatorIsReadFromItsOwnImage(t *testing.T) {
	procs := []lineage.Process{
		mk(100, 1, hostImage),
		mk(300, 299, exe("/usr/bin/npx", "npx", "-y", "pkg")),
		mk(301, 300, exe("/usr/bin/node", "node", "/x/node_modules/pkg/dist/index.js")),
		mk(400, 0, exe("/usr/local/bin/some-server", "some-server")),
		// The root is not listed: its children are the host's.
		mk(500, 99, exe("/usr/local/bin/other", "other")),
	}
	checkMembers(t, byPID(99, true, procs), map[uint32]Member{
		100: {Role: Server, Server: "host", Chain: []string{"node"}, ServerID: id(100)},
		300: {Role: Wrapper, Server: "pkg"},
		301: {Role: Server, Server: "pkg", Chain: []string{"npx", "node"}, ServerID: id(301), Named: true},
		400: {Role: Server, Server: "some-server", Chain: []string{"some-server"}, ServerID: id(400)},
		500: {Role: Server, Server: "other", Chain: []string{"other"}, ServerID: id(500)},
	})
}

func TestForksThatNeverExecutedFollowTheirCreator(t *testing.T) {
	npx := exe("/usr/bin/npx", "npx", "-y", "pkg")
	procs := []lineage.Process{
		mk(100, 1, hostImage),
		mk(101, 100, inh(hostImage)), // the host's own fork: the host
		mk(102, 101, exe("/usr/bin/uvx", "uvx", "mcp-server-fetch")),
		mk(103, 102, exe("/x/python", "/x/python", "/x/mcp-server-fetch")),
		mk(104, 100, inh(hostImage), npx),
		mk(105, 104, inh(npx)), // a fork of npx
		mk(106, 105, exe("/usr/bin/node", "node", "/n/node_modules/pkg/cli.js")),
		mk(107, 100), // no image known
	}
	checkMembers(t, byPID(100, true, procs), map[uint32]Member{
		101: {Role: Host},
		102: {Role: Wrapper, Server: "mcp-server-fetch"},
		103: {Role: Server, Server: "mcp-server-fetch", Chain: []string{"uvx", "python"}, ServerID: id(103), Named: true},
		104: {Role: Wrapper, Server: "pkg"},
		105: {Role: Wrapper, Server: "pkg"},
		106: {Role: Server, Server: "pkg", Chain: []string{"npx", "node"}, ServerID: id(106), Named: true},
		107: {Role: Other},
	})
}

func TestWrapperAboveTwoServersKeepsItsOwnName(t *testing.T) {
	procs := []lineage.Process{
		mk(100, 1, hostImage),
		mk(101, 100, exe("/bin/bash", "bash", "-c", "./start-all.sh")),
		mk(102, 101, exe("/usr/bin/uvx", "uvx", "mcp-server-fetch")),
		mk(103, 102, exe("/x/python", "/x/python", "/x/mcp-server-fetch")),
		mk(104, 101, exe("/usr/bin/npx", "npx", "-y", "pkg")),
		mk(105, 104, exe("/usr/bin/node", "node", "/n/node_modules/pkg/cli.js")),
		mk(106, 100, exe("/bin/sh", "sh", "-c", "npx -y pkg2")),
		mk(107, 106, exe("/usr/bin/node", "node", "/a.js")),
		mk(108, 106, exe("/usr/bin/node", "node", "/b.js")),
	}
	checkMembers(t, byPID(100, true, procs), map[uint32]Member{
		101: {Role: Wrapper},
		102: {Role: Wrapper, Server: "mcp-server-fetch"},
		104: {Role: Wrapper, Server: "pkg"},
		106: {Role: Wrapper, Server: "pkg2"},
		107: {Role: Server, Server: "pkg2", Chain: []string{"sh", "node"}, ServerID: id(107), Named: true},
		108: {Role: Server, Server: "pkg2", Chain: []string{"sh", "node"}, ServerID: id(108), Named: true},
	})
}

func TestChainKeepsTheWrappersNearestTheHost(t *testing.T) {
	procs := []lineage.Process{mk(100, 1, hostImage)}
	for k := uint32(1); k <= 10; k++ {
		procs = append(procs, mk(100+k, 99+k, exe("/usr/bin/env", "env", "A=1", "true")))
	}
	procs[1] = mk(101, 100, exe("/usr/bin/npx", "npx", "-y", "pkg"))
	procs = append(procs, mk(111, 110, exe("/usr/bin/node", "node", "s.js")))
	m := byPID(100, true, procs)[111]
	want := []string{"npx", "env", "env", "env", "env", "env", "env", "node"}
	if !reflect.DeepEqual(m.Chain, want) || m.Server != "pkg" {
		t.Errorf("got %+v, want chain %q and server pkg", m, want)
	}
}

func TestSecretPackageIsRedactedOnEveryMember(t *testing.T) {
	npx := exe("/usr/bin/npx", "npx", "-y", "@acme/"+ghToken)
	procs := []lineage.Process{
		mk(100, 1, hostImage),
		mk(101, 100, npx),
		mk(102, 101, exe("/usr/bin/node", "node", "/n/node_modules/@acme/"+ghToken+"/cli.js")),
		mk(103, 102, exe("/usr/bin/git", "git")),
	}
	checkMembers(t, byPID(100, true, procs), map[uint32]Member{
		101: {Role: Wrapper, Server: redact.Marker},
		102: {Role: Server, Server: redact.Marker, Chain: []string{"npx", "node"}, ServerID: id(102)},
		103: {Role: Other, Server: redact.Marker, ServerID: id(102)},
	})
}

func TestCreatorCyclesTerminate(t *testing.T) {
	procs := []lineage.Process{
		mk(101, 102, exe("/usr/bin/npx", "npx", "pkg")),
		mk(102, 103, exe("/bin/sh", "sh", "-c", "x")),
		mk(103, 101, exe("/usr/bin/node", "node", "s.js")),
		mk(104, 104, exe("/usr/bin/node", "node", "t.js")),
	}
	ms := Classify(id(100), true, procs)
	if len(ms) != len(procs) {
		t.Fatalf("%d members for %d processes", len(ms), len(procs))
	}
	if m := ms[3]; m.Role != Server || m.Server != "t" {
		t.Errorf("self-created process: %+v, want server t", m)
	}
}

func TestClassifyDoesNotDependOnOrder(t *testing.T) {
	procs := append(sdkChain(),
		mk(104, 103, exe("/bin/sh", "sh", "-c", "git status")),
		mk(105, 100, exe("/usr/bin/uvx", "uvx", "mcp-server-fetch")),
		mk(106, 105, exe("/x/python", "/x/python", "/x/mcp-server-fetch")),
	)
	want := byPID(100, true, procs)
	r := rand.New(rand.NewPCG(1, 2))
	for range 20 {
		r.Shuffle(len(procs), func(i, j int) { procs[i], procs[j] = procs[j], procs[i] })
		if got := byPID(100, true, procs); !reflect.DeepEqual(got, want) {
			t.Fatalf("order %v: got %+v, want %+v", pids(procs), got, want)
		}
	}
}

func pids(procs []lineage.Process) []uint32 {
	out := make([]uint32, len(procs))
	for i, p := range procs {
		out[i] = p.ID.PID
	}
	return out
}

func TestClassifyOfNothingIsEmpty(t *testing.T) {
	if ms := Classify(id(1), true, nil); len(ms) != 0 {
		t.Errorf("Classify(nil) = %v", ms)
	}
}

func TestMemberJSONNamesTheRole(t *testing.T) {
	m := Member{Role: Server, Server: "pkg", Chain: []string{"npx", "node"}, ServerID: lineage.ID{PID: 7, Start: 9}}
	b, err := json.Marshal([]Member{m, {Role: Host}})
	if err != nil {
		t.Fatal(err)
	}
	want := `[{"role":"server","server":"pkg","chain":["npx","node"],"server_id":{"pid":7,"start_ns":9}},` +
		`{"role":"host","server_id":{"pid":0,"start_ns":0}}]`
	if string(b) != want {
		t.Errorf("got  %s\nwant %s", b, want)
	}
}

func TestRoleNamesAndText(t *testing.T) {
	want := map[Role]string{Other: "other", Host: "host", Wrapper: "wrapper", Server: "server", Container: "container", Tool: "tool"}
	if len(All) != len(want) {
		t.Errorf("All has %d roles, want %d", len(All), len(want))
	}
	for _, r := range All {
		b, err := r.MarshalText()
		if r.String() != want[r] || string(b) != want[r] || err != nil {
			t.Errorf("%d: String %q, MarshalText %q, %v; want %q", r, r.String(), b, err, want[r])
		}
		var back Role
		if err := back.UnmarshalText(b); err != nil || back != r {
			t.Errorf("UnmarshalText(%q) = %v, %v; want %v", b, back, err, r)
		}
	}
	var r Role
	if err := r.UnmarshalText([]byte("boss")); err == nil {
		t.Error(`UnmarshalText("boss") succeeded`)
	}
	if s := Role(9).String(); s != "role(9)" {
		t.Errorf("Role(9).String() = %q", s)
	}
	if _, err := Role(9).MarshalText(); err == nil {
		t.Error("Role(9).MarshalText() succeeded")
	}
}

// benchSession is a host with groups of npx → sh → node server, each
// server with helpers, n processes in all.
func benchSession(n int) []lineage.Process {
	procs := []lineage.Process{mk(1, 0, hostImage)}
	pid := uint32(1)
	next := func() uint32 { pid++; return pid }
	for len(procs) < n {
		pkg := fmt.Sprintf("@scope/server-%d@1.2.3", pid)
		npx := exe("/usr/bin/node", "node", "/usr/bin/npx", "-y", pkg, "/tmp/d")
		w1 := next()
		procs = append(procs, mk(w1, 1, inh(hostImage), npx))
		w2 := next()
		sh := exe("/bin/sh", "sh", "-c", "server /tmp/d")
		procs = append(procs, mk(w2, w1, inh(npx), sh))
		s := next()
		procs = append(procs, mk(s, w2, inh(sh), exe("/usr/bin/node", "node", "/n/node_modules/.bin/server", "/tmp/d")))
		for k := 0; k < 7 && len(procs) < n; k++ {
			procs = append(procs, mk(next(), s, exe("/usr/bin/git", "git", "status", "--porcelain")))
		}
	}
	return procs[:n]
}

func BenchmarkClassify(b *testing.B) {
	procs := benchSession(10000)
	b.ReportAllocs()
	for b.Loop() {
		Classify(id(1), true, procs)
	}
}

// BenchmarkClassifyChain classifies what a look for orphans classifies
// once per candidate: a shell, a `sh -c` it ran, and what that started.
func BenchmarkClassifyChain(b *testing.B) {
	procs := []lineage.Process{
		mk(1, 0, exe("/usr/bin/bash", "bash")),
		mk(2, 1, exe("/usr/bin/bash", "bash", "-c", "for i in $(seq 10); do sleep 3600 & done; wait")),
		mk(3, 2, exe("/usr/bin/sleep", "sleep", "3600")),
	}
	b.ReportAllocs()
	for b.Loop() {
		Classify(id(1), true, procs)
	}
}
