package main_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/mcptrace/mcptrace/api"
	"github.com/mcptrace/mcptrace/containers"
	"github.com/mcptrace/mcptrace/internal/agenttest"
	"github.com/mcptrace/mcptrace/internal/testenv"
	"github.com/mcptrace/mcptrace/procfs"
	"github.com/mcptrace/mcptrace/sensor"
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

// startAgent runs the real binary as the agent, narrowed to this test's
// processes and with private socket, pins and state (agenttest.Process).
func startAgent(t *testing.T, bin string) string {
	t.Helper()
	return agenttest.StartProcess(t, "--enforcer.grace-period=500ms").Socket
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
	_, sc := testenv.StartPiped(t, host)
	server := int(testenv.ReadPID(t, sc))
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

// A marker left to the kernel on purpose (a sandbox without the socket)
// succeeds and says that it depends on a running agent.
func TestKernelOnlyMarkerSaysItDependsOnAnAgent(t *testing.T) {
	out, errOut, err := run(t, build(t), "mark", "destroy", "--kernel-only", "--session", "s", "--api.socket", "/nonexistent/mcptrace.sock")
	if err != nil {
		t.Fatalf("mark destroy --kernel-only: %v: %s", err, errOut)
	}
	if !strings.Contains(out, "takes effect only if an mcptrace agent is running") {
		t.Errorf("output %q does not say the marker depends on a running agent", out)
	}
}

// Each error says what is wrong and the one command that fixes it: with
// the agent down, how to start it the way it was installed (the note an
// agent left beside its socket, else by hand); a typo, the word meant.
// No raw Go error reaches the user.
func TestClientErrorsSayWhatToDo(t *testing.T) {
	bin := build(t)
	// Sockets where an agent of each install served and stopped: the
	// note it left, nothing listening.
	stopped := func(in api.Install) string {
		dir := t.TempDir() // 0700, root's: a note there is trusted
		socket := filepath.Join(dir, "mcptrace.sock")
		if err := api.WriteInstall(socket, in); err != nil {
			t.Fatal(err)
		}
		l, err := net.Listen("unix", socket)
		if err != nil {
			t.Fatal(err)
		}
		l.(*net.UnixListener).SetUnlinkOnClose(false)
		l.Close() // the socket file stays, nothing listens: a crashed agent
		return socket
	}
	systemd := stopped(api.Install{Kind: api.InstallSystemd, Unit: "mcptrace.service"})
	k8s := stopped(api.Install{Kind: api.InstallKubernetes, Namespace: "mcptrace"})
	for _, tc := range []struct {
		name string
		args []string
		want []string
		code int
	}{
		{"no agent", []string{"tree", "--api.socket", "/nonexistent/mcptrace.sock"}, []string{"no mcptrace agent is running", "start it with: sudo mcptrace agent"}, 1},
		{"no agent of a systemd unit", []string{"status", "--api.socket", systemd}, []string{"the agent stopped or crashed", "start it with: sudo systemctl start mcptrace.service", "journalctl -u mcptrace.service"}, 1},
		{"no agent of a DaemonSet", []string{"sessions", "--api.socket", k8s}, []string{"start it with: kubectl -n mcptrace rollout restart daemonset/mcptrace", "kubectl -n mcptrace logs daemonset/mcptrace --previous"}, 1},
		{"bad pid", []string{"tree", "--api.socket", "/nonexistent/mcptrace.sock", "abc"}, []string{`PID "abc" is not a process id`}, 2},
		{"unknown flag", []string{"tree", "--bogus"}, []string{"unknown flag: --bogus", "mcptrace tree --help"}, 2},
		{"a typo of a flag", []string{"tree", "--sesion", "s"}, []string{"unknown flag: --sesion; did you mean --session?"}, 2},
		{"a typo of a command", []string{"histroy"}, []string{`unknown command "histroy"`, "history"}, 2},
		{"a typo of a subcommand", []string{"session", "ened", "s"}, []string{`unknown command "ened" for "mcptrace session"; did you mean mcptrace session end?`}, 2},
		{"marker with no agent", []string{"mark", "destroy", "--session", "s", "--api.socket", "/nonexistent/mcptrace.sock"},
			[]string{"the marker was not confirmed: it takes effect only if an agent sees this command's exec", "start it with: sudo mcptrace agent"}, 1},
		{"session end with no agent", []string{"session", "end", "s", "--api.socket", "/nonexistent/mcptrace.sock"}, []string{"start it with: sudo mcptrace agent"}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, errOut, err := run(t, bin, tc.args...)
			ee, ok := err.(*exec.ExitError)
			if !ok || ee.ExitCode() != tc.code {
				t.Fatalf("exit %v, want code %d; stderr %q", err, tc.code, errOut)
			}
			for _, want := range tc.want {
				if !strings.Contains(errOut, want) {
					t.Errorf("stderr %q lacks %q", errOut, want)
				}
			}
			for _, raw := range []string{"dial unix", "Get \"http://", "connect: "} {
				if strings.Contains(errOut, raw) {
					t.Errorf("stderr %q shows the raw Go error (%q)", errOut, raw)
				}
			}
		})
	}
	// A socket the caller may not reach: run the command as root.
	t.Run("socket denied", func(t *testing.T) {
		testenv.Root(t)
		socket := filepath.Join(t.TempDir(), "mcptrace.sock") // in root's 0700 directory
		l, err := net.Listen("unix", socket)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		cmd := exec.Command(bin, "status", "--api.socket", socket)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		out, err := cmd.CombinedOutput()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(string(out), "permission denied") || !strings.Contains(string(out), "run it as root: sudo mcptrace status") {
			t.Errorf("status as nobody on root's socket: %v\n%s", err, out)
		}
	})
}

func TestAgentWithoutPrivilegeNamesWhatItNeeds(t *testing.T) {
	testenv.Root(t) // to switch to an unprivileged uid
	bin := build(t)
	// Narrowed as every test agent is, should it ever start.
	dir := t.TempDir()
	cmd := exec.Command(bin, "agent", "--api.socket", filepath.Join(dir, "nobody.sock"),
		"--bpf.pin-dir", filepath.Join(dir, "pins"), "--state.dir", filepath.Join(dir, "state"),
		"--sessions.default-rules=false", agenttest.WithinFlag(), "--metrics.listen-address", "")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("agent started as uid 65534:\n%s", out)
	}
	// Not the kernel's fault, and its own exit status, which the unit
	// does not restart.
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != sensor.ExitNoPrivilege {
		t.Errorf("exit %v, want status %d", err, sensor.ExitNoPrivilege)
	}
	for _, want := range []string{"the agent needs root", "uid 65534", "CAP_BPF", "not a kernel limit", "Run it as root: sudo mcptrace agent"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("error %q does not say %q", out, want)
		}
	}
	if strings.Contains(string(out), "kernel cannot") {
		t.Errorf("error %q blames the kernel", out)
	}
}

// A second agent on the same socket, state and pins says first that
// another agent runs, and the command that stops it; not the history's
// or the state's lock.
func TestSecondAgentSaysAnotherRunsAndHowToStopIt(t *testing.T) {
	ag := agenttest.StartProcess(t)
	cmd := exec.Command(ag.Bin, "agent", "--api.socket", ag.Socket, "--bpf.pin-dir", ag.PinDir, "--state.dir", ag.StateDir,
		"--history.dir", ag.HistoryDir, "--sessions.default-rules=false", agenttest.WithinFlag(), "--metrics.listen-address", "")
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
		t.Fatalf("second agent: %v, want exit status 1\n%s", err, out)
	}
	first, _, _ := strings.Cut(string(out), "\n")
	if !strings.HasPrefix(first, "mcptrace: another mcptrace agent already serves on "+ag.Socket) || !strings.Contains(first, "Stop it first: ") {
		t.Errorf("the second agent's first line is not the reason with its fix:\n%s", out)
	}
	if strings.Contains(string(out), "level=ERROR") {
		t.Errorf("the second agent logged an error before the reason:\n%s", out)
	}
}

func TestSessionsAndTreeShowWhatTheEnforcerDid(t *testing.T) {
	bin := build(t)
	socket := startAgent(t, bin)
	host := exec.Command(bin, "run", "--session", "cli-test", "--", "/bin/sh", "-c", "sleep 300 & echo $!; wait")
	_, sc := testenv.StartPiped(t, host)
	server := int(testenv.ReadPID(t, sc))
	t.Cleanup(func() { syscall.Kill(server, syscall.SIGKILL) })

	var out string
	eventually(t, "the session listed as active", func() (bool, string) {
		o, errOut, err := run(t, bin, "sessions", "--api.socket", socket)
		out = o
		return err == nil && strings.Contains(out, "cli-test") && strings.Contains(out, "active"), fmt.Sprintf("%v %s\n%s", err, errOut, out)
	})
	// Completion asks the agent for session IDs and PIDs.
	if out, _, err := run(t, bin, "__complete", "tree", "--api.socket", socket, "--session", "cli-"); err != nil || !strings.Contains(out, "cli-test\tactive") {
		t.Errorf("completing --session: %v\n%s", err, out)
	}
	if out, _, err := run(t, bin, "__complete", "tree", "--api.socket", socket, strconv.Itoa(host.Process.Pid)); err != nil || !strings.Contains(out, strconv.Itoa(host.Process.Pid)+"\t") {
		t.Errorf("completing tree's PID %d: %v\n%s", host.Process.Pid, err, out)
	}
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

// A marker spares the host: tree --session shows each member's generation
// and what the marker ended, sessions the generation in force.
func TestTreeSessionShowsGenerationsAndWhatEachMarkerEnded(t *testing.T) {
	bin := build(t)
	ag := agenttest.StartProcess(t, "--enforcer.grace-period=500ms")
	host := exec.Command(bin, "run", "--session", "gen-test", "--", "/bin/sh", "-c",
		"sleep 300 & echo $!; read x; sleep 301 & echo $!; wait")
	stdout, _ := host.StdoutPipe()
	stdin, _ := host.StdinPipe()
	if err := host.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { host.Process.Kill(); host.Wait() })
	sc := bufio.NewScanner(stdout)
	readPID := func() int {
		if !sc.Scan() {
			t.Fatal("no pid from the host")
		}
		pid, _ := strconv.Atoi(sc.Text())
		t.Cleanup(func() { syscall.Kill(pid, syscall.SIGKILL) })
		return pid
	}
	first := readPID()
	eventually(t, "the first server in the session", func() (bool, string) {
		o, err := ag.CLI("tree", "--session", "gen-test")
		return err == nil && strings.Contains(o, strconv.Itoa(first)), o
	})
	out, err := ag.CLI("mark", "destroy", "--session", "gen-test")
	if err != nil || !strings.Contains(out, "generation 1 ended") || !strings.Contains(out, "keeps running as generation 2") {
		t.Fatalf("mark destroy: %v:\n%s", err, out)
	}
	// Killed: gone from /proc or a zombie its host has not reaped yet.
	eventually(t, "the first server killed", func() (bool, string) {
		_, err := procfs.Read("/proc", uint32(first))
		return err != nil, ""
	})
	io.WriteString(stdin, "next\n")
	second := readPID()
	eventually(t, "tree --session with generations and the marker's result", func() (bool, string) {
		o, err := ag.CLI("tree", "--session", "gen-test")
		out = o
		return err == nil && strings.Contains(o, strconv.Itoa(second)) && strings.Contains(o, "gen 2") &&
			strings.Contains(o, "ended generation 1: killed 1") && strings.Contains(o, "active in generation 2"), o
	})
	t.Logf("\n%s", out)
	// The shell's `sleep &` runs on /dev/null (an asynchronous command's
	// stdin): a command the host ran for itself, a tool, not a server.
	for _, want := range []string{"host root " + strconv.Itoa(host.Process.Pid), "tool gen 1 " + strconv.Itoa(first),
		"tool gen 2 " + strconv.Itoa(second), "[killed by mcptrace SIGTERM"} {
		if !strings.Contains(out, want) {
			t.Errorf("tree --session lacks %q", want)
		}
	}
	if syscall.Kill(host.Process.Pid, 0) != nil {
		t.Error("the host died of a marker for its own session")
	}
	out, _ = ag.CLI("sessions")
	t.Logf("\n%s", out)
	if !strings.Contains(out, "GEN") || !regexp.MustCompile(`gen-test\s+active\s+2\s`).MatchString(out) {
		t.Errorf("sessions does not show gen-test active in generation 2:\n%s", out)
	}
}

// uninstall refuses while an agent serves, then detaches what a stopped
// agent left attached and forgets its state.
func TestUninstallRemovesWhatAStoppedAgentLeft(t *testing.T) {
	bin := build(t)
	ag := agenttest.StartProcess(t)
	args := []string{"uninstall", "--api.socket", ag.Socket, "--bpf.pin-dir", ag.PinDir, "--state.dir", ag.StateDir, "--history.dir", ag.HistoryDir}
	if out, errOut, err := run(t, bin, args...); err == nil || !strings.Contains(errOut, "stop it first") {
		t.Fatalf("uninstall while the agent serves: %v %s %s", err, out, errOut)
	}
	ag.Stop(syscall.SIGTERM)
	sets, _ := filepath.Glob(filepath.Join(ag.PinDir, "set-*", "link_*"))
	// Six programs, and the container request reader where a container
	// engine runs (it is attached only then).
	want := 6
	if fi, err := os.Stat(containers.DefaultEngineSocket); err == nil && fi.Mode()&os.ModeSocket != 0 {
		want = 7
	}
	if len(sets) != want {
		t.Fatalf("a stopped agent left %d pinned links, want its %d programs attached: %v", len(sets), want, sets)
	}
	out, errOut, err := run(t, bin, args...)
	if err != nil {
		t.Fatalf("uninstall: %v: %s", err, errOut)
	}
	t.Logf("%s", out)
	if left, _ := filepath.Glob(filepath.Join(ag.PinDir, "set-*")); len(left) != 0 {
		t.Errorf("pins left after uninstall: %v", left)
	}
	if _, err := os.Stat(ag.StateDir); !os.IsNotExist(err) {
		t.Errorf("state left after uninstall: %v", err)
	}
	// The history is the record of what happened: kept, and said where.
	if _, err := os.Stat(filepath.Join(ag.HistoryDir, "history.db")); err != nil || !strings.Contains(out, "kept the history "+ag.HistoryDir) {
		t.Errorf("uninstall and the history: %v\n%s", err, out)
	}
}
