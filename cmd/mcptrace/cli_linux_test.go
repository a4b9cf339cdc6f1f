package main_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mcptrace/mcptrace/api"
	"github.com/mcptrace/mcptrace/internal/agenttest"
	"github.com/mcptrace/mcptrace/internal/testenv"
)

// build returns the mcptrace binary under test (built once, or the one
// MCPTRACE_BIN names, as in the VM guests), runnable by every user.
func build(t *testing.T) string {
	t.Helper()
	return testenv.Binary(t)
}

func TestMain(m *testing.M) {
	code := m.Run()
	testenv.RemoveBinary()
	os.Exit(code)
}

// startAgent runs the real binary as the agent on a private socket.
func startAgent(t *testing.T, bin string) string {
	t.Helper()
	testenv.Root(t)
	dir, err := os.MkdirTemp("", "mcptrace-cli-test-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o755)
	t.Cleanup(func() { os.RemoveAll(dir) })
	socket := filepath.Join(dir, "agent.sock")
	var logs bytes.Buffer
	// No host rules, and narrowed to this test binary's processes: this
	// agent ends only the test's own sessions.
	cmd := exec.Command(bin, "agent", "--api.socket", socket, "--sessions.default-rules=false", agenttest.WithinFlag(),
		"--enforcer.grace-period=500ms")
	cmd.Stderr = &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
		if t.Failed() {
			t.Logf("agent logs:\n%s", logs.String())
		}
	})
	for i := 0; i < 200; i++ {
		if _, err := os.Stat(socket); err == nil {
			return socket
		}
		time.Sleep(25 * time.Millisecond)
	}
	t.Fatalf("agent did not create its socket: %s", logs.String())
	return ""
}

func run(t *testing.T, bin string, args ...string) (string, string, error) {
	t.Helper()
	var out, errb bytes.Buffer
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	return out.String(), errb.String(), err
}

func TestTreeShowsDeadWrapperChainWithSecretsRedacted(t *testing.T) {
	bin := build(t)
	socket := startAgent(t, bin)
	const token = "ghp_0123456789abcdefghijklmnopqrstuvwxyz"
	host := exec.Command("/bin/sh", "-c",
		`sh -c 'env GITHUB_PERSONAL_ACCESS_TOKEN=`+token+` sleep 30 & echo $!'; exec sleep 30`)
	stdout, _ := host.StdoutPipe()
	if err := host.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { host.Process.Kill(); host.Wait() })
	sc := bufio.NewScanner(stdout)
	if !sc.Scan() {
		t.Fatal("no pid from the script")
	}
	server, _ := strconv.Atoi(sc.Text())
	t.Cleanup(func() { syscall.Kill(server, syscall.SIGKILL) })

	wants := []struct {
		line int
		has  []string
	}{
		{0, []string{strconv.Itoa(host.Process.Pid), "alive", "→ sleep 30"}},
		{1, []string{"exited 0", "sh -c"}},
		{2, []string{strconv.Itoa(server), "alive", "GITHUB_PERSONAL_ACCESS_TOKEN=<redacted>", "→ sleep 30", "reparented to 1"}},
	}
	// missing lists what the tree does not show yet.
	missing := func(lines []string) []string {
		var m []string
		for _, want := range wants {
			for _, s := range want.has {
				if want.line >= len(lines) || !strings.Contains(lines[want.line], s) {
					m = append(m, fmt.Sprintf("line %d lacks %q", want.line, s))
				}
			}
		}
		return m
	}
	// The agent applies events asynchronously, and the script prints the
	// server's pid before env has exec'd sleep: ask until the whole chain,
	// with the wrapper's exit and both execs, has arrived. What is still
	// missing when time runs out is the failure.
	var out string
	eventually(t, "tree of the host with the exited wrapper and both execs", func() (bool, string) {
		o, errOut, err := run(t, bin, "tree", "--api.socket", socket, strconv.Itoa(host.Process.Pid))
		out = o
		lines := strings.Split(strings.TrimSpace(out), "\n")
		m := missing(lines)
		return err == nil && len(lines) == 3 && len(m) == 0, fmt.Sprintf("%v %s\n%s\n%s", err, errOut, out, strings.Join(m, "\n"))
	})
	t.Logf("\n%s", out)
	jsonOut, errOut, err := run(t, bin, "tree", "--json", "--api.socket", socket, strconv.Itoa(host.Process.Pid))
	if err != nil {
		t.Fatalf("tree --json: %v: %s", err, errOut)
	}
	var list api.ProcessList
	if err := json.Unmarshal([]byte(jsonOut), &list); err != nil {
		t.Fatalf("tree --json is not JSON: %v", err)
	}
	if len(list.Processes) != 3 {
		t.Errorf("--json lists %d processes, want 3", len(list.Processes))
	}
	for name, s := range map[string]string{"tree": out, "tree --json": jsonOut} {
		if strings.Contains(s, token) || strings.Contains(s, token[4:]) {
			t.Errorf("%s shows the token", name)
		}
	}

	anc, errOut, err := run(t, bin, "tree", "--api.socket", socket, "--ancestors", strconv.Itoa(server))
	if err != nil {
		t.Fatalf("tree --ancestors: %v: %s", err, errOut)
	}
	if !strings.Contains(anc, strconv.Itoa(host.Process.Pid)) || !strings.HasPrefix(strings.TrimSpace(anc), "1 ") {
		t.Errorf("ancestors of %d do not run from init through the host %d:\n%s", server, host.Process.Pid, anc)
	}
}

func TestClientErrorsSayWhatToDo(t *testing.T) {
	bin := build(t)
	for _, tc := range []struct {
		name string
		args []string
		want string
		code int
	}{
		{"no agent", []string{"tree", "--api.socket", "/nonexistent/mcptrace.sock"}, "start it with `mcptrace agent`", 1},
		{"bad pid", []string{"tree", "--api.socket", "/nonexistent/mcptrace.sock", "abc"}, `PID "abc" is not a process id`, 2},
		{"unknown flag", []string{"tree", "--bogus"}, "unknown flag: --bogus", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, errOut, err := run(t, bin, tc.args...)
			ee, ok := err.(*exec.ExitError)
			if !ok || ee.ExitCode() != tc.code {
				t.Fatalf("exit %v, want code %d; stderr %q", err, tc.code, errOut)
			}
			if !strings.Contains(errOut, tc.want) {
				t.Errorf("stderr %q lacks %q", errOut, tc.want)
			}
		})
	}
}

func TestAgentWithoutPrivilegeNamesWhatItNeeds(t *testing.T) {
	testenv.Root(t) // to switch to an unprivileged uid
	bin := build(t)
	// Narrowed as every test agent is, should it ever start.
	cmd := exec.Command(bin, "agent", "--api.socket", filepath.Join(t.TempDir(), "nobody.sock"),
		"--sessions.default-rules=false", agenttest.WithinFlag())
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("agent started as uid 65534:\n%s", out)
	}
	for _, want := range []string{"CAP_BPF", "root"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("error %q does not name %s", out, want)
		}
	}
}

func TestSessionsAndTreeShowWhatTheEnforcerDid(t *testing.T) {
	bin := build(t)
	socket := startAgent(t, bin)
	host := exec.Command(bin, "run", "--session", "cli-test", "--", "/bin/sh", "-c", "sleep 300 & echo $!; wait")
	stdout, _ := host.StdoutPipe()
	if err := host.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { host.Process.Kill(); host.Wait() })
	sc := bufio.NewScanner(stdout)
	if !sc.Scan() {
		t.Fatal("no pid from the host")
	}
	server, _ := strconv.Atoi(sc.Text())
	t.Cleanup(func() { syscall.Kill(server, syscall.SIGKILL) })

	var out string
	eventually(t, "the session listed as active", func() (bool, string) {
		o, errOut, err := run(t, bin, "sessions", "--api.socket", socket)
		out = o
		return err == nil && strings.Contains(out, "cli-test") && strings.Contains(out, "active"), fmt.Sprintf("%v %s\n%s", err, errOut, out)
	})
	host.Process.Signal(syscall.SIGKILL)
	host.Wait()
	eventually(t, "tree --session to show the kill", func() (bool, string) {
		o, errOut, err := run(t, bin, "tree", "--session", "cli-test", "--api.socket", socket)
		out = o
		return err == nil && strings.Contains(out, "killed by mcptrace SIGTERM"), fmt.Sprintf("%v %s\n%s", err, errOut, out)
	})
	t.Logf("\n%s", out)
	if !strings.Contains(out, strconv.Itoa(server)) || !strings.Contains(out, "killed SIGKILL") {
		t.Errorf("tree --session lacks the killed server %d or the killed root:\n%s", server, out)
	}
	out, _, _ = run(t, bin, "sessions", "--api.socket", socket)
	t.Logf("\n%s", out)
	for _, want := range []string{"cli-test", "ended", "run", "root-exit", "0/2"} {
		if !strings.Contains(out, want) {
			t.Errorf("sessions lacks %q:\n%s", want, out)
		}
	}
}

// eventually polls cond until it holds, or fails the test after 10 s with
// cond's last detail.
func eventually(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	testenv.Eventually(t, what, cond)
}
