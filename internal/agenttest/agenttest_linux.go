// Package agenttest starts real agents for tests: the real sensor and BPF
// programs, a private socket every uid can reach, no host rules, narrowed
// to the test binary's own subtree (so the agent ends only sessions the
// test declares, never another test package's running beside it), and
// logs into the test's output. It also holds helper-process bodies several
// test packages spawn.
package agenttest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mcptrace/mcptrace/agent"
	"github.com/mcptrace/mcptrace/internal/testenv"
	"github.com/mcptrace/mcptrace/procfs"
	"github.com/mcptrace/mcptrace/sensor"
)

// Start runs an agent with opts until the test ends. An empty Socket gets a
// private one; a nil Logger writes warnings (or the level named by
// MCPTRACE_TEST_LOG, e.g. debug) into the test log. The zero
// opts.Sessions has no host rules; a zero opts.Sessions.WithinPID becomes
// the test binary's PID (Within). A missing kernel feature skips the test
// naming it (a failure under MCPTRACE_REQUIRE_ALL=1).
func Start(t testing.TB, opts agent.Options) *agent.Agent {
	t.Helper()
	testenv.Root(t)
	if opts.Socket == "" {
		// A directory every uid can enter, as /run/mcptrace is: tests
		// connect as other users too.
		dir, err := os.MkdirTemp("", "mcptrace-agent-test-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		os.Chmod(dir, 0o755)
		opts.Socket = filepath.Join(dir, "mcptrace.sock")
	}
	if opts.Sessions.WithinPID == 0 {
		opts.Sessions.WithinPID = Within()
	}
	if opts.PinDir == "" {
		opts.PinDir = PinDir(t)
	}
	if opts.ContainerEngineSocket == "" {
		// A socket standing in for a container engine, so that every test
		// agent runs with the container request reader attached, as on a
		// node with Docker. It closes what connects: the agent finds no
		// engine there and says so once.
		opts.ContainerEngineSocket = standInEngine(t)
	}
	if opts.StateDir == "" {
		opts.StateDir = StateDir(t)
	}
	if opts.HistoryDir == "" {
		// Every test agent keeps a history, as the default agent does,
		// in a directory of its own.
		opts.HistoryDir = HistoryDir(t)
	}
	if opts.Logger == nil {
		level := slog.LevelWarn
		level.UnmarshalText([]byte(os.Getenv("MCPTRACE_TEST_LOG")))
		opts.Logger = testenv.Logger(t, level)
	}
	a, err := agent.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	select {
	case <-a.Ready():
	case err := <-done:
		cancel()
		var ferr *sensor.FeatureError
		if errors.As(err, &ferr) {
			testenv.Missing(t, ferr.Feature, ferr.Error())
		}
		t.Fatalf("agent did not start: %v", err)
	case <-time.After(30 * time.Second):
		cancel()
		t.Fatal("agent not ready after 30s")
	}
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("agent stopped with error: %v", err)
		}
	})
	return a
}

// PinDir returns a private pin directory on bpffs for one test's agents
// (bpf.pin-dir): agents of tests running side by side never take over
// each other's programs. When the test ends, whatever is pinned there is
// detached and removed.
func PinDir(t testing.TB) string {
	t.Helper()
	testenv.Root(t)
	base := "/sys/fs/bpf"
	var st unix.Statfs_t
	if err := unix.Statfs(base, &st); err != nil || int64(st.Type) != unix.BPF_FS_MAGIC {
		// The agent mounts bpffs when it is missing; a test needs it
		// before the agent starts.
		if err := unix.Mount("bpf", base, "bpf", 0, ""); err != nil {
			t.Fatalf("mount bpffs at %s: %v", base, err)
		}
	}
	self, err := procfs.ReadStat("", uint32(os.Getpid()))
	if err != nil {
		t.Fatal(err)
	}
	sweepPinDirs(t, base)
	dir, err := os.MkdirTemp(base, fmt.Sprintf("mcptrace-test-%d-%d-", self.PID, self.StartTicks))
	if err != nil {
		t.Fatalf("private pin directory under %s: %v", base, err)
	}
	t.Cleanup(func() {
		if _, err := sensor.Uninstall(dir); err != nil {
			t.Errorf("remove the test's pinned programs: %v", err)
		}
		os.RemoveAll(dir)
	})
	return dir
}

// sweepPinDirs removes the pin directories of test processes that are
// gone: a test binary killed mid-run (a timeout, a Ctrl-C) runs no
// cleanup, and the programs its agents pinned stay attached, slowing
// every later run on the node (docs/ci.md). A directory is a dead test's
// when its name holds a pid whose process no longer has the start time
// beside it; directories of another form are left alone.
func sweepPinDirs(t testing.TB, base string) {
	t.Helper()
	dirs, _ := filepath.Glob(filepath.Join(base, "mcptrace-test-*"))
	for _, dir := range dirs {
		var pid uint32
		var start uint64
		var rest string
		if n, _ := fmt.Sscanf(filepath.Base(dir), "mcptrace-test-%d-%d-%s", &pid, &start, &rest); n != 3 {
			continue
		}
		if st, err := procfs.ReadStat("", pid); err == nil && st.StartTicks == start {
			continue // its test still runs
		}
		n, err := sensor.Uninstall(dir)
		if err == nil {
			err = os.RemoveAll(dir)
		}
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Logf("the pins of a test that is gone (pid %d): %s: %v", pid, dir, err)
			continue
		}
		t.Logf("removed %s: the pins of a test that is gone (pid %d), %d program sets", dir, pid, n)
	}
}

// StateDir returns a private state directory (state.dir) for one test's
// agents, removed when the test ends.
func StateDir(t testing.TB) string { return tempDir(t, "mcptrace-state-") }

// HistoryDir returns a private history directory (history.dir) for one
// test's agents, removed when the test ends.
func HistoryDir(t testing.TB) string { return tempDir(t, "mcptrace-history-") }

func tempDir(t testing.TB, pattern string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", pattern)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// Within is the PID test agents are narrowed to (sessions.within-pid):
// the test binary's own, so that only processes the test started can begin
// or end sessions. Test packages run side by side, each with its own
// agents, and `mcptrace run` tags are seen by every agent on the node.
func Within() uint32 { return uint32(os.Getpid()) }

// WithinFlag is Within as a flag of `mcptrace agent`, for tests that run the
// agent binary.
func WithinFlag() string { return "--sessions.within-pid=" + strconv.Itoa(os.Getpid()) }

// ThreadsThenExec is the body of a helper process: it starts 50 threads
// and execs `sh -c 'exit 7'` from one that is not the group leader. It
// never returns.
func ThreadsThenExec() {
	runtime.LockOSThread() // the main goroutine keeps the leader thread
	ready := make(chan struct{})
	for i := 0; i < 50; i++ {
		go func() {
			runtime.LockOSThread()
			ready <- struct{}{}
			select {}
		}()
	}
	for i := 0; i < 50; i++ {
		<-ready
	}
	go func() {
		runtime.LockOSThread()
		err := syscall.Exec("/bin/sh", []string{"sh", "-c", "exit 7"}, os.Environ())
		fmt.Fprintln(os.Stderr, "exec:", err)
		os.Exit(99)
	}()
	select {}
}

// standInEngine listens on a unix socket until the test ends, closing
// every connection at once, and returns its path.
func standInEngine(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "mcptrace-engine-")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "engine.sock")
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	t.Cleanup(func() { l.Close(); os.RemoveAll(dir) })
	return path
}
