package e2e_test

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mcptrace/mcptrace/agent"
	"github.com/mcptrace/mcptrace/enforcer"
	"github.com/mcptrace/mcptrace/internal/agenttest"
	"github.com/mcptrace/mcptrace/internal/dockertest"
	"github.com/mcptrace/mcptrace/internal/testenv"
	"github.com/mcptrace/mcptrace/lineage"
	"github.com/mcptrace/mcptrace/procfs"
)

func TestMain(m *testing.M) {
	testenv.RunHelper(map[string]func(){"hostile": hostileHelper})
	code := dockertest.Run(m)
	testenv.RemoveBinary()
	os.Exit(code)
}

// servers lists live processes of the test (by an environment marker)
// whose command line names the filesystem server: found from /proc,
// independently of the agent.
func servers(marker string) []string { return serversOf(marker, "") }

// serversOf is servers limited to one server set of the host (set "" is
// every set): every process of set N has MCPTRACE_E2E_SET=N in its
// environment, wrappers included.
func serversOf(marker, set string) []string {
	ents, _ := os.ReadDir("/proc")
	var out []string
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		env, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err != nil || !bytes.Contains(env, []byte(marker+"\x00")) {
			continue
		}
		if set != "" && !bytes.Contains(env, []byte("MCPTRACE_E2E_SET="+set+"\x00")) {
			continue
		}
		if set == "" {
			cmdline, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
			if !bytes.Contains(cmdline, []byte("server-filesystem")) {
				continue
			}
		}
		pid, _ := strconv.Atoi(e.Name())
		if s, err := procfs.Read("/proc", uint32(pid)); err == nil {
			out = append(out, fmt.Sprintf("%d %s", pid, strings.Join(s.Argv, " ")))
		}
	}
	return out
}

func startAgent(t *testing.T) *agent.Agent {
	t.Helper()
	return agenttest.Start(t, agent.Options{
		Enforcer: enforcer.Config{Mode: enforcer.ModeEnforce, Policy: enforcer.PolicyGraceful, Grace: time.Second},
	})
}

type mcpHost struct {
	cmd     *exec.Cmd
	in      io.WriteCloser
	out     *bufio.Scanner
	servers []string // "set pid tools"
}

// startHost runs the Node host, under `mcptrace run` when session != "";
// its `mcptrace mark destroy` talks to the agent on socket.
func startHost(t *testing.T, session, marker, socket string) *mcpHost {
	t.Helper()
	hostDir, err := filepath.Abs("testdata/mcphost")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(hostDir, "node_modules", "@modelcontextprotocol", "sdk")); err != nil {
		testenv.Missing(t, "the MCP host's node packages", "run `make setup-test` (npm ci in e2e/testdata/mcphost)")
	}
	node, err := exec.LookPath("node")
	if err != nil {
		testenv.Missing(t, "Node.js", "install nodejs (make setup-test)")
	}
	bin := testenv.Binary(t)
	args := []string{node, "host.mjs", t.TempDir()}
	if session != "" {
		args = append([]string{bin, "run", "--session", session, "--"}, args...)
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Dir = hostDir
	cmd.Env = append(os.Environ(), marker, "PATH="+filepath.Dir(bin)+":"+os.Getenv("PATH"), "MCPTRACE_API_SOCKET="+socket)
	in, out := testenv.StartPiped(t, cmd)
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		// The leak control leaves servers behind on purpose; end them.
		for _, s := range servers(marker) {
			pid, _ := strconv.Atoi(strings.Fields(s)[0])
			if p, err := os.FindProcess(pid); err == nil {
				p.Kill()
			}
		}
	})
	h := &mcpHost{cmd: cmd, in: in, out: out}
	h.expect(t, "ready")
	return h
}

// say sends the host a command and reads its answer up to the line that
// starts with want, which it returns; "server" lines are collected.
func (h *mcpHost) say(t *testing.T, cmd, want string) string {
	t.Helper()
	if _, err := io.WriteString(h.in, cmd+"\n"); err != nil {
		t.Fatalf("tell the host %q: %v", cmd, err)
	}
	return h.expect(t, want)
}

func (h *mcpHost) expect(t *testing.T, want string) string {
	t.Helper()
	deadline := time.AfterFunc(60*time.Second, func() { h.cmd.Process.Kill() })
	defer deadline.Stop()
	for h.out.Scan() {
		line := h.out.Text()
		if strings.HasPrefix(line, want) {
			return line
		}
		if rest, ok := strings.CutPrefix(line, "server "); ok {
			h.servers = append(h.servers, rest)
		}
	}
	t.Fatalf("MCP host ended before %q (servers %v)", want, h.servers)
	return ""
}

func TestAbandonedServerSetLeaksWithoutASession(t *testing.T) {
	// The control: without mcptrace, the first server set, abandoned by
	// the refresh, stays alive while the host lives.
	marker := fmt.Sprintf("MCPTRACE_E2E=control-%d", os.Getpid())
	h := startHost(t, "", marker, "/nonexistent/mcptrace.sock")
	if len(h.servers) != 2 {
		t.Fatalf("servers %v, want two sets", h.servers)
	}
	time.Sleep(500 * time.Millisecond)
	if got := servers(marker); len(got) < 2 {
		t.Fatalf("server processes %v: want both sets alive (the abandoned one leaks)", got)
	} else {
		t.Logf("without mcptrace, %d server processes stay alive:\n%s", len(got), strings.Join(got, "\n"))
	}
}

func TestMCPHostExitEndsEveryServer(t *testing.T) {
	a := startAgent(t)
	const session = "mcp-exit"
	marker := fmt.Sprintf("MCPTRACE_E2E=%s-%d", session, os.Getpid())
	h := startHost(t, session, marker, a.Socket())
	if len(h.servers) != 2 {
		t.Fatalf("servers %v, want two sets", h.servers)
	}
	before := servers(marker)
	if len(before) < 2 {
		t.Fatalf("server processes before the end: %v", before)
	}
	t.Logf("session %s has %d members; server processes:\n%s", session, len(membersOf(a, session)), strings.Join(before, "\n"))
	io.WriteString(h.in, "exit\n")
	waitReport(t, a, session, 0)
	if left := servers(marker); len(left) != 0 {
		t.Fatalf("%d server processes left:\n%s", len(left), strings.Join(left, "\n"))
	}
}

// A host that sends a destroy marker on every refresh keeps running; each
// marker ends every server set it started before, and only those.
func TestMCPHostMarkersEndOlderServerSetsAndSpareTheHost(t *testing.T) {
	a := startAgent(t)
	const session = "mcp-gen"
	marker := fmt.Sprintf("MCPTRACE_E2E=%s-%d", session, os.Getpid())
	h := startHost(t, session, marker, a.Socket())
	host := h.cmd.Process.Pid
	sets := 2 // the host starts two (the second abandons the first)
	for round := 1; round <= 3; round++ {
		if line := h.say(t, "mark", "marked"); line != "marked 0" {
			t.Fatalf("round %d: the host's `mcptrace mark destroy` ended %q, want exit code 0", round, line)
		}
		rep := waitReport(t, a, session, uint32(round))
		h.say(t, "start", "ready")
		sets++
		for set := 1; set < sets; set++ {
			if left := serversOf(marker, strconv.Itoa(set)); len(left) != 0 {
				t.Fatalf("round %d: %d processes of server set %d (older than the marker) left:\n%s", round, len(left), set, strings.Join(left, "\n"))
			}
		}
		newest := serversOf(marker, strconv.Itoa(sets))
		if len(newest) == 0 {
			t.Fatalf("round %d: the newest server set %d is not running", round, sets)
		}
		if err := syscall.Kill(host, 0); err != nil {
			t.Fatalf("round %d: the host (pid %d) was killed by its own marker: %v", round, host, err)
		}
		s, _ := a.Sessions().Find(session)
		t.Logf("round %d: marker ended generation %d (killed %d, exited %d, in %v); session in generation %d; set %d runs as %d processes",
			round, round, rep.Killed, rep.ExitedBeforeSignal, rep.Duration.Round(time.Millisecond), s.Generation, sets, len(newest))
	}

	// `mcptrace session end` ends the host too.
	out, err := exec.Command(testenv.Binary(t), "session", "end", session, "--api.socket", a.Socket()).CombinedOutput()
	if err != nil {
		t.Fatalf("session end: %v: %s", err, out)
	}
	t.Logf("session end: %s", strings.TrimSpace(string(out)))
	waitReport(t, a, session, 0)
	if err := h.cmd.Wait(); err == nil {
		t.Error("the host exited normally; want it killed by session end")
	}
	if left := serversOf(marker, ""); len(left) != 0 {
		t.Fatalf("%d server processes left after session end:\n%s", len(left), strings.Join(left, "\n"))
	}
}

// waitReport waits for the enforcer's report of the end of session id
// (gen 0) or of its generation gen, and requires it to have left no
// survivor.
// membersOf is the members of the session with this ID (the one owner
// that has one).
func membersOf(a *agent.Agent, id string) []lineage.Process {
	s, _ := a.Sessions().Find(id)
	return a.Sessions().Members(s.Ref())
}

func waitReport(t *testing.T, a *agent.Agent, id string, gen uint32) enforcer.Report {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if r, ok := a.SessionReport(id, gen); ok {
			if !r.Empty || r.Survivors != 0 {
				t.Fatalf("enforcer report of %s generation %d: empty=%v survivors=%d", id, gen, r.Empty, r.Survivors)
			}
			return r
		}
		if time.Now().After(deadline) {
			t.Fatalf("no enforcer report of %s generation %d 30s after its end", id, gen)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
