package agent_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mcptrace/mcptrace/agent"
	"github.com/mcptrace/mcptrace/api"
	"github.com/mcptrace/mcptrace/enforcer"
	"github.com/mcptrace/mcptrace/internal/agenttest"
	"github.com/mcptrace/mcptrace/internal/testenv"
	"github.com/mcptrace/mcptrace/sessions"
)

// holdPortHelper listens on a loopback port and says which, then holds
// it until killed: another user taking the agent's metrics address.
func holdPortHelper() {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	fmt.Println(l.Addr().String())
	time.Sleep(time.Hour)
}

// holdPortAs starts holdPortHelper as uid and returns the address it
// holds, and the helper (killed when the test ends).
func holdPortAs(t *testing.T, uid uint32) (string, *exec.Cmd) {
	t.Helper()
	cmd := exec.Command(testenv.SelfForEveryone(t), "-test.run=^$")
	cmd.Env = testenv.HelperEnv("hold-port")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
	out, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start the port holder as uid %d: %v", uid, err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line, _ := bufio.NewReader(out).ReadString('\n')
	addr := strings.TrimSpace(line)
	if _, _, err := net.SplitHostPort(addr); err != nil {
		t.Fatalf("port holder: %q", line)
	}
	return addr, cmd
}

// Another user who holds the metrics port when the agent starts (a
// restart, an upgrade, a crash under Restart=always) keeps nothing from
// being enforced: the agent starts, says in status why it serves no
// metrics and how often it failed, ends a session's members, and serves
// /metrics once the port is free again.
func TestAStartWithTheMetricsPortTakenEnforcesAndServesItLater(t *testing.T) {
	addr, holder := holdPortAs(t, 65534)
	a := startAgent(t, agent.Options{
		Enforcer:       enforcer.Config{Mode: enforcer.ModeEnforce, Policy: enforcer.PolicyImmediate},
		MetricsAddress: addr,
		MetricsRetry:   200 * time.Millisecond,
	})
	st := a.Status()
	if st.Metrics.Address != "" || st.Metrics.ListenError == "" || st.Metrics.ListenFailures == 0 {
		t.Fatalf("status with the metrics port taken: %+v; want no address, the error and a failure count", st.Metrics)
	}
	h := startHost(t, "port-taken", `sleep 300 </dev/null & echo member $!; echo ready; read line`, "member")
	h.say(t, "exit")
	h.cmd.Wait()
	waitDead(t, h.procs["member"])
	waitFor(t, "the session's end enforced", func() (bool, string) {
		s, _ := a.Sessions().Find("port-taken")
		_, done := a.SessionReport("port-taken", 0)
		return s.State == sessions.Ended && done, fmt.Sprintf("%+v", s)
	})
	// Still refused while held: counted again at each attempt.
	waitFor(t, "another failed attempt counted", func() (bool, string) {
		m := a.Status().Metrics
		return m.ListenFailures >= 2, fmt.Sprintf("%+v", m)
	})
	holder.Process.Kill()
	holder.Wait()
	waitFor(t, "/metrics served once the port is free", func() (bool, string) {
		m := a.Status().Metrics
		if m.Address != addr || m.ListenError != "" {
			return false, fmt.Sprintf("%+v", m)
		}
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, resp.Status
	})
}

// heldBPF is the BPF links, programs and maps this process holds, by id
// (/proc/self/fdinfo): "link_id 12", "prog_id 40", "map_id 7". A link
// that is neither held nor pinned is detached.
func heldBPF() ([]string, error) {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return nil, err
	}
	var held []string
	for _, e := range ents {
		target, err := os.Readlink("/proc/self/fd/" + e.Name())
		if err != nil || !strings.HasPrefix(target, "anon_inode:bpf") {
			continue
		}
		info, err := os.ReadFile("/proc/self/fdinfo/" + e.Name())
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(info), "\n") {
			k, v, _ := strings.Cut(line, ":")
			if k == "link_id" || k == "prog_id" || k == "map_id" {
				held = append(held, k+" "+strings.TrimSpace(v))
			}
		}
	}
	slices.Sort(held)
	return held, nil
}

// pinsUnder is every file pinned under dir.
func pinsUnder(dir string) []string {
	var pins []string
	filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			pins = append(pins, path)
		}
		return nil
	})
	return pins
}

// secondAgentHelper runs an agent on the socket, pin, state and history
// directories MCPTRACE_TEST_SECOND names (tab-separated), then says what
// its Run returned and which BPF objects the process still holds: a
// second agent, in a process of its own so that nothing the first one
// does is counted as the second's.
func secondAgentHelper() {
	f := strings.Split(os.Getenv("MCPTRACE_TEST_SECOND"), "\t")
	a, err := agent.New(agent.Options{Socket: f[0], PinDir: f[1], StateDir: f[2], HistoryDir: f[3],
		Sessions: sessions.Config{WithinPID: uint32(os.Getppid())}})
	if err != nil {
		fmt.Println("new:", err)
		os.Exit(1)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = a.Run(ctx)
	held, herr := heldBPF()
	fmt.Printf("serving=%v\nheld=%s\nheld_err=%v\nerr=%v\n", errors.Is(err, api.ErrServing), strings.Join(held, ","), herr, err)
}

// A second agent started on a socket another agent serves stops at once,
// having changed nothing: it holds no program, link or map when its Run
// returns, pinned nothing and took nothing over, and created no state or
// history directory; the first goes on serving. Twice: sharing the
// first's pin directory (a second start of the same unit), and with a
// pin directory of its own (another configuration on the same socket),
// which the pin directory's lock does not stop.
func TestAStartOnASocketAnotherAgentServesChangesNothing(t *testing.T) {
	first := startAgent(t, agent.Options{})
	opts := agent.OptionsOf(first.Agent)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, shared := range []bool{true, false} {
		dir := t.TempDir()
		stateDir, historyDir := filepath.Join(dir, "state"), filepath.Join(dir, "history")
		pinDir := opts.PinDir
		if !shared {
			pinDir = agenttest.PinDir(t)
		}
		before := pinsUnder(pinDir)
		cmd := exec.Command(self, "-test.run=^$")
		cmd.Env = testenv.HelperEnv("second-agent", "MCPTRACE_TEST_SECOND="+strings.Join([]string{opts.Socket, pinDir, stateDir, historyDir}, "\t"))
		start := time.Now()
		out, err := cmd.Output()
		took := time.Since(start)
		if err != nil {
			t.Fatalf("second agent: %v\n%s", err, out)
		}
		said := map[string]string{}
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			k, v, _ := strings.Cut(line, "=")
			said[k] = v
		}
		if said["serving"] != "true" {
			t.Errorf("second agent's Run (pin directory shared: %v): %s; want %v", shared, said["err"], api.ErrServing)
		}
		if said["held"] != "" || said["held_err"] != "<nil>" {
			t.Errorf("second agent holds BPF objects after its Run: %q (%s)", said["held"], said["held_err"])
		}
		// The first agent may pin more in its own set meanwhile (its
		// container request reader, once it knows of an engine); a
		// second agent that attached would have made a set of its own,
		// or taken the first's over (removing its links).
		after := pinsUnder(pinDir)
		if sets := func(pins []string) []string {
			var sets []string
			for _, p := range pins {
				rel, _ := filepath.Rel(pinDir, p)
				set, _, _ := strings.Cut(rel, "/")
				sets = append(sets, set)
			}
			return slices.Compact(sets)
		}; !slices.Equal(sets(before), sets(after)) {
			t.Errorf("pinned sets changed (pin directory shared: %v): before %v, after %v", shared, sets(before), sets(after))
		}
		for _, p := range before {
			if !slices.Contains(after, p) {
				t.Errorf("%s is no longer pinned after the second agent's start", p)
			}
		}
		for _, d := range []string{stateDir, historyDir} {
			if _, err := os.Stat(d); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("%s: %v; want it never created", d, err)
			}
		}
		t.Logf("pin directory shared: %v: refused in %v (a process of its own), %d pins before and after; %s",
			shared, took.Round(time.Millisecond), len(before), said["err"])
	}
	if _, err := first.client.Status(context.Background()); err != nil {
		t.Errorf("the first agent no longer answers: %v", err)
	}
}
