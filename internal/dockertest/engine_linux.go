package dockertest

import (
	"bytes"
	"context"
	"debug/elf"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/mcptrace/mcptrace/internal/testenv"
)

// The programs, always Debian's: /usr/local/bin may hold another docker.
const (
	dockerdPath = "/usr/sbin/dockerd"
	dockerPath  = "/usr/bin/docker"
	busyboxPath = "/bin/busybox"
)

// ImageTag is the busybox image every engine has.
const ImageTag = "mcptrace-test/busybox:1"

// engineEnvPath is the PATH dockerd finds containerd, its shim and runc
// on.
const engineEnvPath = "/usr/sbin:/usr/bin:/sbin:/bin"

// SlowRuntime is a runtime every engine has beside runc (`docker run
// --runtime mcptrace-slow`): runc itself, whose `create` (where a
// container's first process begins) waits SlowRuntimeDelay first, as an
// engine under load or a runtime that boots a VM does. Its script is
// the engine directory's slow-runc.
const (
	SlowRuntime      = "mcptrace-slow"
	SlowRuntimeDelay = 11 * time.Second
)

// slowRunc is SlowRuntime's program. It waits when an argument is
// "create": runc's flags before its subcommand take paths and formats,
// never that word, and after it the bundle's path and the ID.
const slowRunc = `#!/bin/sh
for a; do
	case $a in create) sleep %d; break ;; esac
done
exec runc "$@"
`

// Bounds of every wait.
const (
	readyWait   = 60 * time.Second // dockerd answering /_ping
	stopWait    = 20 * time.Second // dockerd exiting after SIGTERM
	killWait    = 5 * time.Second  // dockerd exiting after SIGKILL
	commandWait = 60 * time.Second // one docker CLI command
	removeWait  = 30 * time.Second // every container removed at the end
)

// Names of an engine's directory and cgroup parent; the rest of both is
// "<pid>-<start>-<random>".
const (
	dirPrefix    = "mcptrace-dockerd-"
	cgroupPrefix = "mcptrace-test-"
)

const missingWhy = "Debian package docker.io; make setup-test installs it"

// Engine is a private dockerd. Its fields are fixed once Start returned
// it.
type Engine struct {
	Socket       string // path of the API socket
	Host         string // "unix://" + Socket, for DOCKER_HOST
	Image        string // ImageTag: busybox with sh, sleep, cat, true
	Dir          string // the engine's directory: data-root, exec-root, socket, pidfile, log
	CgroupParent string // "/mcptrace-test-…": a container's cgroup is CgroupParent/<id>

	cmd     *exec.Cmd
	exited  chan struct{} // closed when dockerd has exited
	waitErr error         // dockerd's exit, once exited is closed
	stopped bool
}

var (
	mainActive atomic.Bool

	sharedMu  sync.Mutex
	shared    *Engine
	sharedErr error
)

// Main runs the tests of m, stops the engine Start started, if any, and
// exits with the tests' code (1 if they passed but the engine could not
// be cleaned up). Call it from TestMain.
func Main(m *testing.M) { os.Exit(Run(m)) }

// Run is Main for a TestMain that does more after the tests: it returns
// the exit code instead of exiting.
func Run(m *testing.M) int {
	mainActive.Store(true)
	code := m.Run()
	sharedMu.Lock()
	e := shared
	shared, sharedErr = nil, errors.New("the tests have ended")
	sharedMu.Unlock()
	if e != nil {
		if err := e.close(); err != nil {
			fmt.Fprintf(os.Stderr, "dockertest: stopping the engine in %s: %v\n", e.Dir, err)
			if code == 0 {
				code = 1
			}
		}
	}
	return code
}

// Start returns the test binary's engine, starting it on the first call.
// It skips the test (fails it under MCPTRACE_REQUIRE_ALL=1) when
// something the engine needs is missing, and fails it when the engine
// does not start or the binary's TestMain does not call Main.
func Start(t testing.TB) *Engine {
	t.Helper()
	requirements(t)
	if !mainActive.Load() {
		t.Fatal("dockertest.Start: the test binary's TestMain must call dockertest.Main(m) (or Run), which stops the engine after the tests")
	}
	sharedMu.Lock()
	defer sharedMu.Unlock()
	if shared == nil && sharedErr == nil {
		var owner string
		if owner, sharedErr = self(); sharedErr == nil {
			shared, sharedErr = start(owner)
		}
	}
	if sharedErr != nil {
		t.Fatalf("dockertest: %v", sharedErr)
	}
	return shared
}

// requirements skips t (or fails it, under RequireAll) when the engine
// cannot run here.
func requirements(t testing.TB) {
	t.Helper()
	if feature, why := missing(); feature != "" {
		testenv.Missing(t, feature, why)
	}
}

// missing returns the first thing the engine needs that is not here, and
// why it is not; "" when nothing is missing.
func missing() (feature, why string) {
	if os.Geteuid() != 0 {
		return "root", "dockerd runs as root"
	}
	for _, p := range []struct{ path, feature string }{
		{dockerdPath, "dockerd"},
		{dockerPath, "the docker CLI " + dockerPath},
	} {
		if !executable(p.path) {
			return p.feature, missingWhy
		}
	}
	for _, name := range []string{"containerd", "containerd-shim-runc-v2", "runc"} {
		if !onPath(name) {
			return name, "Debian package " + name + " (docker.io depends on it); make setup-test installs it"
		}
	}
	if why := staticBusybox(); why != "" {
		return "busybox-static", why + "; Debian package busybox-static, make setup-test installs it"
	}
	return "", ""
}

// StartProgram starts an engine for a program that is not a test binary
// (make bench), owned by the calling process, with the same isolation as
// Start's; the caller stops it with Close. What Start skips a test for
// is an error here.
func StartProgram() (*Engine, error) {
	if feature, why := missing(); feature != "" {
		return nil, fmt.Errorf("%s is missing: %s", feature, why)
	}
	owner, err := self()
	if err != nil {
		return nil, err
	}
	return start(owner)
}

// Close removes every container, stops dockerd and sweeps its directory:
// for an engine of StartProgram (Main stops Start's).
func (e *Engine) Close() error { return e.close() }

func executable(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0
}

// onPath reports whether name is on the PATH dockerd gets.
func onPath(name string) bool {
	for _, d := range filepath.SplitList(engineEnvPath) {
		if executable(filepath.Join(d, name)) {
			return true
		}
	}
	return false
}

// staticBusybox returns why /bin/busybox cannot be the image's only
// program, or "": the image has no libc, so it must be static.
func staticBusybox() string {
	f, err := elf.Open(busyboxPath)
	if err != nil {
		return busyboxPath + ": " + err.Error()
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return busyboxPath + " is dynamically linked"
		}
	}
	return ""
}

// self names this process (a test binary, or StartProgram's caller) as an
// engine's owner: "<pid>-<start>".
func self() (string, error) {
	start, err := procStart(os.Getpid())
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%d-%s", os.Getpid(), start), nil
}

// start starts an engine owned by owner ("<pid>-<start>" of a process):
// sweeps what dead test binaries left, makes the directory, starts
// dockerd, waits for it, imports the image.
func start(owner string) (*Engine, error) {
	sweepStale()
	dir, err := makeDir(owner)
	if err != nil {
		return nil, err
	}
	e := &Engine{
		Dir:          dir,
		Socket:       filepath.Join(dir, "docker.sock"),
		Image:        ImageTag,
		CgroupParent: "/" + cgroupPrefix + strings.TrimPrefix(filepath.Base(dir), dirPrefix),
		exited:       make(chan struct{}),
	}
	e.Host = "unix://" + e.Socket
	if err := e.startDockerd(); err != nil {
		e.close()
		return nil, err
	}
	if err := e.waitReady(); err != nil {
		err = fmt.Errorf("%w\ndockerd log (%s):\n%s", err, e.logPath(), e.Log())
		e.close()
		return nil, err
	}
	if err := e.importImage(); err != nil {
		err = fmt.Errorf("%w\ndockerd log:\n%s", err, e.Log())
		e.close()
		return nil, err
	}
	return e, nil
}

// makeDir creates the engine's directory, named after its owner. The
// socket paths below it must stay under the 108 bytes of a unix socket
// address, so a long TMPDIR is not used.
func makeDir(owner string) (string, error) {
	base := os.TempDir()
	if len(base) > 40 {
		base = "/tmp"
	}
	dir, err := os.MkdirTemp(base, dirPrefix+owner+"-")
	if err != nil {
		return "", fmt.Errorf("engine directory: %w", err)
	}
	for _, sub := range []string{"cli", "tmp"} {
		if err := os.Mkdir(filepath.Join(dir, sub), 0o700); err != nil {
			return "", err
		}
	}
	return dir, nil
}

func (e *Engine) logPath() string { return filepath.Join(e.Dir, "dockerd.log") }

// startDockerd starts dockerd from a goroutine that keeps its thread
// until dockerd exits: the parent-death signal goes out when the thread
// that started the child ends, which is then only when the process does.
func (e *Engine) startDockerd() error {
	slow := filepath.Join(e.Dir, "slow-runc")
	if err := os.WriteFile(slow, fmt.Appendf(nil, slowRunc, int(SlowRuntimeDelay/time.Second)), 0o700); err != nil {
		return err
	}
	config, err := json.Marshal(map[string]any{
		"deprecated-key-path": filepath.Join(e.Dir, "key.json"),
		"runtimes":            map[string]any{SlowRuntime: map[string]string{"path": slow}},
	})
	if err != nil {
		return err
	}
	configPath := filepath.Join(e.Dir, "daemon.json")
	if err := os.WriteFile(configPath, config, 0o600); err != nil {
		return err
	}
	logFile, err := os.OpenFile(e.logPath(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer logFile.Close() // dockerd has its own copy
	e.cmd = exec.Command(dockerdPath,
		"--host="+e.Host,
		"--data-root="+filepath.Join(e.Dir, "data"),
		"--exec-root="+filepath.Join(e.Dir, "exec"),
		"--pidfile="+filepath.Join(e.Dir, "dockerd.pid"),
		"--config-file="+configPath,
		"--exec-opt=native.cgroupdriver=cgroupfs",
		"--cgroup-parent="+e.CgroupParent,
		"--storage-driver=vfs",
		"--iptables=false",
		"--ip6tables=false",
		"--ip-forward=false",
		"--ip-masq=false",
		"--bridge=none",
		"--userland-proxy=false",
		"--shutdown-timeout=2",
	)
	e.cmd.Env = []string{
		"PATH=" + engineEnvPath,
		"HOME=" + e.Dir,
		"TMPDIR=" + filepath.Join(e.Dir, "tmp"),
	}
	e.cmd.Stdout = logFile
	e.cmd.Stderr = logFile
	e.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := e.cmd.Start(); err != nil {
			started <- err
			close(e.exited)
			return
		}
		started <- nil
		e.waitErr = e.cmd.Wait()
		close(e.exited)
	}()
	if err := <-started; err != nil {
		e.cmd = nil
		return fmt.Errorf("start dockerd: %w", err)
	}
	return nil
}

// waitReady polls GET /_ping on the socket until dockerd answers OK.
func (e *Engine) waitReady() error {
	client := &http.Client{
		Timeout: 2 * time.Second,
		Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", e.Socket)
		}},
	}
	defer client.CloseIdleConnections()
	deadline := time.Now().Add(readyWait)
	last := ""
	for {
		select {
		case <-e.exited:
			return fmt.Errorf("dockerd exited before it was ready: %v", e.waitErr)
		default:
		}
		resp, err := client.Get("http://docker/_ping")
		if err == nil {
			var body bytes.Buffer
			body.ReadFrom(io.LimitReader(resp.Body, 1024))
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = fmt.Sprintf("%s: %s", resp.Status, strings.TrimSpace(body.String()))
		} else {
			last = err.Error()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("dockerd not ready after %v: GET /_ping: %s", readyWait, last)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Log returns the end of dockerd's log, for failures.
func (e *Engine) Log() string {
	data, err := os.ReadFile(e.logPath())
	if err != nil {
		return err.Error()
	}
	const keep = 8 << 10
	if len(data) > keep {
		data = data[len(data)-keep:]
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			data = data[i+1:]
		}
	}
	return string(data)
}

// env is the docker CLI's environment: this engine, a configuration
// directory of its own, nothing of the caller's.
func (e *Engine) env() []string {
	cli := filepath.Join(e.Dir, "cli")
	return []string{
		"PATH=/usr/bin:/bin",
		"HOME=" + cli,
		"DOCKER_CONFIG=" + cli,
		"DOCKER_HOST=" + e.Host,
	}
}

// Docker returns a command running Debian's docker CLI with args against
// this engine, with a minimal environment. The caller runs and bounds it.
func (e *Engine) Docker(args ...string) *exec.Cmd {
	cmd := exec.Command(dockerPath, args...)
	cmd.Env = e.env()
	return cmd
}

// DockerAs returns a command running Debian's docker CLI with args
// against this engine as uid (its group the same number), after letting
// that group use the engine: the socket's group becomes gid, writable by
// the group, and the engine's directory searchable by all, as a docker
// group does on a node. The CLI's configuration is a directory of uid's.
// The caller runs and bounds it.
func (e *Engine) DockerAs(t testing.TB, uid int, args ...string) *exec.Cmd {
	t.Helper()
	cli := t.TempDir()
	for _, err := range []error{os.Chmod(e.Dir, 0o711), os.Chown(e.Socket, 0, uid), os.Chmod(e.Socket, 0o660),
		os.Chmod(filepath.Dir(cli), 0o755), os.Chown(cli, uid, uid)} {
		if err != nil {
			t.Fatalf("letting uid %d use the engine: %v", uid, err)
		}
	}
	cmd := exec.Command(dockerPath, args...)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + cli, "DOCKER_CONFIG=" + cli, "DOCKER_HOST=" + e.Host}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)}}
	return cmd
}

// output runs the docker CLI with args (stdin, if not nil, as its input)
// within commandWait and returns its trimmed stdout.
func (e *Engine) output(stdin []byte, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), commandWait)
	defer cancel()
	cmd := exec.CommandContext(ctx, dockerPath, args...)
	cmd.Env = e.env()
	cmd.WaitDelay = time.Second
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("no end within %v: %w", commandWait, err)
		}
		return strings.TrimSpace(stdout.String()), fmt.Errorf("docker %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(stdout.String()), nil
}

// Output runs the docker CLI with args against this engine and returns its
// stdout, trimmed. An error, or no end within a minute, fails the test
// with the command and its stderr.
func (e *Engine) Output(t testing.TB, args ...string) string {
	t.Helper()
	out, err := e.output(nil, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// RunContainer runs `docker run -d --network none args…` and returns the
// new container's full ID. The container is removed by force when the
// test ends.
func (e *Engine) RunContainer(t testing.TB, args ...string) string {
	t.Helper()
	id := e.Output(t, append([]string{"run", "-d", "--network", "none"}, args...)...)
	if !validID(id) {
		t.Fatalf("docker run printed %q, not a container ID", id)
	}
	t.Cleanup(func() {
		if _, err := e.output(nil, "rm", "--force", "--volumes", id); err != nil && !gone(err) {
			t.Errorf("removing container %s: %v", id[:12], err)
		}
	})
	return id
}

// gone reports whether an error of docker rm says the container is gone
// or going: a --rm container removes itself once it ends.
func gone(err error) bool {
	return strings.Contains(err.Error(), "No such container") || strings.Contains(err.Error(), "is already in progress")
}

// removeAll removes every container by force, within removeWait.
func (e *Engine) removeAll() error {
	deadline := time.Now().Add(removeWait)
	for {
		ids, err := e.output(nil, "ps", "--all", "--quiet", "--no-trunc")
		if err != nil || ids == "" {
			return err
		}
		if _, err := e.output(nil, append([]string{"rm", "--force", "--volumes"}, strings.Fields(ids)...)...); err != nil && !gone(err) {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("containers still there %v after docker rm --force: %s", removeWait, strings.Join(strings.Fields(ids), " "))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Running reports whether container id exists and runs.
func (e *Engine) Running(t testing.TB, id string) bool {
	t.Helper()
	out, err := e.output(nil, "inspect", "--type", "container", "--format", "{{.State.Running}}", id)
	if err != nil {
		if strings.Contains(err.Error(), "No such container") {
			return false
		}
		t.Fatal(err)
	}
	return out == "true"
}

// Containers returns the full IDs of every container of the engine,
// running or not.
func (e *Engine) Containers(t testing.TB) []string {
	t.Helper()
	return strings.Fields(e.Output(t, "ps", "--all", "--quiet", "--no-trunc"))
}

// RunningContainers returns the full IDs of the engine's running
// containers: not those stopped and still being removed (a --rm
// container's removal on vfs storage can take the engine minutes when
// it removes 200 at once; its processes are gone by then).
func (e *Engine) RunningContainers(t testing.TB) []string {
	t.Helper()
	return strings.Fields(e.Output(t, "ps", "--quiet", "--no-trunc"))
}

// validID reports whether s is a full container ID.
func validID(s string) bool {
	if len(s) != 64 {
		return false
	}
	for _, c := range s {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// close removes every container, stops dockerd and sweeps the directory.
func (e *Engine) close() error {
	if e.stopped {
		return nil
	}
	e.stopped = true
	var errs []error
	if e.cmd != nil {
		if running(e.exited) {
			// Removing first: dockerd's own shutdown gives each container
			// 10 s whatever --shutdown-timeout says.
			if err := e.removeAll(); err != nil {
				errs = append(errs, err)
			}
		}
		e.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-e.exited:
		case <-time.After(stopWait):
			errs = append(errs, fmt.Errorf("dockerd (pid %d) did not exit %v after SIGTERM; killed it\ndockerd log:\n%s", e.cmd.Process.Pid, stopWait, e.Log()))
			e.cmd.Process.Kill()
			select {
			case <-e.exited:
			case <-time.After(killWait):
				errs = append(errs, fmt.Errorf("dockerd (pid %d) still there %v after SIGKILL", e.cmd.Process.Pid, killWait))
			}
		}
	}
	if err := sweep(e.Dir, e.CgroupParent); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// running reports whether exited is still open.
func running(exited chan struct{}) bool {
	select {
	case <-exited:
		return false
	default:
		return true
	}
}
