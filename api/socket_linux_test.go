package api

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mcptrace/mcptrace/internal/testenv"
	"github.com/mcptrace/mcptrace/procfs"
)

// Helper processes: the test binary run again (testenv.HelperEnv).
func TestMain(m *testing.M) {
	testenv.RunHelper(map[string]func(){"connect": helperConnect, "hold": helperHold, "flood": helperFlood})
	os.Exit(m.Run())
}

// getOn sends GET path on c and returns "CODE body" on one line.
func getOn(c net.Conn, br *bufio.Reader, path string) string {
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: mcptrace\r\n\r\n", path); err != nil {
		return "error " + err.Error()
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return "error " + err.Error()
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return strconv.Itoa(resp.StatusCode) + " " + strings.TrimSpace(string(b))
}

// helperConnect connects to the socket, starts a "hold" child that
// inherits the connection, says "ready" and waits to be killed.
func helperConnect() {
	c, err := net.Dial("unix", os.Getenv("API_TEST_SOCKET"))
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	f, _ := c.(*net.UnixConn).File()
	cmd := exec.Command(os.Args[0])
	cmd.Env = testenv.HelperEnv("hold")
	cmd.ExtraFiles = []*os.File{f}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	if err := cmd.Start(); err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	time.Sleep(time.Hour) // until killed (select{} is a deadlock to the runtime)
	os.Exit(0)
}

// helperHold sends GET /v1/status on the inherited connection (fd 3) for
// every line read, printing the answer.
func helperHold() {
	c, err := net.FileConn(os.NewFile(3, "conn"))
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	br := bufio.NewReader(c)
	fmt.Println("ready")
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		fmt.Println(getOn(c, br, "/v1/status"))
	}
	os.Exit(0)
}

// helperFlood opens API_TEST_N connections, sends one request on each and
// prints how many were answered 200 and how many refused, then holds them until stdin
// closes.
func helperFlood() {
	n, _ := strconv.Atoi(os.Getenv("API_TEST_N"))
	var ok, busy int
	var conns []net.Conn
	for i := 0; i < n; i++ {
		c, err := net.Dial("unix", os.Getenv("API_TEST_SOCKET"))
		if err != nil {
			continue
		}
		conns = append(conns, c)
		// A refused connection is answered 503 and closed at once: the
		// request may not even be written.
		if strings.HasPrefix(getOn(c, bufio.NewReader(c), "/v1/status"), "200 ") {
			ok++
		} else {
			busy++
		}
	}
	fmt.Println(ok, busy)
	io.Copy(io.Discard, os.Stdin)
	os.Exit(0)
}

// serveSocket runs s on a private socket every uid may reach until the
// test ends.
func serveSocket(t *testing.T, s *Server) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "mcptrace-api-test-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o755)
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "api.sock")
	l, err := Listen(sock, 0o666)
	if err != nil {
		t.Fatal(err)
	}
	serveUntilDone(t, s, l)
	return sock
}

// reusePID starts `sleep` processes until one gets pid (ns_last_pid),
// and returns it. It returns nil when another process on the machine took
// the pid first and holds it (the next process anyone forks may take a
// freed pid: a test beside this one did, in a CI run), so the caller can
// set its stage up again with a new pid; it fails the test when the pid
// stays free and still cannot be had.
func reusePID(t *testing.T, pid int) *exec.Cmd {
	t.Helper()
	for try := 0; try < 200; try++ {
		if err := os.WriteFile("/proc/sys/kernel/ns_last_pid", []byte(strconv.Itoa(pid-1)), 0); err != nil {
			t.Fatalf("set ns_last_pid: %v", err)
		}
		cmd := exec.Command("/bin/sleep", "30")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		if cmd.Process.Pid == pid {
			t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
			return cmd
		}
		cmd.Process.Kill()
		cmd.Wait()
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err == nil {
			t.Logf("pid %d was taken by another process before this test could reuse it (try %d)", pid, try+1)
			return nil
		}
	}
	t.Fatalf("could not get pid %d for a new process in 200 tries", pid)
	return nil
}

// A connection whose connecting process exited (a zombie, reaped, or its
// pid reused by a new process of the same uid) acts for nobody: every
// request on it is refused, though it was answered while the process ran.
func testHeldConnectionActsForNobody(t *testing.T, noPIDFD bool) {
	testenv.Root(t)
	for _, stage := range []string{"zombie", "reaped", "pid reused"} {
		t.Run(stage, func(t *testing.T) {
			// Another process may take the freed pid first: the stage is
			// set up again with a new one, at most 5 times.
			for attempt := 1; ; attempt++ {
				if heldConnectionStage(t, stage, noPIDFD) {
					return
				}
				if attempt == 5 {
					t.Fatalf("%d times another process took the connecting process's pid before the test could reuse it", attempt)
				}
			}
		})
	}
}

// heldConnectionStage is one stage of testHeldConnectionActsForNobody on
// a server of its own; false when the stage could not be set up (the
// pid to reuse was taken by another process), true when it ran.
func heldConnectionStage(t *testing.T, stage string, noPIDFD bool) bool {
	w := newWorld(t)
	w.s.noPIDFD = noPIDFD
	w.s.Log = slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	sock := serveSocket(t, w.s)
	a := exec.Command(os.Args[0], "-test.run=^$")
	a.Env = testenv.HelperEnv("connect", "API_TEST_SOCKET="+sock)
	in, _ := a.StdinPipe()
	out, _ := a.StdoutPipe()
	a.Stderr = os.Stderr
	if err := a.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(out)
	line := func() string {
		if !sc.Scan() {
			t.Fatalf("helper said nothing: %v", sc.Err())
		}
		return sc.Text()
	}
	// The holder exits when its stdin closes.
	t.Cleanup(func() {
		in.Close()
		a.Process.Kill()
		a.Wait()
	})
	if l := line(); l != "ready" {
		t.Fatalf("helper: %s", l)
	}
	fmt.Fprintln(in, "go")
	if l := line(); !strings.HasPrefix(l, "200 ") {
		t.Fatalf("while the connecting process runs: %s, want 200", l)
	}
	a.Process.Kill()
	waitZombie(t, a.Process.Pid)
	if stage != "zombie" {
		// Reap it without closing the pipes to the holder.
		var ws syscall.WaitStatus
		if _, err := syscall.Wait4(a.Process.Pid, &ws, 0, nil); err != nil {
			t.Fatalf("reap: %v", err)
		}
	}
	if stage == "pid reused" && reusePID(t, a.Process.Pid) == nil {
		return false
	}
	before := w.s.gone.Load()
	fmt.Fprintln(in, "go")
	if l := line(); !strings.HasPrefix(l, "403 ") || !strings.Contains(l, "exited or changed") {
		t.Fatalf("after the connecting process exited (%s): %s, want 403", stage, l)
	}
	if w.s.gone.Load() != before+1 {
		t.Errorf("refusal not counted")
	}
	return true
}

func waitZombie(t *testing.T, pid int) {
	t.Helper()
	// Every thread gone, only the leader's exit status left.
	testenv.Eventually(t, "connecting process is a zombie", func() (bool, string) {
		st, err1 := procfs.ReadStat("", uint32(pid))
		_, err2 := readPeer(uint32(pid))
		return err1 == nil && st.State == 'Z' && errors.Is(err2, errPeerGone), fmt.Sprintf("%+v, %v", st, err2)
	})
}

// The binding the kernel offers (a pidfd from Linux 6.5, the start time
// before) is the one the server uses, and a held connection acts for
// nobody with it. Runs on every kernel of the matrix: on 6.5+ a missing
// SO_PEERPIDFD fails the test, before 6.5 a present one does.
func TestHeldConnectionActsForNobodyWithTheKernelsBinding(t *testing.T) {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		t.Fatal(err)
	}
	release := unix.ByteSliceToString(u.Release[:])
	var major, minor int
	if _, err := fmt.Sscanf(release, "%d.%d", &major, &minor); err != nil {
		t.Fatalf("kernel release %q: %v", release, err)
	}
	want := major > 6 || major == 6 && minor >= 5
	if got := peerPIDFDSupported(); got != want {
		t.Fatalf("kernel %s: SO_PEERPIDFD supported = %v, want %v (Linux 6.5 added it)", release, got, want)
	}
	testHeldConnectionActsForNobody(t, !want)
}

// The fallback (start time read at accept, checked at each request) runs
// on every kernel.
func TestHeldConnectionActsForNobodyByStartTime(t *testing.T) {
	testHeldConnectionActsForNobody(t, true)
}

// One uid cannot hold more than its share of connections, all non-root
// users together not more than the total; the refusals are counted, the
// agent's file descriptors stay bounded and root still gets through.
func TestConnectionFloodIsCappedPerUIDAndInTotal(t *testing.T) {
	testenv.Root(t)
	w := newWorld(t)
	w.s.MaxConnections, w.s.MaxConnectionsPerUID = 24, 16
	sock := serveSocket(t, w.s)
	bin := testenv.SelfForEveryone(t)
	fdsBefore := countFDs(t)
	flood := func(uid uint32, n int) (ok, busy int) {
		cmd := exec.Command(bin, "-test.run=^$")
		cmd.Env = testenv.HelperEnv("flood", "API_TEST_SOCKET="+sock, "API_TEST_N="+strconv.Itoa(n))
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
		in, _ := cmd.StdinPipe()
		out, _ := cmd.StdoutPipe()
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { in.Close(); cmd.Wait() })
		sc := bufio.NewScanner(out)
		if !sc.Scan() {
			t.Fatalf("flood as uid %d said nothing", uid)
		}
		if _, err := fmt.Sscan(sc.Text(), &ok, &busy); err != nil {
			t.Fatalf("flood as uid %d: %q", uid, sc.Text())
		}
		return ok, busy
	}
	if ok, busy := flood(nobody, 40); ok != 16 || busy != 24 {
		t.Errorf("uid %d: %d answered, %d refused; want 16, 24", nobody, ok, busy)
	}
	if ok, busy := flood(other, 16); ok != 8 || busy != 8 {
		t.Errorf("uid %d: %d answered, %d refused; want 8, 8 (total cap 24)", other, ok, busy)
	}
	st := w.s.apiStatus()
	if st.Connections != 24 || st.RefusedUIDCap != 24 || st.RefusedTotalCap != 8 {
		t.Errorf("status %+v, want 24 open, 24 refused over the uid cap, 8 over the total", st)
	}
	// Each admitted connection holds at most two descriptors here.
	if fds := countFDs(t); fds > fdsBefore+2*24+8 {
		t.Errorf("agent holds %d descriptors, %d before the flood", fds, fdsBefore)
	}
	c := NewClient(sock)
	if _, err := c.Status(context.Background()); err != nil {
		t.Errorf("root refused during the flood: %v", err)
	}
}

func countFDs(t *testing.T) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// Headers over the limit are refused before any handler runs.
func TestOversizedHeaderIsRefused(t *testing.T) {
	testenv.Root(t)
	w := newWorld(t)
	sock := serveSocket(t, w.s)
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(c, "GET /v1/status HTTP/1.1\r\nHost: mcptrace\r\nX-Junk: %s\r\n\r\n", strings.Repeat("j", 64<<10))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("status %d, want 431", resp.StatusCode)
	}
}

// A connection that sends nothing, or a request line and some headers
// and then nothing (a slow-header flood), is closed by the server once
// the header timeout (5 s) has passed: holding it costs the holder its
// connection, not the agent a connection slot forever.
func TestSilentConnectionsAreClosedAfterTheHeaderTimeout(t *testing.T) {
	testenv.Root(t)
	w := newWorld(t)
	sock := serveSocket(t, w.s)
	for _, tc := range []struct{ name, send string }{
		{"nothing sent", ""},
		{"headers never finished", "GET /v1/status HTTP/1.1\r\nHost: mcptrace\r\nX-Slow: 1\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, err := net.Dial("unix", sock)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			start := time.Now()
			if _, err := io.WriteString(c, tc.send); err != nil {
				t.Fatal(err)
			}
			c.SetReadDeadline(time.Now().Add(readHeaderTimeout + testenv.Bound(5*time.Second)))
			_, err = io.ReadAll(c) // the server's close ends the read (a 408 may come first)
			took := time.Since(start)
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				t.Fatalf("connection still open after %v (header timeout %v)", took, readHeaderTimeout)
			}
			if took < readHeaderTimeout-100*time.Millisecond {
				t.Errorf("closed after %v, before the header timeout %v", took, readHeaderTimeout)
			}
			t.Logf("closed by the server after %v", took.Round(time.Millisecond))
		})
	}
}

// One agent at a time serves a socket: a second Listen is ErrServing
// while the first serves, and while another holds the socket's lock
// without serving yet (an agent starting), and changes nothing then; the
// first's Close removes the socket and lets go. A lock file that is a
// link or another user's is replaced, not trusted.
func TestListenServesOneAgentAtATime(t *testing.T) {
	testenv.Root(t)
	dir := t.TempDir()
	sock := filepath.Join(dir, "api.sock")
	first, err := Listen(sock, 0o666)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Listen(sock, 0o666); !errors.Is(err, ErrServing) {
		t.Fatalf("second Listen while the first serves: %v; want ErrServing", err)
	}
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatalf("the first no longer answers after the second's refusal: %v", err)
	}
	c.Close()
	first.Close()
	if _, err := os.Lstat(sock); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("socket after Close: %v; want it removed", err)
	}

	// An agent starting: its lock held, no socket yet.
	lock, err := os.OpenFile(sock+".lock", os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	if _, err := Listen(sock, 0o666); !errors.Is(err, ErrServing) {
		t.Errorf("Listen while another holds the lock: %v; want ErrServing", err)
	}
	if _, err := os.Lstat(sock); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused Listen left a socket: %v", err)
	}
	lock.Close()

	for _, plant := range []struct {
		name string
		make func(string) error
	}{
		{"uid 65534's file", func(p string) error {
			os.Remove(p)
			if err := os.WriteFile(p, nil, 0o666); err != nil {
				return err
			}
			return os.Chown(p, 65534, 65534)
		}},
		{"a link to another file", func(p string) error {
			os.Remove(p)
			return os.Symlink(filepath.Join(dir, "elsewhere"), p)
		}},
	} {
		if err := plant.make(sock + ".lock"); err != nil {
			t.Fatal(err)
		}
		l, err := Listen(sock, 0o666)
		if err != nil {
			t.Errorf("Listen with %s as the lock: %v", plant.name, err)
			continue
		}
		var st unix.Stat_t
		if err := unix.Lstat(sock+".lock", &st); err != nil || st.Uid != 0 || st.Mode&unix.S_IFMT != unix.S_IFREG || st.Mode&0o777 != 0o600 {
			t.Errorf("lock after replacing %s: uid %d mode %o (%v); want root's regular 0600 file", plant.name, st.Uid, st.Mode, err)
		}
		if _, err := os.Lstat(filepath.Join(dir, "elsewhere")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the link's target was created: %v", err)
		}
		l.Close()
	}
}

// reusePID tells a pid another process holds (nil: set the stage up
// again) from one it could not get.
func TestReusePIDGivesWayToAProcessHoldingThePID(t *testing.T) {
	testenv.Root(t)
	holder := exec.Command("/bin/sleep", "30")
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { holder.Process.Kill(); holder.Wait() }()
	if cmd := reusePID(t, holder.Process.Pid); cmd != nil {
		t.Fatalf("reusePID(%d) gave process %d while another held the pid", holder.Process.Pid, cmd.Process.Pid)
	}
}
