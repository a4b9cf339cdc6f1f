package e2e_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mcptrace/mcptrace/api"
	"github.com/mcptrace/mcptrace/enforcer"
	"github.com/mcptrace/mcptrace/internal/agenttest"
	"github.com/mcptrace/mcptrace/internal/dockertest"
	"github.com/mcptrace/mcptrace/internal/testenv"
	"github.com/mcptrace/mcptrace/procfs"
	"github.com/mcptrace/mcptrace/roles"
)

// Containers started through a session, against Debian's dockerd (a
// private engine per test binary, internal/dockertest) and the real agent.

// containerWait bounds waiting for containers to start or for the agent to
// attribute them: vfs storage makes a start take a second or two here.
const containerWait = 60 * time.Second

// stopBound bounds a session's end to its containers being gone: the
// grace period (the containers' sleep ignores SIGTERM as PID 1, so the
// engine waits all of it) plus 10 s for the engine, four stops at once
// and the test's own docker inspect polls. The target is grace
// plus 2 s, and the tests log each time against it; as a bound it failed
// at 4.3 s on a loaded machine (the engine and the polling docker CLI
// were what was slow), which says nothing about the agent: without it
// the container is never stopped at all (the control below).
const stopBound = enforcer.DefaultGrace + 10*time.Second

// stopControl stops container id, of no session, with `docker stop -t
// GRACE` in the background and sends how long after since it was
// stopped: the engine's own pace while a session's containers stop
// beside it (an engine flooded, or stopping 200 at once), which
// paceBound turns into the bound of the session's. limit bounds the
// docker stop.
func stopControl(t *testing.T, eng *dockertest.Engine, id string, since time.Time, limit time.Duration) <-chan time.Duration {
	took := make(chan time.Duration, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), limit)
		defer cancel()
		stop := eng.Docker("stop", "-t", strconv.Itoa(int(enforcer.DefaultGrace/time.Second)), id)
		cmd := exec.CommandContext(ctx, stop.Path, stop.Args[1:]...)
		cmd.Env = stop.Env
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("docker stop of the control container: %v: %s", err, out)
		}
		took <- time.Since(since)
	}()
	return took
}

// paceBound is the bound of a session's containers being stopped when
// the engine's control took control: what the agent answers for is the
// time beyond the engine's own (stopBound's 10 s over the grace), never
// less than stopBound.
func paceBound(control time.Duration) time.Duration {
	return max(stopBound, control+stopBound-enforcer.DefaultGrace)
}

// dockerCLI is Debian's docker client (docker.io): the one the engine
// matches, wherever PATH would find another.
const dockerCLI = "/usr/bin/docker"

// wrapper is an agent host's wrapper: `mcptrace run --session ID -- sh
// -c SCRIPT` (or just sh -c when id is ""), in a process group of its
// own, as OpenClaw starts its MCP servers; stdin stays open for docker
// run -i, stdout is kept.
type wrapper struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *testenv.LockedBuffer
}

func startWrapper(t *testing.T, ag *agenttest.Process, eng *dockertest.Engine, id, script string) *wrapper {
	t.Helper()
	return startWrapperAs(t, ag, eng, id, script, nil)
}

// startWrapperAs is startWrapper run with cred (nil: as the test); the
// docker CLI's configuration is then a directory of cred's uid.
func startWrapperAs(t *testing.T, ag *agenttest.Process, eng *dockertest.Engine, id, script string, cred *syscall.Credential) *wrapper {
	t.Helper()
	args := []string{"sh", "-c", script}
	if id != "" {
		args = append([]string{ag.Bin, "run", "--session", id, "--api.socket", ag.Socket, "--"}, args...)
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = append(os.Environ(), "DOCKER_HOST="+eng.Host, "IMAGE="+eng.Image, "DOCKER="+dockerCLI)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: cred}
	if cred != nil {
		home := t.TempDir()
		if err := errors.Join(os.Chmod(filepath.Dir(home), 0o755), os.Chown(home, int(cred.Uid), int(cred.Gid))); err != nil {
			t.Fatal(err)
		}
		cmd.Env = append(cmd.Env, "HOME="+home, "DOCKER_CONFIG="+home)
		cmd.Dir = home
	}
	w := &wrapper{cmd: cmd, out: &testenv.LockedBuffer{}}
	cmd.Stdout, cmd.Stderr = w.out, w.out
	var err error
	if w.stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.kill(syscall.SIGKILL) })
	return w
}

// kill signals the wrapper's process group, as OpenClaw ends its servers.
func (w *wrapper) kill(sig syscall.Signal) {
	if w.cmd.Process == nil {
		return
	}
	syscall.Kill(-w.cmd.Process.Pid, sig)
	if sig == syscall.SIGKILL {
		w.stdin.Close()
		w.cmd.Wait()
	}
}

// hostname waits for the first line the wrapper printed: the container's
// hostname, which docker makes its short ID. It is the test's own
// evidence of which container a client started.
func (w *wrapper) hostname(t *testing.T) string {
	t.Helper()
	var line string
	waitFor(t, containerWait, "the container's hostname on the client's output", func() (bool, string) {
		out := w.out.String()
		if i := strings.IndexByte(out, '\n'); i == 12 {
			line = out[:12]
			return true, ""
		}
		return false, fmt.Sprintf("output %q", out)
	})
	return line
}

// waitFor polls cond every 50 ms until it holds or bound passes; on a
// time-out, explain (if given) adds what the agent says.
func waitFor(t *testing.T, bound time.Duration, what string, cond func() (bool, string), explain ...func() string) {
	t.Helper()
	deadline := time.Now().Add(bound)
	for {
		ok, detail := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			for _, e := range explain {
				detail += "\n" + e()
			}
			t.Fatalf("timed out after %s waiting for %s: %s", bound, what, detail)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// attributed waits until the agent attributes n containers to session id
// and returns them.
func attributed(t *testing.T, ag *agenttest.Process, id string, n int) []api.Container {
	t.Helper()
	var cs []api.Container
	waitFor(t, containerWait, fmt.Sprintf("%d attributed containers in session %s", n, id), func() (bool, string) {
		d, err := ag.Client().Session(context.Background(), id, nil)
		if err != nil {
			return false, err.Error()
		}
		cs = nil
		for _, c := range d.Containers {
			if c.Attribution == "attributed" && c.Running {
				cs = append(cs, c)
			}
		}
		return len(cs) == n, fmt.Sprintf("%+v", d.Containers)
	})
	return cs
}

// gone waits until container id no longer runs and returns how long
// that took from since.
func gone(t *testing.T, eng *dockertest.Engine, id string, since time.Time, bound time.Duration) time.Duration {
	t.Helper()
	waitFor(t, bound, "container "+id[:12]+" to be gone", func() (bool, string) { return !eng.Running(t, id), "still running" })
	return time.Since(since)
}

// containerAgent is a test agent that attributes the engine's containers,
// started with flags besides.
func containerAgent(t *testing.T, flags ...string) (*agenttest.Process, *dockertest.Engine) {
	t.Helper()
	eng := dockertest.Start(t)
	if _, err := os.Stat(dockerCLI); err != nil {
		testenv.Missing(t, "Debian's docker client "+dockerCLI, "package docker.io; make setup-test installs it")
	}
	ag := agenttest.StartProcess(t, append([]string{"--containers.engine-socket", eng.Socket, "--metrics.sample-interval", "200ms"}, flags...)...)
	waitFor(t, containerWait, "container attribution to be on", func() (bool, string) {
		st, err := ag.Client().Status(context.Background())
		if err != nil {
			return false, err.Error()
		}
		return st.Containers.Attribution == "on", fmt.Sprintf("%+v", st.Containers)
	})
	return ag, eng
}

// The seed's case (OpenClaw): four sessions at once, each a sh -c wrapper
// running `docker run -i --rm IMAGE sleep 600`; the wrappers are killed
// with SIGTERM to their process group. A fifth wrapper, in no session,
// proves that killing the client leaves the container running.
func TestContainersOfEndedSessionsAreStoppedAndTheClientAloneStopsNothing(t *testing.T) {
	ag, eng := containerAgent(t)
	const script = `"$DOCKER" run -i --rm --network none "$IMAGE" sh -c 'hostname; exec sleep 600'`
	var ws []*wrapper
	for i := range 4 {
		ws = append(ws, startWrapper(t, ag, eng, fmt.Sprintf("seed%d", i), script))
	}
	control := startWrapper(t, ag, eng, "", script)
	ids := map[int]string{}
	for i, w := range ws {
		short := w.hostname(t)
		cs := attributed(t, ag, fmt.Sprintf("seed%d", i), 1)
		if !strings.HasPrefix(cs[0].ID, short) {
			t.Fatalf("session seed%d: the agent attributes %s, its client started %s", i, cs[0].ID[:12], short)
		}
		ids[i] = cs[0].ID
	}
	controlID := fullID(t, eng, control.hostname(t))

	// The tree shows each container below its client, and metrics count
	// their processes as members, the image as their server.
	out, err := ag.CLI("tree", "--session", "seed0", "--width", "200")
	if err != nil {
		t.Fatal(err, out)
	}
	client := regexp.MustCompile(`(?m)^.*docker run -i --rm.*\n\s*└─ container ` + ids[0][:12] + ` ` + regexp.QuoteMeta(eng.Image) + ` gen 1 .*sleep 600`)
	if !client.MatchString(out) || !strings.Contains(out, "container "+ids[0][:12]+" "+eng.Image+" started by pid") {
		t.Errorf("tree --session seed0 does not show docker run → container %s (%s) → sleep:\n%s", ids[0][:12], eng.Image, out)
	}
	t.Logf("mcptrace tree --session seed0 while it runs:\n%s", out)
	waitFor(t, 10*time.Second, "metrics to count the containers' processes", func() (bool, string) {
		body := scrape(t, strings.TrimSuffix(strings.TrimPrefix(ag.MetricsURL(), "http://"), "/metrics"))
		members := sampleSum(body, "mcptrace_session_members", `role="container"`)
		rss := sampleSum(body, "mcptrace_server_resident_memory_bytes", `server="`+roles.ImageName(eng.Image)+`"`)
		claimed, _ := sample(body, `mcptrace_container_claims_total{result="claimed"}`)
		on, _ := sample(body, "mcptrace_container_attribution")
		attributed, _ := sample(body, `mcptrace_containers{attribution="attributed"}`)
		return members >= 4 && rss > 0 && claimed >= 4 && on == 1 && attributed >= 4,
			fmt.Sprintf("container members %v, resident bytes of %s %v, claimed %v, attribution %v, attributed %v", members, eng.Image, rss, claimed, on, attributed)
	})

	start := time.Now()
	for _, w := range append(slices.Clone(ws), control) {
		w.kill(syscall.SIGTERM)
	}
	for i := range ws {
		took := gone(t, eng, ids[i], start, 30*time.Second)
		if took > stopBound {
			t.Errorf("container of session seed%d gone after %s, want within %s", i, took.Round(time.Millisecond), stopBound)
		}
		t.Logf("container of session seed%d gone %s after its wrapper was killed (target: the grace plus 2 s, %s)", i, took.Round(time.Millisecond), enforcer.DefaultGrace+2*time.Second)
	}
	// Without mcptrace the container stays: the control's client died
	// too, its container runs on.
	time.Sleep(time.Second)
	if !eng.Running(t, controlID) {
		t.Fatalf("the control container (no session) stopped when its client was killed: this test would prove nothing")
	}
	eng.Output(t, "rm", "-f", controlID)

	out, err = ag.CLI("tree", "--session", "seed0")
	if err != nil {
		t.Fatal(err, out)
	}
	if !strings.Contains(out, "container "+ids[0][:12]+" "+eng.Image+": killed by mcptrace engine stop") {
		t.Errorf("tree --session seed0 does not show its container ended:\n%s", out)
	}
	t.Logf("mcptrace tree --session seed0 once it ended:\n%s", out)
}

// fullID finds the full ID of the container whose short ID is short.
func fullID(t *testing.T, eng *dockertest.Engine, short string) string {
	t.Helper()
	for _, id := range eng.Containers(t) {
		if strings.HasPrefix(id, short) {
			return id
		}
	}
	t.Fatalf("no container %s", short)
	return ""
}

// Two sessions run the same docker run at the same moment: ending one
// removes exactly its container (the one its own client reported) and
// leaves the other's running.
func TestIdenticalRunsInTwoSessionsAreNeverConfused(t *testing.T) {
	ag, eng := containerAgent(t)
	const script = `"$DOCKER" run -i --rm --network none "$IMAGE" sh -c 'hostname; exec sleep 600'`
	a := startWrapper(t, ag, eng, "twin-a", script)
	b := startWrapper(t, ag, eng, "twin-b", script)
	shortA, shortB := a.hostname(t), b.hostname(t)
	ca, cb := attributed(t, ag, "twin-a", 1)[0], attributed(t, ag, "twin-b", 1)[0]
	if !strings.HasPrefix(ca.ID, shortA) || !strings.HasPrefix(cb.ID, shortB) {
		t.Fatalf("attributed a=%s b=%s; their clients started a=%s b=%s", ca.ID[:12], cb.ID[:12], shortA, shortB)
	}
	start := time.Now()
	a.kill(syscall.SIGTERM)
	took := gone(t, eng, ca.ID, start, 30*time.Second)
	if took > stopBound {
		t.Errorf("container of twin-a gone after %s, want within %s", took, stopBound)
	}
	time.Sleep(time.Second)
	if !eng.Running(t, cb.ID) {
		t.Fatalf("ending twin-a stopped twin-b's container %s", cb.ID[:12])
	}
	b.kill(syscall.SIGTERM)
	gone(t, eng, cb.ID, time.Now(), 30*time.Second)
}

// docker run -d, and docker create then docker start: the clients exit at
// once; the container is still the session's and ends with it.
func TestDetachedContainerEndsWithItsSession(t *testing.T) {
	ag, eng := containerAgent(t)
	for _, tc := range []struct{ name, script string }{
		{"docker run -d", `"$DOCKER" run -d --rm --network none "$IMAGE" sleep 600 && exec sleep 600`},
		{"docker create + docker start", `id=$("$DOCKER" create --rm --network none "$IMAGE" sleep 600) && "$DOCKER" start "$id" && exec sleep 600`},
		// Python's docker-compose sends with sendto(2), not write(2).
		{"docker-compose run -d", `cd "$COMPOSE_DIR" && docker-compose run -d --rm server >/dev/null && exec sleep 600`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if strings.HasPrefix(tc.name, "docker-compose") {
				if _, err := exec.LookPath("docker-compose"); err != nil {
					testenv.Missing(t, "docker-compose", "Debian package docker-compose; make setup-test installs it")
				}
				dir := t.TempDir()
				compose := "version: \"2.4\"\nservices:\n  server:\n    image: " + eng.Image + "\n    network_mode: none\n    command: sleep 600\n"
				if err := os.WriteFile(filepath.Join(dir, "docker-compose.yml"), []byte(compose), 0o644); err != nil {
					t.Fatal(err)
				}
				t.Setenv("COMPOSE_DIR", dir)
			}
			id := strings.ReplaceAll(strings.Fields(tc.name)[1], "-", "") + "-" + strconv.Itoa(len(tc.script))
			w := startWrapper(t, ag, eng, id, tc.script)
			c := attributed(t, ag, id, 1)[0]
			start := time.Now()
			w.kill(syscall.SIGTERM)
			if took := gone(t, eng, c.ID, start, 30*time.Second); took > stopBound {
				t.Errorf("container gone after %s, want within %s", took, stopBound)
			}
		})
	}
}

// A destroy marker ends the containers of the generation it ends and
// spares those the host starts after it; the session's end ends those.
func TestMarkerEndsTheOldGenerationsContainersAndSparesTheNewOnes(t *testing.T) {
	ag, eng := containerAgent(t)
	// The host: one server container, then a marker (its refresh), then
	// the next server container, then it waits.
	w := startWrapper(t, ag, eng, "gen", fmt.Sprintf(`"$DOCKER" run -d --rm --network none --label gen=1 "$IMAGE" sleep 600 >/dev/null &&
"%s" mark destroy --api.socket "%s" &&
"$DOCKER" run -d --rm --network none --label gen=2 "$IMAGE" sleep 600 >/dev/null && exec sleep 600`, ag.Bin, ag.Socket))
	var old, next string
	waitFor(t, containerWait, "both generations' containers", func() (bool, string) {
		old = strings.TrimSpace(eng.Output(t, "ps", "-q", "--no-trunc", "--filter", "label=gen=1"))
		next = strings.TrimSpace(eng.Output(t, "ps", "-q", "--no-trunc", "--filter", "label=gen=2"))
		return old == "" && next != "", fmt.Sprintf("generation 1 running: %q, generation 2 running: %q", old, next)
	}, func() string { out, _ := ag.CLI("tree", "--session", "gen", "--json"); return out })
	c := attributed(t, ag, "gen", 1)[0]
	if c.ID != next {
		t.Fatalf("the agent attributes %s, the running container of generation 2 is %s", c.ID[:12], next[:12])
	}
	d, err := ag.Client().Session(context.Background(), "gen", nil)
	if err != nil {
		t.Fatal(err)
	}
	var stopped int
	for _, k := range d.Kills {
		if k.Container != "" && k.Generation == 1 && k.Result == enforcer.ResultKilled {
			stopped++
		}
	}
	if stopped != 1 {
		t.Errorf("kill records of generation 1 containers: %+v, want one killed", d.Kills)
	}
	w.kill(syscall.SIGTERM)
	gone(t, eng, next, time.Now(), 30*time.Second)
}

// The agent restarted between docker run and the session's end still
// ends the container: the claim is in its saved state.
func TestAgentRestartedBetweenRunAndEndStillEndsTheContainer(t *testing.T) {
	ag, eng := containerAgent(t)
	w := startWrapper(t, ag, eng, "restart", `"$DOCKER" run -i --rm --network none "$IMAGE" sh -c 'hostname; exec sleep 600'`)
	short := w.hostname(t)
	c := attributed(t, ag, "restart", 1)[0]
	if !strings.HasPrefix(c.ID, short) {
		t.Fatalf("attributed %s, the client started %s", c.ID[:12], short)
	}
	ag.Stop(syscall.SIGKILL)
	ag.Start()
	attributed(t, ag, "restart", 1)
	start := time.Now()
	w.kill(syscall.SIGTERM)
	if took := gone(t, eng, c.ID, start, 30*time.Second); took > stopBound {
		t.Errorf("container gone after %s, want within %s", took, stopBound)
	}
}

// An engine that is not there: the agent runs, says once why
// attribution is off, and shows it in status.
func TestMissingEngineTurnsAttributionOffAndSaysWhyOnce(t *testing.T) {
	ag := agenttest.StartProcess(t, "--containers.engine-socket", "/nonexistent/docker.sock")
	var st api.ContainerStatus
	waitFor(t, 10*time.Second, "status to say attribution is off", func() (bool, string) {
		s, err := ag.Client().Status(context.Background())
		if err != nil {
			return false, err.Error()
		}
		st = s.Containers
		return st.Attribution == "off" && strings.Contains(st.Reason, "/nonexistent/docker.sock"), fmt.Sprintf("%+v", st)
	})
	body := scrape(t, strings.TrimSuffix(strings.TrimPrefix(ag.MetricsURL(), "http://"), "/metrics"))
	if v, ok := sample(body, "mcptrace_container_attribution"); !ok || v != 0 {
		t.Errorf("mcptrace_container_attribution = %v (present %v), want 0", v, ok)
	}
	time.Sleep(3 * time.Second) // three more rounds of asking the engine
	if n := strings.Count(ag.Logs(), "container attribution is off"); n != 1 {
		t.Errorf("said %d times that attribution is off, want once:\n%s", n, ag.Logs())
	}
}

// An engine that does not answer (dockerd stopped with SIGSTOP): the
// container's processes are killed through its cgroup.
func TestUnresponsiveEngineFallsBackToTheContainersCgroup(t *testing.T) {
	ag, eng := containerAgent(t)
	w := startWrapper(t, ag, eng, "cgroup", `"$DOCKER" run -d --rm --network none "$IMAGE" sleep 600 && exec sleep 600`)
	c := attributed(t, ag, "cgroup", 1)[0]
	if c.Init.IsZero() {
		t.Fatalf("no first process known for %s", c.ID[:12])
	}
	b, err := os.ReadFile(filepath.Join(eng.Dir, "dockerd.pid"))
	if err != nil {
		t.Fatal(err)
	}
	dockerd, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	syscall.Kill(dockerd, syscall.SIGSTOP)
	resumed := false
	resume := func() {
		if !resumed {
			syscall.Kill(dockerd, syscall.SIGCONT)
			resumed = true
		}
	}
	defer resume()
	start := time.Now()
	w.kill(syscall.SIGTERM)
	waitFor(t, 30*time.Second, "the container's first process to die", func() (bool, string) {
		_, err := procfs.Read("/proc", c.Init.PID)
		return err != nil, "pid alive"
	})
	t.Logf("container's processes killed %s after the session ended, the engine stopped", time.Since(start).Round(time.Millisecond))
	resume()
	waitFor(t, containerWait, "the cgroup kill's record", func() (bool, string) {
		d, err := ag.Client().Session(context.Background(), "cgroup", nil)
		if err != nil {
			return false, err.Error()
		}
		for _, k := range d.Kills {
			if k.Container == c.ID {
				return k.Signal == enforcer.SignalCgroupKill && k.Result == enforcer.ResultKilled, fmt.Sprintf("%+v", k)
			}
		}
		return false, fmt.Sprintf("no record in %+v", d.Kills)
	})
	gone(t, eng, c.ID, time.Now(), containerWait)
}

// sampleSum adds the values of metric's samples whose labels contain
// label.
func sampleSum(body, metric, label string) float64 {
	var sum float64
	for line := range strings.Lines(body) {
		if !strings.HasPrefix(line, metric+"{") || !strings.Contains(line, label) {
			continue
		}
		f := strings.Fields(line)
		if v, err := strconv.ParseFloat(f[len(f)-1], 64); err == nil {
			sum += v
		}
	}
	return sum
}

// A member that sends a start for a container already running (the
// engine answers 304 and does nothing) did not start it: the container is
// shown unattributed and the session's end leaves it running.
func TestAStartForARunningContainerDoesNotMakeItTheSessions(t *testing.T) {
	ag, eng := containerAgent(t)
	id := eng.RunContainer(t, "--rm", eng.Image, "sleep", "600")
	time.Sleep(50 * time.Millisecond) // its first process starts before the session's request, by a tick at least
	t.Setenv("VICTIM", id)
	w := startWrapper(t, ag, eng, "borrow", `"$DOCKER" start "$VICTIM" >/dev/null && exec sleep 600`)
	waitFor(t, containerWait, "the agent to find the claim unattributed", func() (bool, string) {
		d, err := ag.Client().Session(context.Background(), "borrow", nil)
		if err != nil {
			return false, err.Error()
		}
		for _, c := range d.Containers {
			if c.ID == id {
				return strings.HasPrefix(c.Attribution, "unattributed: its first process"), c.Attribution
			}
		}
		return false, fmt.Sprintf("%+v", d.Containers)
	})
	w.kill(syscall.SIGTERM)
	waitFor(t, 10*time.Second, "the session's ending to be recorded", func() (bool, string) {
		d, err := ag.Client().Session(context.Background(), "borrow", nil)
		if err != nil {
			return false, err.Error()
		}
		for _, k := range d.Kills {
			if k.Container == id {
				return strings.HasPrefix(k.Result, enforcer.ResultRefused+": unattributed"), k.Result
			}
		}
		return false, fmt.Sprintf("%+v", d.Kills)
	})
	time.Sleep(stopBound)
	if !eng.Running(t, id) {
		t.Fatalf("the session's end stopped a container it did not start")
	}
}

// An engine slower than the agent's 10 s window (a runtime whose create
// waits 11 s: dockertest.SlowRuntime, as a runtime booting a VM or an
// engine under two hundred docker runs does) still gets a session's
// docker run attributed: the container is new, created after its client
// began, its client waits, and no other start of it is known
// (agent.lateStart). The same lateness without that proof is refused:
// a container that ran before (started and stopped outside any session),
// and one a start from no session waited on beside the session's.
// Neither is stopped when its session ends; the attributed one is.
func TestALateStartCountsOnlyWhenNothingElseCanHaveStartedTheContainer(t *testing.T) {
	// ranBefore's first run, outside any session, while the agent starts
	// and beside the sessions' slow starts of the others.
	eng := dockertest.Start(t)
	ranBefore := eng.Output(t, "create", "-i", "--network", "none", "--runtime", dockertest.SlowRuntime, eng.Image, "sleep", "600")
	t.Cleanup(func() { eng.Docker("rm", "--force", ranBefore).Run() })
	first := eng.Docker("start", ranBefore)
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	ag, _ := containerAgent(t)
	slowRun := `"$DOCKER" run -i --rm --network none --runtime ` + dockertest.SlowRuntime
	began := time.Now()
	late := startWrapper(t, ag, eng, "late", slowRun+` "$IMAGE" sh -c 'hostname; exec sleep 600'`)
	const name = "mcptrace-late-contested"
	shared := startWrapper(t, ag, eng, "contested", slowRun+` --name `+name+` "$IMAGE" sleep 600`)
	var contested string
	waitFor(t, containerWait, "the contested container to be created", func() (bool, string) {
		contested = eng.Output(t, "ps", "--all", "--quiet", "--no-trunc", "--filter", "name=^"+name+"$")
		return contested != "", "not yet"
	})
	t.Cleanup(func() { eng.Docker("rm", "--force", contested).Run() })
	other := eng.Docker("start", contested) // from no session, while the session's start waits
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { other.Process.Kill(); other.Wait() })
	if err := first.Wait(); err != nil {
		t.Fatalf("docker start %s: %v", ranBefore[:12], err)
	}
	if err := eng.Docker("stop", "-t", "0", ranBefore).Run(); err != nil {
		t.Fatal(err)
	}
	t.Setenv("X", ranBefore)
	again := startWrapper(t, ag, eng, "again", `exec "$DOCKER" start -ai "$X"`)

	id := fullID(t, eng, late.hostname(t))
	t.Logf("the late docker run's container %s began %s after its client", id[:12], time.Since(began).Round(time.Millisecond))
	if cs := attributed(t, ag, "late", 1); cs[0].ID != id {
		t.Fatalf("session late: the agent attributes %s, its client started %s", cs[0].ID[:12], id[:12])
	}
	const why = "unattributed: its first process"
	for _, c := range []struct{ session, id, reason string }{
		{"again", ranBefore, "it ran before"},
		{"contested", contested, "a start of it from no session is known"},
	} {
		got := containerIn(t, ag, c.session, 0, c.id, why).Attribution
		if !strings.Contains(got, "more than 10s, and "+c.reason) {
			t.Errorf("session %s: container %s %q, want the reason %q", c.session, c.id[:12], got, c.reason)
		}
	}

	ended := time.Now()
	for _, w := range []*wrapper{late, shared, again} {
		w.kill(syscall.SIGKILL)
	}
	t.Logf("the attributed container gone %s after its session's end", gone(t, eng, id, ended, stopBound).Round(time.Millisecond))
	for _, c := range []struct{ session, id string }{{"again", ranBefore}, {"contested", contested}} {
		if r := containerRecord(t, ag, c.session, 0, c.id); !strings.HasPrefix(r, enforcer.ResultRefused+": "+why) {
			t.Errorf("session %s: container %s recorded %q", c.session, c.id[:12], r)
		}
	}
	// The records say the ending refused them; a stop would have ended
	// them within the grace and a moment.
	time.Sleep(enforcer.DefaultGrace + 2*time.Second - time.Since(ended))
	for _, c := range []string{ranBefore, contested} {
		if !eng.Running(t, c) {
			t.Errorf("container %s stopped: its session's late start was not proven to have started it", c[:12])
		}
	}
}

// sessionOf returns session id of owner as the agent tells root.
func sessionOf(ag *agenttest.Process, id string, owner uint32) (api.SessionDetail, error) {
	return ag.Client().Session(context.Background(), id, &owner)
}

// containerIn waits until session id of owner shows container ref (its
// full ID, or its name) with an attribution starting with want, and
// returns it.
func containerIn(t *testing.T, ag *agenttest.Process, id string, owner uint32, ref, want string) api.Container {
	t.Helper()
	var found api.Container
	waitFor(t, containerWait, fmt.Sprintf("session %s to show container %s %q", id, ref, want), func() (bool, string) {
		d, err := sessionOf(ag, id, owner)
		if err != nil {
			return false, err.Error()
		}
		for _, c := range d.Containers {
			if c.ID == ref || c.Name == ref {
				found = c
				return strings.HasPrefix(c.Attribution, want), c.Attribution
			}
		}
		return false, fmt.Sprintf("%+v", d.Containers)
	})
	return found
}

// containerRecord waits for the kill record of container id in session
// of owner and returns its result.
func containerRecord(t *testing.T, ag *agenttest.Process, session string, owner uint32, id string) string {
	t.Helper()
	var result string
	waitFor(t, containerWait, "the record of container "+id[:12]+" in session "+session, func() (bool, string) {
		d, err := sessionOf(ag, session, owner)
		if err != nil {
			return false, err.Error()
		}
		for _, k := range d.Kills {
			if k.Container == id {
				result = k.Result
				return true, ""
			}
		}
		return false, fmt.Sprintf("%+v", d.Kills)
	})
	return result
}

// engineSocketFor makes the engine's socket usable by group gid alone
// (root's, mode 0660) and its directory searchable, as a docker group
// does on a node.
func engineSocketFor(t *testing.T, eng *dockertest.Engine, gid int) {
	t.Helper()
	if err := errors.Join(os.Chmod(eng.Dir, 0o711), os.Chown(eng.Socket, 0, gid), os.Chmod(eng.Socket, 0o660)); err != nil {
		t.Fatal(err)
	}
}

// setuidDocker is a copy of Debian's docker client that runs as root for
// anyone (set-user-ID root), as the review of issue 30 ran one: its
// requests are sent with the real uid of whoever runs it.
func setuidDocker(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("/var/tmp", "mcptrace-suid-") // /tmp may be nosuid; /var/tmp is not here
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	data, err := os.ReadFile(dockerCLI)
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "docker")
	if err := errors.Join(os.Chmod(dir, 0o755), os.WriteFile(bin, data, 0o755), os.Chown(bin, 0, 0), os.Chmod(bin, os.ModeSetuid|0o755)); err != nil {
		t.Fatal(err)
	}
	return bin
}

// The review's case (issue 30): a session of uid 65534 starts container
// svc through a set-user-ID root docker client; its end spares svc (uid
// 65534 may not use the engine: privilege boundary) while that start
// stays the one that started it. Root's CI session then runs `docker
// start svc` (by name) on the running container: the engine starts
// nothing (304). That start is judged for itself and counts for nothing,
// and the earlier start's verdict is not carried over to it: root's
// session's end leaves svc running. The same run with the verdict
// carried over (the code before this test) stopped svc.
func TestASecondSessionsStartOfARunningContainerDoesNotMakeItThatSessions(t *testing.T) {
	ag, eng := containerAgent(t)
	engineSocketFor(t, eng, 0) // root's alone: uid 65534 may not use it
	t.Setenv("SUID_DOCKER", setuidDocker(t))
	name := fmt.Sprintf("svc-%d", time.Now().UnixNano())
	t.Setenv("NAME", name)
	a := startWrapperAs(t, ag, eng, "user-a", `"$SUID_DOCKER" run -d --name "$NAME" --network none "$IMAGE" sleep 600 >/dev/null && exec sleep 600`,
		&syscall.Credential{Uid: nobody, Gid: nobody})
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("user-a's wrapper said: %s", a.out.String())
		}
	})
	c := containerIn(t, ag, "user-a", nobody, name, "attributed")
	t.Cleanup(func() { eng.Docker("rm", "--force", c.ID).Run() })
	a.kill(syscall.SIGTERM)
	if r := containerRecord(t, ag, "user-a", nobody, c.ID); !strings.HasPrefix(r, enforcer.ResultSparedPrivilege) {
		t.Fatalf("user-a's end: %q, want %s (this test needs svc to outlive it)", r, enforcer.ResultSparedPrivilege)
	}
	if !eng.Running(t, c.ID) {
		t.Fatal("svc stopped with user-a's session")
	}

	ci := startWrapper(t, ag, eng, "ci", `"$DOCKER" start "$NAME" >/dev/null && exec sleep 600`)
	got := containerIn(t, ag, "ci", 0, c.ID, "unattributed: its first process")
	t.Logf("root's CI session shows svc: %s", got.Attribution)
	ci.kill(syscall.SIGTERM)
	if r := containerRecord(t, ag, "ci", 0, c.ID); !strings.HasPrefix(r, enforcer.ResultRefused+": unattributed") {
		t.Errorf("root's CI session's end: %q, want refused: unattributed", r)
	}
	time.Sleep(stopBound)
	if !eng.Running(t, c.ID) {
		t.Fatal("root's CI session's end stopped svc, which its start did not start")
	}
}

// docker start NAME: the start names the container by name; the agent
// resolves the name through the engine when it judges the start, once.
// The session's container ends with it; a container given that name
// afterwards does not.
func TestAStartByNameIsAttributedAndResolvedOnce(t *testing.T) {
	ag, eng := containerAgent(t)
	name := fmt.Sprintf("byname-%d", time.Now().UnixNano())
	t.Setenv("NAME", name)
	w := startWrapper(t, ag, eng, "byname", `"$DOCKER" create --name "$NAME" --network none "$IMAGE" sleep 600 >/dev/null && "$DOCKER" start "$NAME" >/dev/null && exec sleep 600`)
	c := containerIn(t, ag, "byname", 0, name, "attributed")
	if len(c.ID) != 64 || !eng.Running(t, c.ID) {
		t.Fatalf("attributed %+v, want the running container named %s", c, name)
	}
	t.Cleanup(func() { eng.Docker("rm", "--force", c.ID).Run() })
	// The name moves to another container, which runs too.
	eng.Output(t, "rename", name, name+"-old")
	other := eng.RunContainer(t, "--name", name, eng.Image, "sleep", "600")
	start := time.Now()
	w.kill(syscall.SIGTERM)
	if took := gone(t, eng, c.ID, start, 30*time.Second); took > stopBound {
		t.Errorf("the session's container gone after %s, want within %s", took, stopBound)
	}
	time.Sleep(time.Second)
	if !eng.Running(t, other) {
		t.Error("the container that took the name afterwards was stopped")
	}
}

// A user who may use the engine only through a group the kernel gave
// their processes (setgroups at exec, as LDAP or SSSD membership is:
// gid 4242 is in no /etc/group here) has their session's container
// stopped with the session, not spared as across a privilege boundary.
func TestAnEngineGroupFromTheKernelLetsItsMemberEndTheirContainers(t *testing.T) {
	ag, eng := containerAgent(t)
	const group = 4242
	if g, err := user.LookupGroupId(strconv.Itoa(group)); err == nil {
		t.Fatalf("gid %d is group %s in the group database: this test needs one that is not", group, g.Name)
	}
	engineSocketFor(t, eng, group)
	t.Cleanup(func() { engineSocketFor(t, eng, 0) })
	w := startWrapperAs(t, ag, eng, "grouped", `"$DOCKER" run -d --rm --network none "$IMAGE" sleep 600 >/dev/null && exec sleep 600`,
		&syscall.Credential{Uid: nobody, Gid: nobody, Groups: []uint32{group}})
	var id string
	waitFor(t, containerWait, "the session's container attributed", func() (bool, string) {
		d, err := sessionOf(ag, "grouped", nobody)
		if err != nil {
			return false, err.Error()
		}
		for _, c := range d.Containers {
			if c.Attribution == "attributed" && c.Running {
				id = c.ID
				return true, ""
			}
		}
		return false, fmt.Sprintf("%+v", d.Containers)
	})
	start := time.Now()
	w.kill(syscall.SIGTERM)
	if r := containerRecord(t, ag, "grouped", nobody, id); r != enforcer.ResultKilled {
		t.Errorf("the session's end: %q, want %s", r, enforcer.ResultKilled)
	}
	if took := gone(t, eng, id, start, 30*time.Second); took > stopBound {
		t.Errorf("container gone after %s, want within %s", took, stopBound)
	}
}
