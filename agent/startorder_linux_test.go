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

// kernelCensus is what a start may have left in the kernel: the pins
// under a pin directory, and the BPF links, programs and maps this
// process holds (by id, from /proc/self/fdinfo). An agent run in this
// process attaches nothing that is neither pinned nor held by it: a
// link detaches once both are gone.
type kernelCensus struct {
	pins []string
	held []string // "link_id 12", "prog_id 40", "map_id 7"
}

func censusOf(t *testing.T, pinDir string) kernelCensus {
	t.Helper()
	var c kernelCensus
	filepath.WalkDir(pinDir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			c.pins = append(c.pins, path)
		}
		return nil
	})
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		target, err := os.Readlink("/proc/self/fd/" + e.Name())
		if err != nil || !strings.HasPrefix(target, "anon_inode:bpf-") {
			continue
		}
		info, err := os.ReadFile("/proc/self/fdinfo/" + e.Name())
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(info), "\n") {
			k, v, _ := strings.Cut(line, ":")
			if k == "link_id" || k == "prog_id" || k == "map_id" {
				c.held = append(c.held, k+" "+strings.TrimSpace(v))
			}
		}
	}
	slices.Sort(c.pins)
	slices.Sort(c.held)
	return c
}

// A second agent started on a socket another agent serves stops at once,
// having changed nothing: no program attached or held, nothing pinned
// (in the running agent's pin directory it shares), no state or history
// directory created.
func TestAStartOnASocketAnotherAgentServesChangesNothing(t *testing.T) {
	first := startAgent(t, agent.Options{})
	if _, err := first.client.Status(context.Background()); err != nil {
		t.Fatal(err)
	}
	opts := agent.OptionsOf(first.Agent)
	dir := t.TempDir()
	second := opts
	second.StateDir, second.HistoryDir = filepath.Join(dir, "state"), filepath.Join(dir, "history")
	second.Logger = testenv.Logger(t, 0)
	second.MetricsAddress = ""

	time.Sleep(200 * time.Millisecond) // let the first agent's start-up fds settle
	before := censusOf(t, opts.PinDir)
	b, err := agent.New(second)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testenv.Bound(10*time.Second))
	defer cancel()
	start := time.Now()
	err = b.Run(ctx)
	if !errors.Is(err, api.ErrServing) {
		t.Fatalf("second agent's start: %v; want %v", err, api.ErrServing)
	}
	took := time.Since(start)
	after := censusOf(t, opts.PinDir)
	if !slices.Equal(before.pins, after.pins) {
		t.Errorf("pins changed:\nbefore %v\nafter  %v", before.pins, after.pins)
	}
	if !slices.Equal(before.held, after.held) {
		t.Errorf("BPF objects this process holds changed:\nbefore %v\nafter  %v", before.held, after.held)
	}
	for _, d := range []string{second.StateDir, second.HistoryDir} {
		if _, err := os.Stat(d); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s: %v; want it never created", d, err)
		}
	}
	if _, err := first.client.Status(context.Background()); err != nil {
		t.Errorf("the first agent no longer answers: %v", err)
	}
	t.Logf("refused in %v: %d pins, %d BPF objects held, unchanged (%v)", took.Round(time.Millisecond), len(after.pins), len(after.held), err)
}
