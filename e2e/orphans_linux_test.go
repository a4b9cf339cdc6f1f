package e2e_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mcptrace/mcptrace/agent"
	"github.com/mcptrace/mcptrace/api"
	"github.com/mcptrace/mcptrace/enforcer"
	"github.com/mcptrace/mcptrace/internal/agenttest"
	"github.com/mcptrace/mcptrace/internal/testenv"
	"github.com/mcptrace/mcptrace/orphans"
)

// stubbornMCP is the name of the stubborn server of e2e/testdata/mcphost
// (a real MCP server that outlives its stdin, as leaked servers do)
// installed in a corpus directory under a name of the MCP ecosystem: a
// leak whose host was not seen is proved an MCP server by its name with
// its stdio, never by its name alone.
const stubbornMCP = "mcptrace-e2e-stubborn-mcp"

// corpus is a directory every uid can read: the hosts that start and
// abandon programs, look-alike npm packages and Python modules of the
// programs Debian does not ship, the stubborn MCP server under an MCP
// name, and one run directory per uid.
type corpus struct {
	t   *testing.T
	dir string
}

// Files of the corpus. host.js is a Node.js host: it starts its command
// with stdin and stdout socketpairs (as Node hosts' stdio is), twice
// with --twice, prints the first child's pid and stays (with --line once
// the child wrote its first output). host.py is the same with pipes. reaper.py becomes a subreaper (as a user's systemd or
// a supervisor is), runs a script whose stdin has no writer and whose
// stdout no reader, and reaps what is reparented to it. serve.js and
// serve.py are the body of every look-alike: they stay, do nothing, and
// ignore the end of their input.
var corpusFiles = map[string]string{
	"host.js": `const { spawn } = require("child_process");
let args = process.argv.slice(2), n = 1, line = false;
if (args[0] === "--twice") { args = args.slice(1); n = 2; }
if (args[0] === "--line") { args = args.slice(1); line = true; }
let first;
for (let i = 0; i < n; i++) {
  const c = spawn(args[0], args.slice(1), { stdio: ["pipe", "pipe", "ignore"] });
  c.on("error", () => {});
  first = first || c;
  c.stdout.on("data", () => {});
}
// With --line, ready once the program wrote its first output.
if (line) first.stdout.once("data", () => process.stdout.write(first.pid + "\n"));
else process.stdout.write(first.pid + "\n");
setInterval(() => {}, 1 << 30);
`,
	"host.py": `import subprocess, sys, time
args, line, n = sys.argv[1:], False, 1
if args[0] == "--twice":
    args, n = args[1:], 2
if args[0] == "--line":
    args, line = args[1:], True
ps = [subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL) for _ in range(n)]
if line:  # ready once the program wrote its first line
    ps[0].stdout.readline()
print(ps[0].pid, flush=True)
time.sleep(1 << 20)
`,
	"reaper.py": `import ctypes, os, subprocess, sys, time
ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
p = subprocess.Popen(["sh", sys.argv[1]], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
p.stdin.close()
p.stdout.close()
while True:
    try:
        os.wait()
    except ChildProcessError:
        time.sleep(0.2)
`,
	"serve.js": `process.stdin.on("error", () => {});
process.stdout.on("error", () => {});
if (process.argv.includes("--child")) require("child_process").spawn(process.execPath, [__filename], { stdio: "ignore" });
setInterval(() => {}, 1 << 30);
`,
	"py/serve.py": `import os, signal, sys, time
signal.signal(signal.SIGPIPE, signal.SIG_IGN)
while True:
    time.sleep(3600)
`,
	// The swap: on SIGTERM, exec what argv[1] names instead of exiting
	// ("-": exit), as a server that turns into another program while it
	// is being ended.
	"py/mcp_server_swap.py": `import os, signal, sys, time
def swap(*_):
    if sys.argv[1] == "-":
        os._exit(0)
    os.execv(sys.argv[1], [sys.argv[1], "600"])
signal.signal(signal.SIGTERM, swap)
while True:
    time.sleep(3600)
`,
	"package.json": `{"name": "corpus", "private": true, "dependencies": {"http-server": "1.0.0", "mcptrace-e2e-stubborn-mcp": "1.0.0"}}`,
}

// lookAlikes are the npm packages the corpus mimics (their script runs
// serve.js), and the Python modules (they run serve.py).
var lookAlikes = []string{
	"node_modules/http-server/bin/http-server",
	"node_modules/vite/bin/vite.js",
	"node_modules/nodemon/bin/nodemon.js",
	"node_modules/tsx/dist/cli.mjs",
	"node_modules/typescript-language-server/lib/cli.mjs",
	"node_modules/pyright/langserver.index.js",
	"node_modules/pm2/lib/Daemon.js",
	"node_modules/@acme/weather-mcp/index.js",
	"node_modules/mcp-server-logging/index.js",
	"node_modules/@modelcontextprotocol/inspector/cli/build/cli.js",
	"py/uvicorn.py", "py/flask.py", "py/celery.py", "py/jupyterlab.py", "bin/ssh",
}

func newCorpus(t *testing.T) *corpus {
	t.Helper()
	dir, err := os.MkdirTemp("", "mcptrace-orphans-corpus-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	c := &corpus{t: t, dir: dir}
	for name, body := range corpusFiles {
		c.write(name, body, 0o644)
	}
	for _, name := range lookAlikes {
		switch {
		case strings.HasPrefix(name, "py/"):
			c.write(name, corpusFiles["py/serve.py"], 0o644)
		case strings.HasPrefix(name, "bin/"):
			c.write(name, "#!/usr/bin/python3\n"+corpusFiles["py/serve.py"], 0o755)
		case strings.HasSuffix(name, ".mjs"):
			c.write(name, "import { createRequire } from 'module';\ncreateRequire(import.meta.url)("+strconv.Quote(filepath.Join(dir, "serve.js"))+");\n", 0o644)
		default:
			c.write(name, "#!/usr/bin/env node\nrequire("+strconv.Quote(filepath.Join(dir, "serve.js"))+");\n", 0o755)
		}
	}
	c.write("node_modules/http-server/package.json", `{"name":"http-server","version":"1.0.0","bin":{"http-server":"bin/http-server"}}`, 0o644)
	c.link("../http-server/bin/http-server", "node_modules/.bin/http-server")
	// The stubborn MCP server under an MCP name: its script is the real
	// one (node resolves its SDK from where the file really lies).
	_, script := stubborn(t)
	c.write("node_modules/"+stubbornMCP+"/package.json", `{"name":"`+stubbornMCP+`","version":"1.0.0","type":"module","bin":{"`+stubbornMCP+`":"index.mjs"}}`, 0o644)
	c.link(script, "node_modules/"+stubbornMCP+"/index.mjs")
	c.link("../"+stubbornMCP+"/index.mjs", "node_modules/.bin/"+stubbornMCP)
	return c
}

func (c *corpus) write(name, body string, mode os.FileMode) {
	p := filepath.Join(c.dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		c.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(body), mode); err != nil {
		c.t.Fatal(err)
	}
	for d := filepath.Dir(p); d != c.dir; d = filepath.Dir(d) {
		os.Chmod(d, 0o755)
	}
	os.Chmod(c.dir, 0o755)
}

func (c *corpus) link(target, name string) {
	p := filepath.Join(c.dir, name)
	os.MkdirAll(filepath.Dir(p), 0o755)
	if err := os.Symlink(target, p); err != nil {
		c.t.Fatal(err)
	}
}

// run starts script under a reaper of its own, as uid, with marker in
// its environment and the corpus's helpers defined: dead_node and
// dead_py start a command under a Node or Python host and SIGKILL the
// host (its stdin and stdout, socketpairs or pipes, are then cut off
// and it is reparented to the reaper); live_twice (live_twice_py) has a
// Node (Python) host that stays start it twice. $C is the corpus, $R the uid's run directory,
// PYTHONPATH holds the look-alike modules.
func (c *corpus) run(uid uint32, marker, script string) {
	c.t.Helper()
	run := filepath.Join(c.dir, "run", strconv.Itoa(int(uid)))
	if err := os.MkdirAll(run, 0o700); err != nil {
		c.t.Fatal(err)
	}
	os.Chown(run, int(uid), int(uid))
	os.Chmod(filepath.Join(c.dir, "run"), 0o755)
	prelude := `export C=` + c.dir + ` R=` + run + `; cd $C
waitpid() { n=0; until [ -s "$1" ] || [ $n -gt 600 ]; do sleep 0.05; n=$((n+1)); done; }
dead_node() { f=$(mktemp -p $R); node $C/host.js "$@" >$f 2>/dev/null & h=$!; waitpid $f; kill -9 $h; }
dead_py() { f=$(mktemp -p $R); python3 $C/host.py "$@" >$f 2>/dev/null & h=$!; waitpid $f; kill -9 $h; }
live_twice() { f=$(mktemp -p $R); node $C/host.js --twice "$@" >$f 2>/dev/null & waitpid $f; }
live_twice_py() { f=$(mktemp -p $R); python3 $C/host.py --twice "$@" >$f 2>/dev/null & waitpid $f; }
`
	// Debian's programs, which every uid can run (root's PATH may lead
	// to a per-user Python first).
	const path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	python := "/usr/bin/python3"
	if _, err := os.Stat(python); err != nil {
		testenv.Missing(c.t, "Debian's python3", "install python3")
	}
	// The script is a file: a command line that held it would match
	// whatever the test looks for.
	f, err := os.CreateTemp(run, "script-")
	if err != nil {
		c.t.Fatal(err)
	}
	f.WriteString(prelude + script)
	f.Close()
	os.Chmod(f.Name(), 0o644)
	cmd := exec.Command(python, filepath.Join(c.dir, "reaper.py"), f.Name())
	cmd.Dir = c.dir
	cmd.Env = append(os.Environ(), marker, "HOME="+run, "PYTHONPATH="+filepath.Join(c.dir, "py"), "PYTHONDONTWRITEBYTECODE=1", "PYTHONUNBUFFERED=1", "PATH="+path)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
	if err := cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() {
		endMarked(marker)
		cmd.Wait()
	})
}

// bystander is an ordinary long-running program in a state that makes
// a leak look real; orphans must never list or end it.
type bystander struct {
	name string
	// real: the program itself (from Debian or Node.js); else a
	// look-alike with its argv, package path and fd states.
	real   bool
	script string
	// find is a piece of the command line of its process(es) to check.
	find string
}

// bystanders are 33 ordinary programs, each in a leak-like state.
func bystanders(port, port2 int) []bystander {
	return []bystander{
		// Python.
		{"python3 -m http.server started by a deploy script that exited (stdin without writer, stdout without reader)", true,
			`python3 -m http.server 0 --bind 127.0.0.1 >/dev/null 2>&1 &`, "http.server 0 --bind 127.0.0.1"},
		{"python3 -m http.server, stdin and stdout pipes to a dead parent, reparented", true,
			`dead_py --line python3 -m http.server 0 --bind 127.0.0.2`, "127.0.0.2"},
		{"python3 -m http.server under nohup", true, `nohup python3 -m http.server 0 --bind 127.0.0.3 >/dev/null 2>&1 &`, "127.0.0.3"},
		{"python3 -m http.server its live supervisor started twice (idle, stdio held)", true,
			`live_twice_py python3 -m http.server 0 --bind 127.0.0.4`, "127.0.0.4"},
		{"inetd-style python3 -m http.server after its TCP client hung up", true,
			fmt.Sprintf(`busybox nc -l -p %d -e python3 -m http.server 0 --bind 127.0.0.5 2>/dev/null &`, port), "127.0.0.5"},
		{"uvicorn main:app, socketpairs to a dead Node parent", false, `dead_node python3 -m uvicorn main:app --port 8001`, "uvicorn main:app"},
		{"flask run, pipes to a dead parent", false, `dead_py python3 -m flask run --port 8002`, "flask run"},
		{"celery -A proj worker started by a script that exited", false, `python3 -m celery -A proj worker 2>/dev/null &`, "celery -A proj"},
		{"jupyter lab under nohup", false, `nohup python3 -m jupyterlab --port 8003 2>/dev/null &`, "jupyterlab"},
		{"pylsp, an editor's stdio language server its live editor started twice", true, `live_twice_py pylsp`, "pylsp"},
		// Node.js.
		{"nohup npx http-server", false, `nohup npx --no-install http-server -p 8004 >/dev/null 2>&1 &`, "http-server -p 8004"},
		{"nohup node …/http-server/bin/http-server", false, `nohup node $C/node_modules/http-server/bin/http-server -p 8005 2>/dev/null &`, "-p 8005"},
		{"vite dev server, socketpairs to a dead Node parent", false, `dead_node node $C/node_modules/vite/bin/vite.js --port 5173`, "vite.js --port 5173"},
		{"vite its live parent started twice", false, `live_twice node $C/node_modules/vite/bin/vite.js --port 5174`, "vite.js --port 5174"},
		{"nodemon watching an app, pipes to a dead parent", false, `dead_py node $C/node_modules/nodemon/bin/nodemon.js app.js --child`, "nodemon.js"},
		{"tsx watch started by a script that exited", false, `node $C/node_modules/tsx/dist/cli.mjs watch src/index.ts 2>/dev/null &`, "cli.mjs watch"},
		{"a node REPL under nohup, its writer alive", true, `sleep 600 | nohup node -i >/dev/null 2>&1 &`, "node -i"},
		{"a user's own node app.js, socketpairs to a dead parent", true, `dead_node node $C/serve.js app`, "serve.js app"},
		{"typescript-language-server --stdio, socketpairs to a dead editor", false,
			`dead_node node $C/node_modules/typescript-language-server/lib/cli.mjs --stdio --log-level 1`, "--log-level 1"},
		{"typescript-language-server --stdio its live editor started twice", false,
			`live_twice node $C/node_modules/typescript-language-server/lib/cli.mjs --stdio --log-level 2`, "--log-level 2"},
		{"pyright-langserver --stdio, pipes to a dead editor", false, `dead_py node $C/node_modules/pyright/langserver.index.js --stdio --a`, "langserver.index.js --stdio --a"},
		{"pyright-langserver --stdio its live editor started twice", false,
			`live_twice node $C/node_modules/pyright/langserver.index.js --stdio --b`, "langserver.index.js --stdio --b"},
		{"a pm2-like supervisor daemon (setsid) with its worker", false, `setsid node $C/node_modules/pm2/lib/Daemon.js --child </dev/null >/dev/null 2>&1 &`, "Daemon.js"},
		{"the MCP Inspector (a client), socketpairs to a dead parent", false,
			`dead_node node $C/node_modules/@modelcontextprotocol/inspector/cli/build/cli.js --cli`, "inspector"},
		{"an MCP-named server in HTTP mode on /dev/null (a name alone)", false,
			`nohup node $C/node_modules/@acme/weather-mcp/index.js --port 8006 </dev/null >/dev/null 2>&1 &`, "weather-mcp"},
		{"an MCP-named server whose stdin was cut, stdout a log file (stdin alone)", false,
			`node $C/node_modules/mcp-server-logging/index.js >$R/mcp.log 2>&1 &`, "mcp-server-logging"},
		// Daemons and the rest.
		{"ssh -N stand-in (a script named ssh with ssh's argv), pipes to a dead parent", false,
			`dead_py $C/bin/ssh -N -L 8080:localhost:80 bastion`, "bastion"},
		{"a tmux server", true, `tmux -L corpus new-session -d sleep 600`, "tmux -L corpus"},
		{"a gpg-agent", true, `mkdir -m 700 -p $R/gnupg; gpg-agent --homedir $R/gnupg --daemon >/dev/null 2>&1`, "gpg-agent"},
		{"a forking daemon (busybox httpd), systemd Type=forking style", true,
			fmt.Sprintf(`busybox httpd -p 127.0.0.1:%d -h $R`, port2), "httpd -p"},
		{"sleep, stdin and stdout pipes to a dead parent", true, `dead_py sleep 601`, "sleep 601"},
		{"nohup sleep", true, `nohup sleep 602 >/dev/null 2>&1 &`, "sleep 602"},
		{"sleep started by a script that exited", true, `sleep 603 &`, "sleep 603"},
	}
}

// stubborn is the local MCP server that outlives its stdin, as leaked
// servers do, run by node directly from the host's node_modules.
func stubborn(t *testing.T) (node, script string) {
	t.Helper()
	hostDir, err := filepath.Abs("testdata/mcphost")
	if err != nil {
		t.Fatal(err)
	}
	script = filepath.Join(hostDir, "node_modules", "mcptrace-e2e-stubborn-server", "index.mjs")
	if _, err := os.Stat(script); err != nil {
		testenv.Missing(t, "the MCP host's node packages", "run `make setup-test` (npm ci in e2e/testdata/mcphost)")
	}
	if node, err = exec.LookPath("node"); err != nil {
		testenv.Missing(t, "Node.js", "install nodejs (make setup-test)")
	}
	return node, script
}

// port is a TCP port on the loopback nothing listens on now.
func port(t *testing.T) int {
	_, p, _ := net.SplitHostPort(freePort(t))
	n, _ := strconv.Atoi(p)
	return n
}

// endMarked kills what is left of a test's processes, found by marker.
func endMarked(marker string) {
	for _, p := range agenttest.WithEnv(marker) {
		p.Kill()
	}
}

func orphansOf(t *testing.T, c *api.Client) api.OrphanList {
	t.Helper()
	l, err := c.Orphans(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func named(l api.OrphanList, name string) []orphans.Orphan {
	var out []orphans.Orphan
	for _, o := range l.Orphans {
		if o.Name == name {
			out = append(out, o)
		}
	}
	return out
}

// stubborns are the stubborn MCP servers among procs (not their
// wrappers nor hosts).
func stubborns(procs []agenttest.Proc) []agenttest.Proc {
	var out []agenttest.Proc
	for _, p := range withArgv(procs, stubbornMCP) {
		if len(p.Argv) > 1 && filepath.Base(p.Argv[0]) == "node" && !strings.HasSuffix(p.Argv[1], "host.js") {
			out = append(out, p)
		}
	}
	return out
}

// withArgv are the processes of procs whose command line holds s.
func withArgv(procs []agenttest.Proc, s string) []agenttest.Proc {
	var out []agenttest.Proc
	for _, p := range procs {
		if strings.Contains(strings.Join(p.Argv, " "), s) {
			out = append(out, p)
		}
	}
	return out
}

// endOrphansAs runs `mcptrace orphans --end ARGS… --json` as uid.
func endOrphansAs(t *testing.T, socket string, uid int, args ...string) api.EndOrphansResult {
	t.Helper()
	code, out := agenttest.CLIAs(t, socket, uid, append([]string{"orphans", "--end", "--json"}, args...)...)
	var res api.EndOrphansResult
	if err := json.Unmarshal([]byte(out), &res); err != nil || (code != 0 && code != 1) {
		t.Fatalf("orphans --end %v as uid %d exited %d: %v\n%s", args, uid, code, err, out)
	}
	return res
}

const corpusUser = 4242 // a second user besides nobody: the kernel's uid is what counts, no passwd entry needed

// A node with 33 ordinary long-running programs of two users, each in a
// state that makes a leak look real, and a real backlog of root's: the
// stubborn MCP server under an MCP name through npx whose host was
// SIGKILLed before the agent started (day one: seen only in /proc, npm's
// title and all), then, under the agent, through sh -c and node directly
// with their hosts SIGKILLed, and a live MCP host that superseded its
// filesystem server. orphans lists every leak with its proof and
// evidence and no bystander, at any confidence, for root and for each
// owner; the superseded server is a candidate at once, listed once idle;
// --end ends the certain ones, --include-likely the likely one too, and
// every bystander, the live host and its current server stay.
func TestOrphansFindTheRealBacklogAndNoneOfThirtyBystanders(t *testing.T) {
	c := newCorpus(t)
	for _, bin := range []string{"busybox", "tmux", "gpg-agent", "pylsp", "npx"} {
		if _, err := exec.LookPath(bin); err != nil {
			testenv.Missing(t, bin, "run `make setup-test` (scripts/setup.sh test)")
		}
	}
	pid := os.Getpid()
	inetd := port(t)
	list := bystanders(inetd, port(t))
	// Half of them nobody's, half another user's.
	users := []uint32{nobody, corpusUser}
	markers := map[uint32]string{}
	scripts := map[uint32]*strings.Builder{}
	for _, uid := range users {
		markers[uid] = fmt.Sprintf("MCPTRACE_E2E=orphan-bystander-%d-%d", uid, pid)
		scripts[uid] = &strings.Builder{}
	}
	for i, b := range list {
		// Each starts on its own: the script exits at once.
		scripts[users[i%2]].WriteString("(" + b.script + ") &\n")
	}
	for _, uid := range users {
		c.run(uid, markers[uid], scripts[uid].String())
	}
	// Day one: a leak from before the agent.
	npxMarker := fmt.Sprintf("MCPTRACE_E2E=orphan-npx-%d", pid)
	c.run(0, npxMarker, `dead_node npx --no-install `+stubbornMCP+` --token=LEAKSECRET`)

	// Every bystander runs (npx takes seconds), the inetd-style one once
	// a client came and hung up.
	// 33 programs and a day-one npx start at once on a machine of 2
	// cores: allow them 60 s.
	waitFor(t, testenv.Bound(60*time.Second), "every bystander to run", func() (bool, string) {
		for i, b := range list {
			if b.find == "127.0.0.5" {
				continue // the inetd-style service starts when a client comes
			}
			if len(withArgv(agenttest.WithEnv(markers[users[i%2]]), b.find)) == 0 {
				return false, fmt.Sprintf("%q not running yet", b.name)
			}
		}
		return len(stubborns(agenttest.WithEnv(npxMarker))) == 1, "the day-one stubborn server"
	})
	// A client comes to the inetd-style service, reads its greeting and
	// hangs up.
	testenv.Eventually(t, "the inetd-style service to take a client", func() (bool, string) {
		conn, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", inetd))
		if err != nil {
			return false, err.Error()
		}
		defer conn.Close()
		conn.SetReadDeadline(time.Now().Add(testenv.Bound(10 * time.Second)))
		_, err = bufio.NewReader(conn).ReadString('\n')
		return err == nil, fmt.Sprint(err)
	})
	var all []agenttest.Proc
	testenv.Eventually(t, "the inetd-style service to run", func() (bool, string) {
		all = nil
		for _, m := range markers {
			all = append(all, agenttest.WithEnv(m)...)
		}
		var inetdProcs []string
		for _, p := range withArgv(all, "127.0.0.5") {
			if strings.HasPrefix(filepath.Base(p.Argv[0]), "python") && p.Argv[1] == "-m" {
				inetdProcs = append(inetdProcs, p.String())
			}
		}
		return len(inetdProcs) == 1, fmt.Sprint(inetdProcs)
	})

	idle := 2 * time.Second
	a := agenttest.Start(t, agent.Options{IdleAfter: idle, OrphansEvery: time.Hour, OrphansConfirmAfter: time.Second,
		Enforcer: enforcer.Config{Mode: enforcer.ModeEnforce, Policy: enforcer.PolicyGraceful, Grace: time.Second}})
	cl := api.NewClient(a.Socket())
	firstLook := time.Now()
	var l api.OrphanList
	testenv.Eventually(t, "the day-one npx leak to be listed", func() (bool, string) {
		l = orphansOf(t, cl)
		return len(named(l, stubbornMCP)) == 1, fmt.Sprintf("%+v", l.Orphans)
	})
	// Idleness is seen over time only: every bystander a live parent
	// started twice is now idle past the threshold.
	time.Sleep(time.Until(firstLook.Add(idle + 500*time.Millisecond)))
	l = orphansOf(t, cl)
	o := named(l, stubbornMCP)
	if len(l.Orphans) != 1 || len(o) != 1 || len(l.Candidates) != 0 {
		t.Fatalf("day one: listed %+v and candidates %+v, want the npx leak alone", l.Orphans, l.Candidates)
	}
	if o[0].Confidence != orphans.Certain || o[0].Proof != orphans.ProofNameAndStdio || o[0].Kind != orphans.HostGone ||
		!slices.Equal(o[0].Chain, []string{"npm exec", "sh", "node"}) {
		t.Errorf("the day-one npx leak: %+v, want certain by name and stdio, npm exec → sh → node", o[0])
	}
	for uid := range markers {
		if code, out := agenttest.CLIAs(t, a.Socket(), int(uid), "orphans", "--json"); code != 0 || strings.Contains(out, `"server"`) {
			t.Errorf("uid %d's own list (exit %d) is not empty:\n%s", uid, code, out)
		}
		if res := endOrphansAs(t, a.Socket(), int(uid), "--include-likely"); len(res.Orphans) != 0 || len(res.Report.Records) != 0 {
			t.Errorf("uid %d's --end --include-likely ended %+v", uid, res.Report.Records)
		}
	}
	if res := endOrphansAs(t, a.Socket(), 0, "--include-likely", "--dry-run"); len(res.Orphans) != 1 || res.Orphans[0].Name != stubbornMCP {
		t.Errorf("root's --end --include-likely --dry-run would end %+v, want the npx leak alone", res.Orphans)
	}

	// Under the agent: leaks through sh -c and node directly, their hosts
	// SIGKILLed, and a live host that superseded its filesystem server.
	shMarker := fmt.Sprintf("MCPTRACE_E2E=orphan-sh-%d", pid)
	c.run(0, shMarker, `dead_py sh -c 'node $C/node_modules/`+stubbornMCP+`/index.mjs --api-key=LEAKSECRET --children; :'`)
	nodeMarker := fmt.Sprintf("MCPTRACE_E2E=orphan-node-%d", pid)
	c.run(0, nodeMarker, `dead_node node $C/node_modules/`+stubbornMCP+`/index.mjs`)
	liveMarker := fmt.Sprintf("MCPTRACE_E2E=orphan-live-%d", pid)
	live := startHost(t, "", liveMarker, a.Socket())
	t.Cleanup(func() { endMarked(liveMarker) })
	const fs = "@modelcontextprotocol/server-filesystem"
	sawCandidate := false
	waitFor(t, testenv.Bound(30*time.Second), "the three stubborn leaks and the superseded server to be listed", func() (bool, string) {
		l = orphansOf(t, cl)
		for _, x := range l.Candidates {
			sawCandidate = sawCandidate || x.Name == fs && strings.Contains(strings.Join(x.Evidence, "; "), "of the 2s that confirm it")
		}
		return len(named(l, stubbornMCP)) == 3 && len(named(l, fs)) == 1, fmt.Sprintf("%+v; candidates %+v", l.Orphans, l.Candidates)
	}, func() string {
		var b strings.Builder
		for _, m := range []string{shMarker, nodeMarker} {
			for _, p := range agenttest.WithEnv(m) {
				st, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.PID))
				fd0, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/0", p.PID))
				fd1, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/1", p.PID))
				fmt.Fprintf(&b, "%v: fd0 %s fd1 %s stat %s\n", p, fd0, fd1, st)
			}
		}
		return b.String()
	})
	if !sawCandidate {
		t.Error("the superseded filesystem server was never shown as a candidate while it was not idle long enough")
	}
	if len(l.Orphans) != 4 {
		t.Errorf("listed %d, want the 4 leaks: %+v", len(l.Orphans), l.Orphans)
	}
	for _, x := range named(l, stubbornMCP) {
		if x.Confidence != orphans.Certain || x.Kind != orphans.HostGone || x.Proof != orphans.ProofNameAndStdio {
			t.Errorf("a stubborn leak: %+v", x)
		}
	}
	older := named(l, fs)[0]
	if older.Kind != orphans.Superseded || older.Confidence != orphans.Likely || older.Proof != orphans.ProofNameAndStdio ||
		older.Host.PID != uint32(live.cmd.Process.Pid) {
		t.Errorf("the older filesystem server of the live host: %+v", older)
	}
	for _, x := range l.Orphans {
		if strings.Contains(strings.Join(x.Argv, " "), "LEAKSECRET") {
			t.Errorf("a secret in a command line is shown: %q", x.Argv)
		}
	}
	code, out := agenttest.CLIAs(t, a.Socket(), 0, "orphans")
	t.Logf("mcptrace orphans:\n%s", out)
	if code != 0 || !strings.HasPrefix(out, "4 leaked MCP servers (3 certain, 1 likely)") {
		t.Errorf("mcptrace orphans exited %d, want the totals first", code)
	}
	// --end ends the certain ones; --include-likely the likely one too.
	res := endOrphansAs(t, a.Socket(), 0)
	if len(res.Orphans) != 3 || res.Report.Survivors != 0 {
		t.Errorf("--end ended %d orphans (%d survivors), want the 3 certain ones", len(res.Orphans), res.Report.Survivors)
	}
	for _, m := range []string{npxMarker, shMarker, nodeMarker} {
		if left := stubborns(agenttest.WithEnv(m)); len(left) != 0 {
			t.Errorf("leaked servers still run: %v", left)
		}
	}
	if len(serversOf(liveMarker, "1")) == 0 {
		t.Error("plain --end ended the likely superseded server")
	}
	res = endOrphansAs(t, a.Socket(), 0, "--include-likely")
	if len(res.Orphans) != 1 || res.Orphans[0].Name != fs || res.Report.Survivors != 0 {
		t.Errorf("--end --include-likely ended %+v", res.Orphans)
	}
	if left := serversOf(liveMarker, "1"); len(left) != 0 {
		t.Errorf("the superseded server survived --include-likely: %v", left)
	}
	if h := agenttest.ProcOf(t, uint32(live.cmd.Process.Pid), "the live host"); !h.Alive() {
		t.Error("the live host was ended")
	}
	if len(serversOf(liveMarker, "2")) == 0 {
		t.Error("the live host's current filesystem server was ended")
	}
	// The sh -c server's own worker ended with it; the daemon it
	// detached into its own session did not.
	var worker, daemon int
	for _, p := range agenttest.WithEnv(shMarker) {
		switch strings.Join(p.Argv, " ") {
		case "sleep 3601":
			worker++
		case "sleep 3602":
			daemon++
		}
	}
	if worker != 0 || daemon != 1 {
		t.Errorf("after --end: %d workers and %d detached daemons of the sh -c server, want 0 and 1", worker, daemon)
	}
	for _, p := range all {
		if !p.Alive() {
			t.Errorf("bystander %v was ended", p)
		}
	}
	for _, b := range list {
		if len(withArgv(all, b.find)) == 0 {
			t.Errorf("bystander %q was not running to be checked", b.name)
		}
	}
	t.Logf("%d bystanders (%d processes of 2 users) never listed nor ended", len(list), len(all))
}

// leakThroughSh starts, as uid, under a reaper, `sh -c 'node
// stubborn-mcp; :'` with stdin and stdout pipes of a Python host, and
// SIGKILLs the host: the server's stdio is cut off and it is reparented.
func leakThroughSh(t *testing.T, c *corpus, marker string, uid uint32) {
	t.Helper()
	c.run(uid, marker, `dead_py sh -c 'node $C/node_modules/`+stubbornMCP+`/index.mjs --token=LEAKSECRET; :'`)
	testenv.Eventually(t, "the server under sh -c to start", func() (bool, string) {
		n := len(stubborns(agenttest.WithEnv(marker)))
		return n == 1, fmt.Sprintf("%d processes", n)
	})
}

// Another user sees and ends only their own orphans; root's stay until
// root ends them.
func TestOrphansOfAnotherUserAreTheirsAlone(t *testing.T) {
	a := agenttest.Start(t, agent.Options{OrphansConfirmAfter: time.Second,
		Enforcer: enforcer.Config{Mode: enforcer.ModeEnforce, Policy: enforcer.PolicyImmediate}})
	cl := api.NewClient(a.Socket())
	c := newCorpus(t)
	rootMarker := fmt.Sprintf("MCPTRACE_E2E=orphan-root-%d", os.Getpid())
	userMarker := fmt.Sprintf("MCPTRACE_E2E=orphan-nobody-%d", os.Getpid())
	leakThroughSh(t, c, rootMarker, 0)
	leakThroughSh(t, c, userMarker, nobody)
	testenv.Eventually(t, "both users' orphans to be listed", func() (bool, string) {
		l := orphansOf(t, cl)
		return l.Totals.Servers == 2, fmt.Sprintf("%+v", l.Orphans)
	})
	code, out := agenttest.CLIAs(t, a.Socket(), nobody, "orphans", "--json")
	if code != 0 || strings.Count(out, `"server":`) != 1 || !strings.Contains(out, fmt.Sprintf(`"uid": %d`, nobody)) {
		t.Errorf("nobody's list (exit %d):\n%s", code, out)
	}
	code, out = agenttest.CLIAs(t, a.Socket(), nobody, "orphans", "--end")
	t.Logf("nobody's --end:\n%s", out)
	if code != 0 {
		t.Errorf("nobody's --end exited %d", code)
	}
	if left := stubborns(agenttest.WithEnv(userMarker)); len(left) != 0 {
		t.Errorf("nobody's orphan survived its --end: %v", left)
	}
	if left := stubborns(agenttest.WithEnv(rootMarker)); len(left) != 1 {
		t.Errorf("root's orphan after nobody's --end: %v, want it alive", left)
	}
	if l := orphansOf(t, cl); l.Totals.Servers != 1 {
		t.Errorf("root sees %d orphans after nobody's --end, want its own", l.Totals.Servers)
	}
}

// A listed process that turns into another one while --end ends it
// gets no further signal: one that execs a setuid-root program on
// SIGTERM (its uids become 0) and one that execs another program (same
// uid) are refused at the SIGKILL, and live on as what they became;
// a third, that exits on SIGTERM as asked, is ended.
func TestOrphansEndRefusesAProcessThatChangedSinceItWasListed(t *testing.T) {
	a := agenttest.Start(t, agent.Options{OrphansConfirmAfter: time.Second,
		Enforcer: enforcer.Config{Mode: enforcer.ModeEnforce, Policy: enforcer.PolicyGraceful, Grace: time.Second}})
	cl := api.NewClient(a.Socket())
	c := newCorpus(t)
	// A setuid-root copy of sleep where setuid works (/var/tmp).
	suidDir, err := os.MkdirTemp("/var/tmp", "mcptrace-suid-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(suidDir) })
	os.Chmod(suidDir, 0o755)
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Fatal(err)
	}
	body, err := os.ReadFile(sleep)
	if err != nil {
		t.Fatal(err)
	}
	suid := filepath.Join(suidDir, "sleep")
	if err := os.WriteFile(suid, body, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(suid, os.ModeSetuid|0o755); err != nil {
		t.Fatal(err)
	}
	marker := fmt.Sprintf("MCPTRACE_E2E=orphan-swap-%d", os.Getpid())
	c.run(nobody, marker, `dead_py python3 -m mcp_server_swap `+suid+`
dead_py python3 -m mcp_server_swap `+sleep+`
dead_py python3 -m mcp_server_swap -`)
	testenv.Eventually(t, "the three servers to be listed, certain, as nobody's", func() (bool, string) {
		l := orphansOf(t, cl)
		n := 0
		for _, o := range l.Orphans {
			if o.Name == "mcp_server_swap" && o.Confidence == orphans.Certain && o.UID == nobody {
				n++
			}
		}
		return n == 3, fmt.Sprintf("%+v", l.Orphans)
	})
	res := endOrphansAs(t, a.Socket(), 0)
	t.Logf("--end: %+v", res.Report.Records)
	refused := 0
	for _, r := range res.Report.Records {
		if strings.HasPrefix(r.Result, enforcer.ResultRefused+": changed since it was listed") {
			refused++
		}
		if strings.Contains(r.Signal, "SIGKILL") {
			t.Errorf("SIGKILL sent to %+v", r)
		}
	}
	if refused != 2 {
		t.Errorf("%d processes refused as changed since listed, want the 2 that swapped", refused)
	}
	procs := agenttest.WithEnv(marker)
	if became := withArgv(procs, suid+" 600"); len(became) != 1 {
		t.Errorf("the setuid-root program the server became: %d alive, want 1 (nothing of it signalled)", len(became))
	} else if st, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", became[0].PID)); err != nil || !strings.Contains(string(st), fmt.Sprintf("Uid:\t%d\t0\t0", nobody)) {
		t.Errorf("the server's setuid exec did not make it root's: %v\n%s", err, st)
	}
	if n := len(withArgv(procs, sleep+" 600")); n != 1 {
		t.Errorf("the program the other server became: %d alive, want 1 (nothing of it signalled)", n)
	}
	if n := len(withArgv(procs, "mcp_server_swap")); n != 0 {
		t.Errorf("%d servers still run unchanged after --end", n)
	}
}
