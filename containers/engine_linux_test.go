package containers

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mcptrace/mcptrace/internal/dockertest"
)

// These tests run against a real dockerd of their own (internal/dockertest).

func TestMain(m *testing.M) { dockertest.Main(m) }

// engine returns a client of the test binary's dockerd.
func engine(t *testing.T) (*dockertest.Engine, *Engine) {
	t.Helper()
	d := dockertest.Start(t)
	return d, NewEngine(d.Socket)
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// sleeper starts a detached --rm container sleeping for ten minutes.
func sleeper(t *testing.T, d *dockertest.Engine, args ...string) string {
	t.Helper()
	return d.RunContainer(t, append(append([]string{"--rm"}, args...), d.Image, "sleep", "600")...)
}

// waitEnded polls until container id is not running (or gone), within
// bound, and returns how long that took.
func waitEnded(t *testing.T, e *Engine, id string, bound time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		c, err := e.Inspect(ctxFor(t, 5*time.Second), id)
		if errors.Is(err, ErrNotFound) || err == nil && !c.Running {
			return time.Since(start)
		}
		if err != nil {
			t.Fatal(err)
		}
		if time.Since(start) > bound {
			t.Fatalf("container %s still running %v later", short(id), bound)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestNegotiateWithDockerd(t *testing.T) {
	_, e := engine(t)
	v, err := e.Negotiate(ctxFor(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("engine %s, API %s (min %s), using %s", v.Engine, v.APIVersion, v.MinAPIVersion, v.Using)
	if v.Using != v.APIVersion && v.Using != MaxAPIVersion || v.Engine == "" || v.OS != "linux" {
		t.Errorf("version %+v", v)
	}
}

func TestInspectARunningContainer(t *testing.T) {
	d, e := engine(t)
	before := time.Now().Add(-time.Second)
	id := sleeper(t, d, "--label", "com.example.session=abc", "--name", "inspect-me")
	c, err := e.Inspect(ctxFor(t, 10*time.Second), id)
	if err != nil {
		t.Fatal(err)
	}
	if c.ID != id || c.Name != "inspect-me" || c.Image != dockertest.ImageTag || !strings.HasPrefix(c.ImageID, "sha256:") ||
		!c.Running || c.Labels["com.example.session"] != "abc" || c.LabelsDropped != 0 || c.AttachedStdin {
		t.Errorf("Inspect = %+v", c)
	}
	if c.Created.Before(before) || c.StartedAt.Before(c.Created) || time.Since(c.StartedAt) > time.Minute {
		t.Errorf("created %v, started %v", c.Created, c.StartedAt)
	}
	cmdline, err := os.ReadFile("/proc/" + strconv.Itoa(c.Pid) + "/cmdline")
	if err != nil || string(cmdline) != "sleep\x00600\x00" {
		t.Errorf("pid %d runs %q (%v), want sleep 600", c.Pid, cmdline, err)
	}

	list, err := e.List(ctxFor(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(list, func(s Summary) bool { return s.ID == id })
	if i < 0 {
		t.Fatalf("List does not show %s: %+v", short(id), list)
	}
	if s := list[i]; !slices.Equal(s.Names, []string{"inspect-me"}) || s.Image != dockertest.ImageTag || s.State != "running" || s.Labels["com.example.session"] != "abc" {
		t.Errorf("List entry %+v", s)
	}
}

// The engine tells a container's first instance from a later one: never
// stopped and never restarted (what the agent's proof of a late start
// needs, agent.lateStart), and after a stop and a start it says so.
func TestInspectTellsAContainersFirstRunFromALaterOne(t *testing.T) {
	d, e := engine(t)
	id := d.RunContainer(t, d.Image, "sleep", "600") // removed when the test ends
	c, err := e.Inspect(ctxFor(t, 10*time.Second), id)
	if err != nil {
		t.Fatal(err)
	}
	if !c.Running || !c.FinishedAt.IsZero() || c.RestartCount != 0 {
		t.Errorf("first run: running %v, finished %v, restarts %d", c.Running, c.FinishedAt, c.RestartCount)
	}
	if err := e.Stop(ctxFor(t, 30*time.Second), id, 0); err != nil {
		t.Fatal(err)
	}
	d.Output(t, "start", id)
	c, err = e.Inspect(ctxFor(t, 10*time.Second), id)
	if err != nil {
		t.Fatal(err)
	}
	if !c.Running || c.FinishedAt.IsZero() || c.FinishedAt.Before(c.Created) || c.StartedAt.Before(c.FinishedAt) {
		t.Errorf("second run: running %v, created %v, finished %v, started %v", c.Running, c.Created, c.FinishedAt, c.StartedAt)
	}
}

func TestStopEndsAContainerWithinItsGrace(t *testing.T) {
	d, e := engine(t)
	id := sleeper(t, d)
	// sleep as a container's PID 1 has no SIGTERM handler, so the kernel
	// ignores SIGTERM for it: the stop ends with SIGKILL after the grace.
	const grace = time.Second
	start := time.Now()
	if err := e.Stop(ctxFor(t, 30*time.Second), id, grace); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	t.Logf("Stop returned after %v", took.Round(time.Millisecond))
	if took > grace+2*time.Second {
		t.Errorf("Stop took %v, grace %v", took, grace)
	}
	waitEnded(t, e, id, 2*time.Second)
	// --rm: it is removed, and stopping it again finds nothing.
	deadline := time.Now().Add(2 * time.Second)
	for {
		_, err := e.Inspect(ctxFor(t, 5*time.Second), id)
		if errors.Is(err, ErrNotFound) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("--rm container still there 2s after it stopped: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := e.Stop(ctxFor(t, 10*time.Second), id, grace); !errors.Is(err, ErrNotFound) {
		t.Errorf("Stop of a removed container: %v", err)
	}
}

func TestStopEndsAnInteractiveRunAndItsClient(t *testing.T) {
	d, e := engine(t)
	// As an agent host runs an MCP server: docker run -i --rm, its stdio
	// the server's.
	client := d.Docker("run", "-i", "--rm", "--network", "none", "--label", "test=interactive", d.Image, "sleep", "300")
	stdin, err := client.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	if err := client.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	var waitErr error
	go func() {
		waitErr = client.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		client.Process.Kill()
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
			t.Error("docker run -i did not exit 5s after SIGKILL")
		}
	})
	var id string
	deadline := time.Now().Add(30 * time.Second)
	for id == "" {
		list, err := e.List(ctxFor(t, 10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range list {
			if s.Labels["test"] == "interactive" {
				id = s.ID
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("the docker run -i container did not start")
		}
		time.Sleep(20 * time.Millisecond)
	}
	start := time.Now()
	if err := e.Stop(ctxFor(t, 30*time.Second), id, time.Second); err != nil {
		t.Fatal(err)
	}
	t.Logf("Stop returned after %v", time.Since(start).Round(time.Millisecond))
	select {
	case <-exited:
		err := waitErr
		code := -1
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		}
		t.Logf("docker run -i exited %v after the stop began, code %d (%v)", time.Since(start).Round(time.Millisecond), code, err)
		if code != 137 {
			t.Errorf("docker run -i exited with %v, want 137 (its container killed after the grace)", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("docker run -i still runs 5s after its container was stopped")
	}
	waitEnded(t, e, id, 2*time.Second)
}

func TestKillEndsAContainerAtOnce(t *testing.T) {
	d, e := engine(t)
	id := sleeper(t, d)
	if err := e.Kill(ctxFor(t, 10*time.Second), id, "KILL"); err != nil {
		t.Fatal(err)
	}
	t.Logf("ended %v after the kill", waitEnded(t, e, id, 2*time.Second).Round(time.Millisecond))
}

func TestContainerGoneOrStoppedIsNotAnError(t *testing.T) {
	d, e := engine(t)
	ctx := ctxFor(t, 30*time.Second)

	// Stopped, not removed: Stop (304) and Kill (409) have nothing to do.
	stopped := d.RunContainer(t, d.Image, "sleep", "600")
	d.Output(t, "kill", stopped)
	waitEnded(t, e, stopped, 5*time.Second)
	c, err := e.Inspect(ctx, stopped)
	if err != nil || c.Running || c.Pid != 0 {
		t.Errorf("Inspect of a stopped container: %+v, %v", c, err)
	}
	if err := e.Stop(ctx, stopped, time.Second); err != nil {
		t.Errorf("Stop of a stopped container: %v", err)
	}
	if err := e.Kill(ctx, stopped, "KILL"); err != nil {
		t.Errorf("Kill of a stopped container: %v", err)
	}

	// Removed: ErrNotFound from all three.
	gone := d.RunContainer(t, d.Image, "sleep", "600")
	d.Output(t, "rm", "-f", gone)
	if _, err := e.Inspect(ctx, gone); !errors.Is(err, ErrNotFound) {
		t.Errorf("Inspect of a removed container: %v", err)
	}
	if err := e.Stop(ctx, gone, time.Second); !errors.Is(err, ErrNotFound) {
		t.Errorf("Stop of a removed container: %v", err)
	}
	if err := e.Kill(ctx, gone, "KILL"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Kill of a removed container: %v", err)
	}
	list, err := e.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range list {
		if s.ID == stopped || s.ID == gone {
			t.Errorf("List shows %s, which does not run", short(s.ID))
		}
	}
}

// hostSleeper starts a sleep on the host, outside any container, which
// no container kill may touch.
func hostSleeper(t *testing.T) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("sleep", "600")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	return cmd
}

func alive(cmd *exec.Cmd) bool { return cmd.Process.Signal(syscall.Signal(0)) == nil }

// multiProcess starts a container of three processes: sh and two sleeps.
func multiProcess(t *testing.T, d *dockertest.Engine, e *Engine) Container {
	t.Helper()
	id := d.RunContainer(t, "--rm", d.Image, "sh", "-c", "sleep 600 & sleep 600 & wait")
	c, err := e.Inspect(ctxFor(t, 10*time.Second), id)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestCgroupKillEndsEveryProcessOfAContainer(t *testing.T) {
	d, e := engine(t)
	host := hostSleeper(t)
	c := multiProcess(t, d, e)
	dir, err := CgroupDir(c.Pid, c.ID)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("container cgroup %s", dir)
	if !holdsID(dir, c.ID) {
		t.Errorf("CgroupDir = %s, which does not name %s", dir, c.ID)
	}
	var procs []int
	deadline := time.Now().Add(5 * time.Second)
	for len(procs) < 3 { // the sleeps may not be forked yet
		if procs, err = procsBelow(dir); err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("container cgroup holds %v, want sh and two sleeps", procs)
		}
		time.Sleep(10 * time.Millisecond)
	}
	killed, err := CgroupKill(dir)
	if err != nil {
		t.Fatal(err)
	}
	if killed != 3 {
		t.Errorf("killed %d, want 3", killed)
	}
	if left, _ := procsBelow(dir); len(left) > 0 {
		t.Errorf("processes left in %s: %v", dir, left)
	}
	waitEnded(t, e, c.ID, 5*time.Second)
	if !alive(host) {
		t.Error("the host's sleep died")
	}
}

// TestCgroupKillOneByOneChecksEachProcess runs the per-process way (v1,
// or v2 before 5.14) on each hierarchy the container is in here.
func TestCgroupKillOneByOneChecksEachProcess(t *testing.T) {
	d, e := engine(t)
	mounts, err := readCgroupMounts()
	if err != nil {
		t.Fatal(err)
	}
	for _, hierarchy := range []string{"unified", "pids"} {
		t.Run(hierarchy, func(t *testing.T) {
			host := hostSleeper(t)
			c := multiProcess(t, d, e)
			data, err := os.ReadFile("/proc/" + strconv.Itoa(c.Pid) + "/cgroup")
			if err != nil {
				t.Fatal(err)
			}
			lines, err := parseProcCgroup(string(data))
			if err != nil {
				t.Fatal(err)
			}
			var dir, cg string
			var mount cgroupMount
			for _, l := range lines {
				if hierarchy == "unified" && !l.unified() || hierarchy == "pids" && !l.has("pids") {
					continue
				}
				for _, m := range mounts {
					if m.shows(l) {
						dir, _ = m.dir(l.path)
						cg, mount = l.path, m
					}
				}
			}
			if dir == "" || !holdsID(cg, c.ID) {
				t.Skipf("the container is in no %s cgroup of its own here (%q)", hierarchy, data)
			}
			// The host's process, listed as if its pid had been recycled
			// into the container: never signalled.
			if ok, err := killIfIn(host.Process.Pid, mount, cg); ok || err != nil {
				t.Errorf("killIfIn(host process) = %v, %v", ok, err)
			}
			if mount.v2 {
				killed, err := killEach(dir, mount, cg)
				if err != nil || killed < 1 {
					t.Fatalf("killEach = %d, %v", killed, err)
				}
			} else {
				killed, err := CgroupKill(dir)
				if err != nil || killed < 1 {
					t.Fatalf("CgroupKill(%s) = %d, %v", dir, killed, err)
				}
			}
			waitEnded(t, e, c.ID, 5*time.Second)
			if !alive(host) {
				t.Error("the host's sleep died")
			}
		})
	}
}

func TestCgroupDirRefusesWhatIsNotTheContainers(t *testing.T) {
	d, e := engine(t)
	id := sleeper(t, d)
	c, err := e.Inspect(ctxFor(t, 10*time.Second), id)
	if err != nil {
		t.Fatal(err)
	}
	other := sleeper(t, d)
	host := hostSleeper(t)
	for _, tc := range []struct {
		name string
		pid  int
		id   string
	}{
		{"a process on the host", host.Process.Pid, id},
		{"the test itself", os.Getpid(), id},
		{"another container's ID", c.Pid, other},
		{"a made-up ID", c.Pid, strings.Repeat("ab", 32)},
		{"a short ID", c.Pid, id[:12]},
		{"no such process", 1 << 30, id},
		{"pid 0", 0, id},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if dir, err := CgroupDir(tc.pid, tc.id); err == nil {
				t.Errorf("CgroupDir = %s", dir)
			} else {
				t.Log(err)
			}
		})
	}
}

func TestCgroupKillRefusesDirectoriesThatAreNotAContainers(t *testing.T) {
	host := hostSleeper(t)
	mounts, err := readCgroupMounts()
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	lines, err := parseProcCgroup(string(data))
	if err != nil {
		t.Fatal(err)
	}
	dirs := []string{"/tmp", t.TempDir()}
	for _, l := range lines {
		for _, m := range mounts {
			if m.shows(l) {
				if dir, ok := m.dir(l.path); ok {
					dirs = append(dirs, dir) // this test's own cgroups
				}
				dirs = append(dirs, m.point)
			}
		}
	}
	// A directory named like a container's that is not in a cgroup file
	// system.
	fake := filepath.Join(t.TempDir(), "docker", testID)
	if err := os.MkdirAll(fake, 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(fake, "cgroup.procs"), []byte(strconv.Itoa(host.Process.Pid)+"\n"), 0o644)
	dirs = append(dirs, fake)
	for _, dir := range dirs {
		if n, err := CgroupKill(dir); err == nil {
			t.Errorf("CgroupKill(%s) = %d, nil", dir, n)
		}
	}
	if _, err := CgroupKill("/sys/fs/cgroup/nonexistent/" + testID); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("CgroupKill of a cgroup gone: %v, want fs.ErrNotExist", err)
	}
	if !alive(host) {
		t.Error("the host's sleep died")
	}
}
