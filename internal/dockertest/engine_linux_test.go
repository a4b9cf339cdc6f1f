package dockertest

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestMain(m *testing.M) { Main(m) }

func TestEngineKeepsItsFilesInItsDirectory(t *testing.T) {
	e := Start(t)
	if !strings.HasPrefix(filepath.Base(e.Dir), dirPrefix) {
		t.Errorf("engine directory %s", e.Dir)
	}
	for _, p := range []string{
		e.Socket,
		filepath.Join(e.Dir, "dockerd.pid"),
		filepath.Join(e.Dir, "key.json"), // not /etc/docker/key.json
		filepath.Join(e.Dir, "data", "image", "vfs"),
		filepath.Join(e.Dir, "exec", "containerd", "containerd.sock"),
		filepath.Join(e.Dir, "exec", "containerd", "daemon"),
		filepath.Join(e.Dir, "data", "containerd", "daemon"),
	} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("engine file: %v", err)
		}
	}
	// The containerd dockerd runs is its own, configured in the directory.
	pidText, err := os.ReadFile(filepath.Join(e.Dir, "exec", "containerd", "containerd.pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(pidText)))
	if !belongs(pid, e.Dir, "") {
		t.Errorf("containerd (pid %d) does not run from %s: %s", pid, e.Dir, describe([]int{pid}))
	}
}

func TestContainersRunInTheEnginesCgroupParent(t *testing.T) {
	e := Start(t)
	id := e.RunContainer(t, "--rm", e.Image, "sleep", "600")
	if !e.Running(t, id) {
		t.Fatalf("container %s is not running", id)
	}
	pid := e.Output(t, "inspect", "--format", "{{.State.Pid}}", id)
	data, err := os.ReadFile("/proc/" + pid + "/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	want := e.CgroupParent + "/" + id
	found := 0
	for _, l := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		parts := strings.SplitN(l, ":", 3)
		if parts[2] == want {
			found++
		} else if parts[2] != "/" {
			t.Errorf("container init in cgroup %q, want %s", l, want)
		}
	}
	if found == 0 {
		t.Errorf("container init is in no cgroup %s:\n%s", want, data)
	}
	if !slices.Contains(e.Containers(t), id) {
		t.Errorf("Containers() does not list %s", id)
	}
}

func TestImageHasBusyboxPrograms(t *testing.T) {
	e := Start(t)
	out := e.Output(t, "run", "--rm", "--network", "none", e.Image, "sh", "-c", "echo hello | cat && true && sleep 0")
	if out != "hello" {
		t.Errorf("busybox programs printed %q, want hello", out)
	}
}

func TestDockerCLIIgnoresTheCallersEnvironment(t *testing.T) {
	e := Start(t)
	t.Setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
	t.Setenv("DOCKER_CONTEXT", "nonexistent")
	out, err := e.Docker("version", "--format", "{{.Server.APIVersion}}").Output()
	if err != nil {
		t.Fatalf("docker version with the caller's DOCKER_HOST set elsewhere: %v", err)
	}
	if v := strings.TrimSpace(string(out)); v == "" {
		t.Error("no server API version")
	}
}

func TestCloseLeavesNothingBehind(t *testing.T) {
	Start(t)
	owner, err := self()
	if err != nil {
		t.Fatal(err)
	}
	// A second engine beside the shared one: two engines do not collide.
	e, err := start(owner)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.close() })
	pids := startSleeper(t, e)
	if err := e.close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	assertGone(t, e, pids)
}

func TestEngineOfADeadTestBinaryIsSweptByTheNextStart(t *testing.T) {
	live := Start(t)
	keep := live.RunContainer(t, "--rm", live.Image, "sleep", "600")

	// An engine whose owner is this pid with another start time: a test
	// binary that died, its pid since reused.
	e, err := start(fmt.Sprintf("%d-1", os.Getpid()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.close() })
	// Other test binaries starting their engines now would sweep it too
	// early; a sweeper skips a directory another holds locked.
	unlock := lockDir(t, e.Dir)
	pids := startSleeper(t, e)
	unlock()

	sweepStale()
	select {
	case <-e.exited:
	case <-time.After(killWait):
		t.Fatalf("dockerd of the dead binary still runs %v after the sweep", killWait)
	}
	assertGone(t, e, pids)
	if !live.Running(t, keep) {
		t.Errorf("the sweep stopped container %s of the running engine", keep)
	}
}

// startSleeper starts a sleeping container in e and returns what should
// go with the engine: dockerd, containerd and the container's init, by
// pid and start time.
func startSleeper(t *testing.T, e *Engine) map[int]string {
	t.Helper()
	id, err := e.output(nil, "run", "-d", "--network", "none", e.Image, "sleep", "600")
	if err != nil {
		t.Fatal(err)
	}
	initPID, err := e.output(nil, "inspect", "--format", "{{.State.Pid}}", id)
	if err != nil {
		t.Fatal(err)
	}
	containerd, err := os.ReadFile(filepath.Join(e.Dir, "exec", "containerd", "containerd.pid"))
	if err != nil {
		t.Fatal(err)
	}
	// The shim's socket is where the sweep will look for it.
	socks := shimSockets(e.Dir)
	if len(socks) != 1 {
		t.Fatalf("shim sockets %v, want one", socks)
	}
	if _, err := os.Stat(socks[0]); err != nil {
		t.Fatalf("the shim of container %s: %v", id[:12], err)
	}
	t.Cleanup(func() {
		if _, err := os.Stat(socks[0]); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("shim socket %s left (%v)", socks[0], err)
		}
	})
	pids := map[int]string{}
	for _, s := range []string{initPID, strings.TrimSpace(string(containerd)), strconv.Itoa(e.cmd.Process.Pid)} {
		pid, err := strconv.Atoi(s)
		if err != nil || pid <= 0 {
			t.Fatalf("pid %q", s)
		}
		if pids[pid], err = procStart(pid); err != nil {
			t.Fatal(err)
		}
	}
	return pids
}

// assertGone checks that nothing of engine e is left: no process, no
// mount, no cgroup, no directory.
func assertGone(t *testing.T, e *Engine, pids map[int]string) {
	t.Helper()
	for pid, start := range pids {
		if now, err := procStart(pid); err == nil && now == start && !exited(pid) {
			st, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
			t.Errorf("process %d still there: %s", pid, st)
		}
	}
	if left := leftProcesses(e.Dir, e.CgroupParent); len(left) > 0 {
		t.Errorf("processes left: %s", describe(left))
	}
	if m := mountsBelow(e.Dir); len(m) > 0 {
		t.Errorf("mounts left: %v", m)
	}
	for _, root := range cgroupRoots() {
		if _, err := os.Stat(filepath.Join(root, e.CgroupParent)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("cgroup %s left in %s (%v)", e.CgroupParent, root, err)
		}
	}
	if _, err := os.Stat(e.Dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("directory %s left (%v)", e.Dir, err)
	}
}

// lockDir takes the lock a sweeper takes, and returns its release.
func lockDir(t *testing.T, dir string) func() {
	t.Helper()
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Flock(fd, unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	return func() { unix.Close(fd) }
}
