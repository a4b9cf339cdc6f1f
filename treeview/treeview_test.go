package treeview

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcptrace/mcptrace/lineage"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the current output")

const (
	ms  = uint64(time.Millisecond)
	sec = uint64(time.Second)
	now = 400_000 * sec // about 4.6 days after boot
)

const (
	ghToken = "ghp_abcdefghijklmnopqrstuvwxyz0123456789"
	skToken = "sk-ant-api03-q1w2e3r4t5y6u7i8o9p0asdfghjkl"
	secret  = "s3cr3t-value"
)

func id(pid uint32, start uint64) lineage.ID { return lineage.ID{PID: pid, Start: start} }

// proc builds a process created by creator (parent too) that exec'd argvs
// in turn; without argvs it only forked and runs its creator's image.
func proc(pid uint32, start uint64, creator lineage.ID, uid uint32, argvs ...[]string) lineage.Process {
	p := lineage.Process{
		ID:      id(pid, start),
		Creator: creator,
		Parent:  creator,
		UID:     uid,
		Images:  []lineage.Image{{Argv: []string{"(creator's image)"}, Source: lineage.SourceInherited}},
	}
	for i, argv := range argvs {
		p.Images = append(p.Images, lineage.Image{
			Time:     start + uint64(i+1)*ms,
			Filename: "/usr/bin/" + argv[0],
			Argv:     argv,
			Source:   lineage.SourceKernel,
		})
		p.Comm = filepath.Base(argv[0])
	}
	return p
}

// seeded builds a process found in /proc when the agent started.
func seeded(pid uint32, start uint64, creator lineage.ID, uid uint32, argv ...string) lineage.Process {
	return lineage.Process{
		ID:          id(pid, start),
		Creator:     creator,
		Parent:      creator,
		CoarseStart: true,
		UID:         uid,
		Comm:        filepath.Base(argv[0]),
		Images:      []lineage.Image{{Argv: argv, Source: lineage.SourceProc}},
		Gaps:        lineage.GapSeeded,
	}
}

func exited(p lineage.Process, after uint64, code, signal int) lineage.Process {
	p.Exited, p.ExitTime, p.ExitCode, p.Signal = true, p.ID.Start+after, code, signal
	return p
}

func reparented(p lineage.Process, to lineage.ID) lineage.Process {
	p.Parent = to
	return p
}

// host is an init, an sshd and a login shell, all older than the agent.
func host() []lineage.Process {
	return []lineage.Process{
		seeded(1, 300*ms, lineage.ID{}, 0, "/sbin/init", "splash"),
		seeded(700, 4*sec, id(1, 300*ms), 0, "sshd: /usr/sbin/sshd -D [listener] 0 of 10-100 startups"),
		seeded(812, now-2*3600*sec-5*60*sec, id(700, 4*sec), 1000, "-bash"),
	}
}

var bash = id(812, now-2*3600*sec-5*60*sec)

// npxChain is an agent session that started an MCP server through
// npm exec → sh -c → node; npm and sh exited, node was reparented to init.
func npxChain() []lineage.Process {
	claudeStart := now - 12*60*sec - 3*sec
	npm := claudeStart + 2*sec
	return append(host(),
		proc(4242, claudeStart, bash, 1000, []string{"node", "/usr/local/bin/claude", "--resume"}),
		exited(proc(4300, npm, id(4242, claudeStart), 1000, []string{"npm", "exec", "-y", "@modelcontextprotocol/server-github"}), 1200*ms, 0, 0),
		exited(proc(4310, npm+900*ms, id(4300, npm), 1000, []string{"sh", "-c", "mcp-server-github"}), 1100*ms, 0, 0),
		reparented(proc(4311, npm+950*ms, id(4310, npm+900*ms), 1000, []string{"node", "/home/u/.npm/_npx/3dfbf5d9eed8e8d5/node_modules/.bin/mcp-server-github", "--toolsets", "repos,issues,pull_requests"}), id(1, 300*ms)),
	)
}

// forked builds a child of creator that never exec'd: it runs its
// creator's image.
func forked(pid uint32, start uint64, creator lineage.Process) lineage.Process {
	img := creator.Current()
	img.Source, img.Time = lineage.SourceInherited, 0
	return lineage.Process{
		ID: id(pid, start), Creator: creator.ID, Parent: creator.ID,
		UID: creator.UID, Comm: creator.Comm, Images: []lineage.Image{img},
	}
}

// daemon double-forks: the first child exits, the grandchild, which never
// exec'd, is reparented to init.
func daemon() []lineage.Process {
	start := now - 3*24*3600*sec - 4*3600*sec
	d := proc(950, start, bash, 1000, []string{"./daemon", "--pidfile", "/run/user/1000/d.pid"})
	first := forked(951, start+3*ms, d)
	return append(host(),
		exited(d, 5*ms, 0, 0),
		exited(first, 2*ms, 0, 0),
		reparented(forked(952, start+4*ms, first), id(1, 300*ms)),
	)
}

// execChain is one process that exec'd sh, then env, then true.
func execChain() []lineage.Process {
	p := proc(5000, now-3*sec, bash, 1000,
		[]string{"sh", "-c", "env FOO=bar GITHUB_TOKEN=" + ghToken + " true"},
		[]string{"env", "FOO=bar", "GITHUB_TOKEN=" + ghToken, "true"},
		[]string{"true"},
	)
	return append(host(), exited(p, 4*ms, 0, 0))
}

// longChain exec'd six times.
func longChain() []lineage.Process {
	var argvs [][]string
	for _, prog := range []string{"a", "b", "c", "d", "e", "f"} {
		argvs = append(argvs, []string{prog, "--step", prog})
	}
	return append(host(), proc(5100, now-sec, bash, 1000, argvs...))
}

// droppedChain is a process that exec'd itself 20,000 times: the graph
// kept its inherited image and its latest 7 (lineage.max-images 8).
func droppedChain() []lineage.Process {
	var argvs [][]string
	for i := 6; i >= 0; i-- {
		argvs = append(argvs, []string{"sh", "loop.sh", fmt.Sprint(i)})
	}
	p := proc(5200, now-sec, bash, 1000, argvs...)
	p.ImagesDropped = 19994
	return append(host(), p)
}

// foldedChain is what a fork-and-exit loop of 5,000 leaves once the graph
// folded it to stay within lineage.max-nodes: the first exited process
// below the shell, then the live last one, with the count between them.
func foldedChain() []lineage.Process {
	first := exited(proc(5300, now-10*sec, bash, 1000, []string{"sh", "loop.sh"}), ms, 0, 0)
	last := proc(5301, now-sec, first.ID, 1000, []string{"sleep", "1000"})
	last.CreatorsElided = 4999
	return append(host(), first, last)
}

// secrets holds MCP server command lines full of credentials.
func secrets() []lineage.Process {
	claude := proc(4242, now-60*sec, bash, 1000, []string{"node", "/usr/local/bin/claude"})
	c := claude.ID
	return append(host(), claude,
		proc(6001, now-59*sec, c, 1000, []string{"docker", "run", "-i", "--rm", "-e", "GITHUB_PERSONAL_ACCESS_TOKEN=" + ghToken, "ghcr.io/github/github-mcp-server"}),
		proc(6002, now-58*sec, c, 1000, []string{"uvx", "mcp-server-x", "--api-key", skToken}),
		proc(6003, now-57*sec, c, 1000, []string{"sh", "-c", "API_KEY=" + secret + " exec node s.js"}, []string{"node", "s.js"}),
		proc(6004, now-56*sec, c, 1000, []string{"node", "server.js", "--token=" + secret, "--db", "postgres://app:" + secret + "@db/app"}),
		proc(6005, now-55*sec, c, 1000, []string{"env", "FOO=bar", "SLACK_BOT_TOKEN=xoxb-" + secret, "npx", "-y", "@modelcontextprotocol/server-slack"}),
	)
}

// recycled has two processes with PID 4000: one exited long ago, and a
// newer one that got the PID again.
func recycled() []lineage.Process {
	return append(host(),
		exited(proc(4000, now-3600*sec, bash, 1000, []string{"sleep", "1"}), sec, 0, 0),
		proc(4000, now-30*sec, bash, 1000, []string{"node", "s.js"}),
	)
}

// oddities covers kernel threads, gaps, signals and argv the kernel cut.
func oddities() []lineage.Process {
	kthreadd := lineage.Process{ID: id(2, 300*ms), Comm: "kthreadd", Kernel: true, Gaps: lineage.GapSeeded}
	kworker := lineage.Process{ID: id(57, 900*ms), Creator: kthreadd.ID, Parent: kthreadd.ID, Comm: "kworker/0:1H-kblockd", Kernel: true, Gaps: lineage.GapSeeded}
	var kthreads []lineage.Process
	for i, comm := range []string{"ksoftirqd/0", "migration/0", "kworker/u8:3-events_unbound"} {
		k := lineage.Process{ID: id(uint32(10+i), 400*ms), Creator: kthreadd.ID, Parent: kthreadd.ID, Comm: comm, Kernel: true, Gaps: lineage.GapSeeded}
		if i == 2 {
			k = exited(k, 3*sec, 0, 0)
		}
		kthreads = append(kthreads, k)
	}
	helper := proc(7000, now-10*ms, kworker.ID, 0, []string{"/sbin/modprobe", "-q", "--", "net-pf-10"})
	helper = exited(helper, 5*ms, 1, 0)
	noFork := lineage.Process{
		ID: id(7100, now-20*sec), UID: 1000, Comm: "python3",
		Images: []lineage.Image{{Argv: []string{"python3", "-m", "mcp_server_fetch"}, Source: lineage.SourceKernel}},
		Gaps:   lineage.GapNoFork,
	}
	long := proc(7200, now-15*sec, bash, 1000, []string{"node", "-e", strings.Repeat("x", 40)})
	long.Images[len(long.Images)-1].ArgvTruncated = true
	return append(append(host(), kthreads...), kthreadd, kworker, helper, noFork, long,
		exited(proc(7300, now-9*sec, bash, 1000, []string{"npx", "-y", "mcp-remote"}), 3*sec, 0, 9),
		exited(proc(7301, now-8*sec, bash, 1000, []string{"uvx", "mcp-server-time"}), 2*sec, 0, 15),
		func() lineage.Process {
			p := exited(proc(7400, now-7*sec, bash, 1000, []string{"node", "gone.js"}), 0, 0, 0)
			p.ExitTime, p.Gaps = 0, lineage.GapNoExit
			return p
		}(),
		func() lineage.Process {
			p := proc(7500, now-6*sec, bash, 1000)
			p.Images, p.Comm = nil, "evil\x1b[2Jcomm"
			return p
		}(),
	)
}

func TestTreeGolden(t *testing.T) {
	tests := []struct {
		name  string
		nodes []lineage.Process
		opts  Options
	}{
		{"npx_chain", npxChain(), Options{Now: now, ShowChain: true}},
		{"npx_chain_color", npxChain(), Options{Now: now, ShowChain: true, Color: true}},
		{"npx_chain_narrow", npxChain(), Options{Now: now, ShowChain: true, Width: 60}},
		{"double_fork_daemon", daemon(), Options{Now: now, ShowChain: true}},
		{"exec_chain", execChain(), Options{Now: now, ShowChain: true}},
		{"exec_chain_current_only", execChain(), Options{Now: now}},
		{"exec_chain_long", longChain(), Options{Now: now, ShowChain: true}},
		{"exec_chain_dropped_images", droppedChain(), Options{Now: now, ShowChain: true}},
		{"folded_creators", foldedChain(), Options{Now: now, ShowChain: true}},
		{"secrets", secrets(), Options{Now: now, ShowChain: true}},
		{"recycled_pid", recycled(), Options{Now: now, ShowChain: true}},
		{"oddities", oddities(), Options{Now: now, ShowChain: true}},
		{"oddities_hide_kernel", oddities(), Options{Now: now, ShowChain: true, HideKernel: true}},
		{"no_clock", npxChain(), Options{ShowChain: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			if err := Tree(&buf, tt.nodes, tt.opts); err != nil {
				t.Fatal(err)
			}
			golden(t, tt.name, buf.Bytes())
		})
	}
}

func TestChainGolden(t *testing.T) {
	all := npxChain()
	// node, sh, npm exec, claude, bash, sshd, init
	var nodes []lineage.Process
	for i := len(all) - 1; i >= 0; i-- {
		nodes = append(nodes, all[i])
	}
	var buf bytes.Buffer
	if err := Chain(&buf, nodes, Options{Now: now, ShowChain: true}); err != nil {
		t.Fatal(err)
	}
	golden(t, "chain", buf.Bytes())
}

func TestTreeHidesSecrets(t *testing.T) {
	for _, opts := range []Options{
		{Now: now, ShowChain: true},
		{Now: now, ShowChain: true, Width: 40},
		{Now: now, Color: true, Width: 1000},
	} {
		var buf bytes.Buffer
		if err := Tree(&buf, append(secrets(), execChain()[3:]...), opts); err != nil {
			t.Fatal(err)
		}
		for _, s := range []string{ghToken, skToken, secret, "q1w2e3r4"} {
			if strings.Contains(buf.String(), s) {
				t.Errorf("width %d: output contains %q:\n%s", opts.Width, s, buf.String())
			}
		}
	}
}

func TestTreeShowsRecycledPIDTwice(t *testing.T) {
	var buf bytes.Buffer
	if err := Tree(&buf, recycled(), Options{Now: now}); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(buf.String(), " 4000 "); n != 2 {
		t.Errorf("pid 4000 shown %d times, want 2:\n%s", n, buf.String())
	}
}

func TestTreeShowsNodeGivenTwiceOnce(t *testing.T) {
	nodes := append(npxChain(), npxChain()[4])
	var buf bytes.Buffer
	if err := Tree(&buf, nodes, Options{}); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(buf.String(), " 4242 "); n != 1 {
		t.Errorf("pid 4242 shown %d times, want 1:\n%s", n, buf.String())
	}
}

func TestTreeShowsCreatorCycleOnce(t *testing.T) {
	a := proc(10, 1*sec, id(11, 2*sec), 0, []string{"a"})
	b := proc(11, 2*sec, id(10, 1*sec), 0, []string{"b"})
	var buf bytes.Buffer
	if err := Tree(&buf, []lineage.Process{a, b}, Options{}); err != nil {
		t.Fatal(err)
	}
	want := "10 alive uid=0 a\n└─ 11 alive uid=0 b\n"
	if buf.String() != want {
		t.Errorf("got\n%s\nwant\n%s", buf.String(), want)
	}
}

func TestTreeOfNothingWritesNothing(t *testing.T) {
	var buf bytes.Buffer
	if err := Tree(&buf, nil, Options{}); err != nil || buf.Len() != 0 {
		t.Errorf("Tree(nil) = %v, wrote %q", err, buf.String())
	}
	if err := Chain(&buf, nil, Options{}); err != nil || buf.Len() != 0 {
		t.Errorf("Chain(nil) = %v, wrote %q", err, buf.String())
	}
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func TestTreeReturnsWriteError(t *testing.T) {
	if err := Tree(failWriter{}, npxChain(), Options{}); err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Errorf("Tree = %v, want the write error", err)
	}
	if err := Chain(failWriter{}, npxChain(), Options{}); err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Errorf("Chain = %v, want the write error", err)
	}
}

func TestTreeKeepsWidth(t *testing.T) {
	// Deep enough trees exceed the width: a command line keeps minArgvWidth.
	for _, width := range []int{80, 100, 120} {
		var buf bytes.Buffer
		if err := Tree(&buf, append(secrets(), oddities()[3:]...), Options{Now: now, ShowChain: true, Width: width}); err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n") {
			if n := runes(l); n > width {
				t.Errorf("width %d: line has %d runes: %q", width, n, l)
			}
		}
	}
}

func TestDuration(t *testing.T) {
	tests := []struct {
		d    time.Duration
		want string
	}{
		{0, "<1ms"},
		{999 * time.Microsecond, "<1ms"},
		{4 * time.Millisecond, "4ms"},
		{999 * time.Millisecond, "999ms"},
		{1200 * time.Millisecond, "1.2s"},
		{9999 * time.Millisecond, "9.9s"},
		{12 * time.Second, "12s"},
		{3*time.Minute + 4*time.Second, "3m04s"},
		{2*time.Hour + 5*time.Minute + 59*time.Second, "2h05m"},
		{3*24*time.Hour + 4*time.Hour + 59*time.Minute, "3d4h"},
		{400 * 24 * time.Hour, "400d0h"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			if got := Duration(tt.d); got != tt.want {
				t.Errorf("Duration(%v) = %q, want %q", tt.d, got, tt.want)
			}
		})
	}
}

func TestState(t *testing.T) {
	tests := []struct {
		name string
		p    lineage.Process
		want string
	}{
		{"alive", lineage.Process{}, "alive"},
		{"exit code", lineage.Process{Exited: true, ExitCode: 3}, "exited 3"},
		{"exit zero", lineage.Process{Exited: true}, "exited 0"},
		{"sigkill", lineage.Process{Exited: true, Signal: 9}, "killed SIGKILL"},
		{"sigterm", lineage.Process{Exited: true, Signal: 15}, "signal SIGTERM"},
		{"unknown signal", lineage.Process{Exited: true, Signal: 200}, "signal 200"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := state(&tt.p); got != tt.want {
				t.Errorf("state = %q, want %q", got, tt.want)
			}
		})
	}
}

// golden compares got with testdata/name.golden, or rewrites it with -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("output differs from %s (go test -update rewrites it)\ngot:\n%s\nwant:\n%s", path, got, want)
	}
}

func TestTreeShowsNotesFirstAmongMarks(t *testing.T) {
	nodes := host()
	victim := nodes[len(nodes)-1]
	var b strings.Builder
	err := Tree(&b, nodes, Options{Now: 100 * sec, Notes: map[lineage.ID]string{victim.ID: "killed by mcptrace SIGTERM"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(b.String(), "\n") {
		if strings.Contains(line, fmt.Sprintf(" %d ", victim.ID.PID)) || strings.HasPrefix(strings.TrimLeft(line, "│├└─ "), fmt.Sprintf("%d ", victim.ID.PID)) {
			if !strings.Contains(line, "[killed by mcptrace SIGTERM]") {
				t.Errorf("line of %d lacks the note: %q", victim.ID.PID, line)
			}
			return
		}
	}
	t.Errorf("no line for %d:\n%s", victim.ID.PID, b.String())
}

func TestTreeShowsLabelsFirstAndCommandLinesWholeWhenAsked(t *testing.T) {
	host := proc(100, 1*ms, lineage.ID{}, 1000, []string{"node", "host.mjs"})
	long := "/home/u/.npm/_npx/0123456789abcdef/node_modules/.bin/mcp-server-filesystem " + strings.Repeat("/very/long/allowed/dir ", 8)
	server := proc(101, 2*ms, host.ID, 1000, strings.Fields("node "+long))
	labels := map[lineage.ID]string{host.ID: "host root", server.ID: "server @modelcontextprotocol/server-filesystem gen 1 (npx → sh → node)"}
	var short, whole bytes.Buffer
	if err := Tree(&short, []lineage.Process{host, server}, Options{Now: now, Width: 100, Labels: labels}); err != nil {
		t.Fatal(err)
	}
	if err := Tree(&whole, []lineage.Process{host, server}, Options{Now: now, Width: 100, Labels: labels, FullArgv: true}); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(short.String(), "\n")
	if !strings.HasPrefix(lines[0], "host root 100 ") || !strings.HasPrefix(lines[1], "└─ server @modelcontextprotocol/server-filesystem gen 1 (npx → sh → node) 101 ") {
		t.Errorf("labels are not first on their lines:\n%s", short.String())
	}
	if strings.Contains(short.String(), strings.TrimSpace(long)) {
		t.Errorf("the command line is whole at width 100:\n%s", short.String())
	}
	if !strings.Contains(whole.String(), strings.TrimSpace(long)) {
		t.Errorf("FullArgv shortened the command line:\n%s", whole.String())
	}
}

// Where uids are not known (a Windows snapshot), none is shown: "uid=0"
// would read as root.
func TestTreeWithoutUIDsShowsNone(t *testing.T) {
	a := lineage.Process{ID: lineage.ID{PID: 10, Start: 1}, Comm: "cmd.exe"}
	b := lineage.Process{ID: lineage.ID{PID: 11, Start: 2}, Creator: a.ID, Comm: "node.exe"}
	var buf bytes.Buffer
	if err := Tree(&buf, []lineage.Process{a, b}, Options{NoUID: true}); err != nil {
		t.Fatal(err)
	}
	if want := "10 alive [cmd.exe]\n└─ 11 alive [node.exe]\n"; buf.String() != want {
		t.Errorf("got\n%s\nwant\n%s", buf.String(), want)
	}
	buf.Reset()
	if err := Dot(&buf, []lineage.Process{a, b}, Options{NoUID: true}); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(buf.String(), "uid=") {
		t.Errorf("dot shows a uid:\n%s", buf.String())
	}
}

// Short commands that exited with everything they created fold into one
// line per parent, the most frequent first, when Fold accepts them: the
// server, a command with a live child and what Fold refuses stay.
func TestTreeFoldsShortCommandsIntoOneLinePerParent(t *testing.T) {
	start := now - 20*sec
	hostID := id(5000, start)
	h := proc(5000, start, bash, 1000, []string{"copilot", "--allow-all-tools"})
	nodes := append(host(), h)
	pid := uint32(5001)
	add := func(p lineage.Process) { nodes = append(nodes, p); pid++ }
	for i := 0; i < 40; i++ {
		f := exited(forked(pid, start+uint64(i)*ms, h), 5*ms, 0, 0)
		f.Comm = "copilot-runtime"
		add(f)
	}
	for i := 0; i < 12; i++ {
		add(exited(proc(pid, start+sec+uint64(i)*ms, hostID, 1000, []string{"git", "status"}), 20*ms, 0, 0))
	}
	sh := exited(proc(pid, start+2*sec, hostID, 1000, []string{"bash", "-lc", "lsb_release -a | cut -c1"}), 300*ms, 0, 0)
	add(sh)
	add(exited(proc(pid, start+2*sec+ms, sh.ID, 1000, []string{"cut", "-c1"}), 10*ms, 0, 0))
	launcher := exited(proc(pid, start+3*sec, hostID, 1000, []string{"sh", "-c", "setsid sleep 3600 & exec true"}), 50*ms, 0, 0)
	add(launcher)
	add(proc(pid, start+3*sec+ms, launcher.ID, 1000, []string{"sleep", "3600"}))
	server := proc(pid, start+4*sec, hostID, 1000, []string{"node", "/n/node_modules/pkg/cli.js"})
	add(server)
	refused := exited(proc(pid, start+5*sec, hostID, 1000, []string{"npx", "-y", "pkg"}), 100*ms, 1, 0)
	add(refused)

	var b bytes.Buffer
	opts := Options{Now: now, Width: 100, Fold: func(p *lineage.Process) bool { return p.ID != refused.ID }}
	if err := Tree(&b, nodes[3:], opts); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	t.Logf("\n%s", out)
	if n := strings.Count(out, "\n"); n != 6 {
		t.Errorf("%d lines, want 6: the host, the launcher and its live child, the server, the refused one, the fold", n)
	}
	if !strings.Contains(out, "└─ + 53 short commands: copilot-runtime ×40, git ×12, bash ×1\n") {
		t.Error("no fold line, or a wrong one")
	}
	for _, keep := range []string{"sleep 3600", "node /n/node_modules/pkg/cli.js", "npx -y pkg"} {
		if !strings.Contains(out, keep) {
			t.Errorf("%q was folded", keep)
		}
	}
	b.Reset()
	opts.Fold = nil
	if err := Tree(&b, nodes[3:], opts); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(b.String(), "\n"); n != len(nodes)-3 {
		t.Errorf("without Fold: %d lines, want one per process, %d", n, len(nodes)-3)
	}
}

// A tree from the history (Options.Wall) says since when a live process
// ran, a time, not how long before a recording that may be days old.
func TestTreeFromTheHistoryStatesTimes(t *testing.T) {
	const sec = uint64(time.Second)
	root := proc(10, 100*sec, lineage.ID{}, 1000, []string{"claude"})
	child := proc(11, 160*sec, root.ID, 1000, []string{"node", "server.js"})
	recorded := time.Date(2026, 11, 26, 9, 30, 0, 0, time.UTC)
	now := 400 * sec // the recording's boot time
	wall := func(boot uint64) time.Time { return recorded.Add(-time.Duration(now - boot)) }
	var b strings.Builder
	if err := Tree(&b, []lineage.Process{root, child}, Options{Now: now, Wall: wall}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"10 alive since 09:25:00", "11 alive since 09:26:00"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("tree lacks %q:\n%s", want, b.String())
		}
	}
	if strings.Contains(b.String(), "5m00s") {
		t.Errorf("tree says how long before the recording:\n%s", b.String())
	}
}
