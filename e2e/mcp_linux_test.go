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
	"testing"
	"time"

	"github.com/mcptrace/mcptrace/agent"
	"github.com/mcptrace/mcptrace/enforcer"
	"github.com/mcptrace/mcptrace/internal/agenttest"
	"github.com/mcptrace/mcptrace/internal/testenv"
	"github.com/mcptrace/mcptrace/procfs"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testenv.RemoveBinary()
	os.Exit(code)
}

// servers lists live processes of the test (by an environment marker)
// whose command line names the filesystem server: found from /proc,
// independently of the agent.
func servers(marker string) []string {
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
		cmdline, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if !bytes.Contains(cmdline, []byte("server-filesystem")) {
			continue
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
	servers []string // "set pid tools"
}

// startHost runs the Node host, under `mcptrace run` when session != "".
func startHost(t *testing.T, session, marker string) *mcpHost {
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
	cmd.Env = append(os.Environ(), marker, "PATH="+filepath.Dir(bin)+":"+os.Getenv("PATH"))
	in, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
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
	h := &mcpHost{cmd: cmd, in: in}
	sc := bufio.NewScanner(out)
	deadline := time.AfterFunc(60*time.Second, func() { cmd.Process.Kill() })
	defer deadline.Stop()
	for sc.Scan() {
		line := sc.Text()
		if line == "ready" {
			go io.Copy(io.Discard, out)
			return h
		}
		if rest, ok := strings.CutPrefix(line, "server "); ok {
			h.servers = append(h.servers, rest)
		}
	}
	t.Fatalf("MCP host ended before ready (servers %v)", h.servers)
	return nil
}

func TestAbandonedServerSetLeaksWithoutASession(t *testing.T) {
	// The control: without mcptrace, the first server set, abandoned by
	// the refresh, stays alive while the host lives.
	marker := fmt.Sprintf("MCPTRACE_E2E=control-%d", os.Getpid())
	h := startHost(t, "", marker)
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

func TestMCPHostSessionEndsWithZeroServersLeft(t *testing.T) {
	a := startAgent(t)
	for _, tc := range []struct {
		name string
		end  string // what the host is told
	}{
		{"destroy marker from the host", "mark"},
		{"host exits", "exit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			session := "mcp-" + tc.end
			marker := fmt.Sprintf("MCPTRACE_E2E=%s-%d", session, os.Getpid())
			h := startHost(t, session, marker)
			if len(h.servers) != 2 {
				t.Fatalf("servers %v, want two sets", h.servers)
			}
			before := servers(marker)
			if len(before) < 2 {
				t.Fatalf("server processes before the end: %v", before)
			}
			members := a.Sessions().Members(session)
			t.Logf("session %s has %d members; server processes:\n%s", session, len(members), strings.Join(before, "\n"))
			io.WriteString(h.in, tc.end+"\n")

			deadline := time.Now().Add(30 * time.Second)
			for {
				if r, ok := a.Report(session); ok {
					if !r.Empty || r.Survivors != 0 {
						t.Fatalf("enforcer report: empty=%v survivors=%d", r.Empty, r.Survivors)
					}
					t.Logf("enforcer: killed %d, exited before signal %d, in %v", r.Killed, r.ExitedBeforeSignal, r.Duration)
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("no enforcer report 30s after the session's end")
				}
				time.Sleep(50 * time.Millisecond)
			}
			if left := servers(marker); len(left) != 0 {
				t.Fatalf("%d server processes left:\n%s", len(left), strings.Join(left, "\n"))
			}
		})
	}
}
