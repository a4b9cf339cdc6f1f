package deploy_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mcptrace/mcptrace/internal/agenttest"
	"github.com/mcptrace/mcptrace/internal/debian"
	"github.com/mcptrace/mcptrace/internal/testenv"
)

// freshRootVar turns on TestFreshDebianRootMakeRun: it downloads Debian
// packages and every Go module, and builds the agent from an empty build
// cache, which takes minutes; CI does not set it.
const freshRootVar = "MCPTRACE_FRESH_ROOT"

// TestFreshDebianRootMakeRun follows the README's first lines on a fresh
// Debian 12 machine: a debootstrap minbase root (no make, no git, no
// ca-certificates) with only Go 1.26 added (this machine's, mounted at
// /usr/local/go, not on PATH, with its build cache). scripts/setup.sh agent installs what is
// missing, then `make run` builds and serves: mcptrace status answers,
// and the agent stops on SIGTERM. Then with Debian's Go 1.19 (golang-go)
// and no other Go: `make run` says what to do, exits non-zero and builds
// nothing; the command it names (scripts/setup.sh go) fetches Go 1.26
// through the Go module proxy, after which the check passes.
//
// The agent runs as make starts it, narrowed by the environment the
// Makefile passes on (MCPTRACE_*) to this test's processes, in audit
// mode, with a private pin directory: a test never ends what it did not
// start.
func TestFreshDebianRootMakeRun(t *testing.T) {
	testenv.Root(t)
	if os.Getenv(freshRootVar) == "" {
		t.Skipf("downloads Debian packages and Go modules and builds from an empty cache (minutes): set %s=1", freshRootVar)
	}
	for _, tool := range []string{"debootstrap", "unshare", "chroot", "git"} {
		if _, err := exec.LookPath(tool); err != nil {
			testenv.Missing(t, tool, "scripts/setup.sh test installs debootstrap; unshare and chroot are util-linux and coreutils")
		}
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	root := filepath.Join(t.TempDir(), "root")
	if err := debian.Bootstrap(ctx, "bookworm", root); err != nil {
		t.Fatal(err)
	}
	t.Logf("root ready after %v", time.Since(start).Round(time.Second))
	for _, tool := range []string{"make", "git"} {
		if _, err := os.Stat(filepath.Join(root, "usr/bin", tool)); err == nil {
			t.Fatalf("the minbase root already has %s: the test would not show that setup installs it", tool)
		}
	}
	// The machine's apt settings (its mirror serves dated snapshots) and
	// resolver, as on the machine itself.
	copyTree(t, "/etc/apt/apt.conf.d", filepath.Join(root, "etc/apt/apt.conf.d"))
	copyFile(t, "/etc/resolv.conf", filepath.Join(root, "etc/resolv.conf"))
	// And its local certificate authorities (a TLS proxy's, where the
	// machine reaches the Go module proxy through one): ca-certificates
	// adds them when setup installs it, as it did on the machine.
	if _, err := os.Stat("/usr/local/share/ca-certificates"); err == nil {
		copyTree(t, "/usr/local/share/ca-certificates", filepath.Join(root, "usr/local/share/ca-certificates"))
	}
	src := "/src/mcptrace"
	copySource(t, filepath.Join(root, src))
	goroot := runtime.GOROOT()
	if goroot == "" {
		t.Fatal("no GOROOT for this test's Go")
	}
	// This machine's build cache, for the same Go: a build from an empty
	// cache takes four minutes and more on a busy 2-core machine, and
	// reusing compiled packages changes nothing that is built. Modules
	// are downloaded afresh (that is what ca-certificates is for).
	gocache, err := exec.Command(filepath.Join(goroot, "bin", "go"), "env", "GOCACHE").Output()
	if err != nil {
		t.Fatalf("go env GOCACHE: %v", err)
	}

	pinDir := agenttest.PinDir(t)
	const socket = "/run/mcptrace-test/mcptrace.sock"
	env := []string{
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root", "LANG=C.UTF-8", "TERM=dumb",
		"MCPTRACE_API_SOCKET=" + socket,
		"MCPTRACE_BPF_PIN_DIR=" + pinDir,
		"MCPTRACE_SESSIONS_WITHIN_PID=" + strconv.Itoa(os.Getpid()),
		"MCPTRACE_SESSIONS_DEFAULT_RULES=false",
		"MCPTRACE_ENFORCER_MODE=audit",
		"MCPTRACE_METRICS_LISTEN_ADDRESS=127.0.0.1:0",
	}
	for _, k := range []string{"GOPROXY", "GOSUMDB", "GONOSUMDB", "GOPRIVATE", "HTTPS_PROXY", "HTTP_PROXY", "NO_PROXY", "https_proxy", "http_proxy", "no_proxy"} {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	// inRoot runs script with bash in the root, in a mount namespace of
	// its own with the machine's /proc, /sys and /dev (and Go, when
	// withGo) mounted: they go away with it.
	inRoot := func(ctx context.Context, withGo bool, script string) *exec.Cmd {
		mounts := fmt.Sprintf("set -e; for d in proc sys dev; do mount --rbind /$d %s/$d; done; ", root)
		if withGo {
			dst := filepath.Join(root, "usr/local/go")
			cache := filepath.Join(root, "root/.cache/go-build")
			for _, d := range []string{dst, cache} {
				if err := os.MkdirAll(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			mounts += fmt.Sprintf("mount --bind %s %s; mount -o remount,bind,ro %s; mount --bind %s %s; ", goroot, dst, dst, strings.TrimSpace(string(gocache)), cache)
		}
		cmd := exec.CommandContext(ctx, "unshare", "--mount", "--propagation", "private", "--", "/bin/sh", "-c",
			mounts+fmt.Sprintf(`exec chroot %s /bin/bash -c "cd %s && $0"`, root, src), script)
		cmd.Env = env
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
		cmd.WaitDelay = 10 * time.Second
		return cmd
	}
	run := func(withGo bool, script string) (string, error) {
		t.Helper()
		out, err := inRoot(ctx, withGo, script).CombinedOutput()
		return string(out), err
	}

	// The README's first step, then make run.
	step := time.Now()
	if out, err := run(true, "scripts/setup.sh agent"); err != nil {
		t.Fatalf("scripts/setup.sh agent: %v\n%s", err, out)
	}
	t.Logf("scripts/setup.sh agent took %v", time.Since(step).Round(time.Second))
	step = time.Now()
	var makeOut testenv.LockedBuffer
	mk := inRoot(ctx, true, "make run")
	mk.Stdout, mk.Stderr = &makeOut, &makeOut
	if err := mk.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var waitErr error
	go func() { waitErr = mk.Wait(); close(done) }()
	t.Cleanup(func() {
		syscall.Kill(-mk.Process.Pid, syscall.SIGKILL)
		<-done
	})
	status := func() (string, error) {
		out, err := exec.CommandContext(ctx, "chroot", root, src+"/bin/mcptrace", "status", "--api.socket="+socket).CombinedOutput()
		return string(out), err
	}
	var st string
	for {
		select {
		case <-done:
			t.Fatalf("make run ended before the agent served (%v):\n%s", waitErr, makeOut.String())
		case <-ctx.Done():
			t.Fatalf("make run: no agent served within the bound:\n%s", makeOut.String())
		case <-time.After(time.Second):
		}
		if out, err := status(); err == nil {
			st = out
			break
		}
	}
	t.Logf("make run served after %v", time.Since(step).Round(time.Second))
	for _, want := range []string{"agent", "sessions", "history"} {
		if !strings.Contains(st, want) {
			t.Errorf("mcptrace status lacks %q:\n%s", want, st)
		}
	}
	syscall.Kill(-mk.Process.Pid, syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatalf("make run did not stop within 30 s of SIGTERM:\n%s", makeOut.String())
	}
	if !strings.Contains(makeOut.String(), "stopped; the kernel programs stay attached") {
		t.Errorf("the agent did not say it stopped:\n%s", makeOut.String())
	}

	// Debian's own Go, and no other: a message that says what to do, a
	// failure, nothing built.
	step = time.Now()
	if out, err := run(false, "rm -rf bin && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends golang-go >/dev/null && go version"); err != nil || !strings.Contains(out, "go1.19") {
		t.Fatalf("installing Debian's golang-go: %v\n%s", err, out)
	}
	out, err := run(false, "make run")
	if err == nil {
		t.Fatalf("make run with Go 1.19 succeeded:\n%s", out)
	}
	for _, want := range []string{"Go 1.19", "too old", "needs Go 1.26", "scripts/setup.sh go", "Nothing was built"} {
		if !strings.Contains(out, want) {
			t.Errorf("make run with Go 1.19 does not say %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "invalid go version") || strings.Contains(out, "unknown directive") {
		t.Errorf("make run with Go 1.19 reached go.mod's parse errors:\n%s", out)
	}
	if _, err := os.Stat(filepath.Join(root, src, "bin")); err == nil {
		t.Errorf("make run with Go 1.19 left a bin/ behind")
	}
	// The fix it names.
	if out, err := run(false, "scripts/setup.sh go && make check-go && /usr/local/go/bin/go version"); err != nil || !strings.Contains(out, "go1.26") {
		t.Fatalf("scripts/setup.sh go with Go 1.19: %v\n%s", err, out)
	}
	t.Logf("Go 1.19: the message, then the fetch, took %v; the whole test %v", time.Since(step).Round(time.Second), time.Since(start).Round(time.Second))
}

// copySource copies the files of this checkout that git knows or would
// add (committed, changed or new; not ignored) to dir, without .git: a
// tarball of the source, as a user might unpack one.
func copySource(t *testing.T, dir string) {
	t.Helper()
	top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Fatalf("git rev-parse: %v", err)
	}
	repo := strings.TrimSpace(string(top))
	files, err := exec.Command("git", "-C", repo, "ls-files", "-z", "--cached", "--others", "--exclude-standard").Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	var existing bytes.Buffer
	for _, f := range bytes.Split(files, []byte{0}) {
		if len(f) == 0 {
			continue
		}
		if _, err := os.Lstat(filepath.Join(repo, string(f))); err == nil { // deleted but not committed
			existing.Write(f)
			existing.WriteByte(0)
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	pack := exec.Command("tar", "-C", repo, "--null", "-T", "-", "-cf", "-")
	pack.Stdin = &existing
	unpack := exec.Command("tar", "-C", dir, "-xf", "-")
	var err1 bytes.Buffer
	pack.Stderr, unpack.Stderr = &err1, &err1
	pipe, err := pack.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	unpack.Stdin = pipe
	if err := unpack.Start(); err != nil {
		t.Fatal(err)
	}
	if err := pack.Run(); err != nil {
		t.Fatalf("tar of the source: %v\n%s", err, err1.String())
	}
	if err := unpack.Wait(); err != nil {
		t.Fatalf("untar of the source: %v\n%s", err, err1.String())
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	os.Remove(to) // it may be a dangling symlink
	if err := os.WriteFile(to, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func copyTree(t *testing.T, from, to string) {
	t.Helper()
	ents, err := os.ReadDir(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(to, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if e.Type().IsRegular() {
			copyFile(t, filepath.Join(from, e.Name()), filepath.Join(to, e.Name()))
		}
	}
}
