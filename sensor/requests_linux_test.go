package sensor_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mcptrace/mcptrace/containers"
	"github.com/mcptrace/mcptrace/internal/testenv"
	"github.com/mcptrace/mcptrace/lineage"
	"github.com/mcptrace/mcptrace/sensor"
)

// sendRequests is a helper process standing in for a container client:
// it connects to $MCPTRACE_TEST_SOCKET and writes each line of
// $MCPTRACE_TEST_LINES (separated by "|") with a write(2) of its own,
// waiting for the server to echo a byte after each, then exits.
func sendRequests() {
	c, err := net.Dial("unix", os.Getenv("MCPTRACE_TEST_SOCKET"))
	if err != nil {
		os.Stderr.WriteString(err.Error() + "\n")
		os.Exit(3)
	}
	r := bufio.NewReader(c)
	// With $MCPTRACE_TEST_FOR (a duration), the lines again and again
	// until it has passed: a flood.
	var until time.Time
	if d, err := time.ParseDuration(os.Getenv("MCPTRACE_TEST_FOR")); err == nil {
		until = time.Now().Add(d)
	}
	for {
		for _, line := range strings.Split(os.Getenv("MCPTRACE_TEST_LINES"), "|") {
			if _, err := c.Write([]byte(line)); err != nil {
				os.Exit(4)
			}
			if _, err := r.ReadByte(); err != nil {
				os.Exit(5)
			}
		}
		if !time.Now().Before(until) {
			return
		}
	}
}

// engineStandIn listens on a unix socket at path and answers every read
// with one byte, until the test ends.
func engineStandIn(t *testing.T, path string) {
	t.Helper()
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				buf := make([]byte, 4096)
				for {
					if _, err := c.Read(buf); err != nil {
						return
					}
					if _, err := c.Write([]byte{'.'}); err != nil {
						return
					}
				}
			}()
		}
	}()
}

// runClient runs the test binary as sendRequests under the process name
// comm (a symbolic link named so: the kernel names a process after the
// path it execs) and returns its pid once it exited.
func runClient(t *testing.T, comm, socket string, lines ...string) uint32 {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, comm)
	if err := os.Symlink(self, bin); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin)
	cmd.Env = testenv.HelperEnv("send-requests", "MCPTRACE_TEST_SOCKET="+socket, "MCPTRACE_TEST_LINES="+strings.Join(lines, "|"))
	cmd.Stderr = io.Discard
	if out, err := cmd.Output(); err != nil {
		t.Fatalf("%s: %v %s", comm, err, out)
	}
	return uint32(cmd.Process.Pid)
}

// requestSensor opens a sensor that reads container clients' requests
// to the engine socket at engine (a test needs that feature: it fails,
// naming it, where the kernel lacks it).
func requestSensor(t *testing.T, engine string) *sensor.Sensor {
	t.Helper()
	s := openSensor(t, sensor.Options{ContainerClients: containers.Clients})
	if err := s.RequestsErr(); err != nil {
		testenv.Missing(t, "reading container clients' engine requests", err.Error())
	}
	if err := s.SetEngineSockets([]string{engine}); err != nil {
		t.Fatal(err)
	}
	return s
}

// requestsOf reads the sensor until each of the clients (pids of
// processes that already exited) is seen to exit, and returns the
// requests each sent, in their order. It reads the sensor once: collect
// leaves nothing for a second call.
func requestsOf(t *testing.T, s *sensor.Sensor, clients ...uint32) [][]string {
	t.Helper()
	index := make(map[uint32]int, len(clients))
	for i, pid := range clients {
		index[pid] = i
	}
	exited := 0
	evs := collect(t, s,
		func(ev lineage.Event) bool {
			_, ok := index[ev.Proc.PID]
			return ok && (ev.Kind == lineage.KindRequest || ev.Kind == lineage.KindExit)
		},
		func(ev lineage.Event) bool {
			if _, ok := index[ev.Proc.PID]; ok && ev.Kind == lineage.KindExit {
				exited++
			}
			return exited == len(index)
		})
	got := make([][]string, len(clients))
	for _, ev := range evs {
		if ev.Kind == lineage.KindRequest {
			i := index[ev.Proc.PID]
			got[i] = append(got[i], ev.Request)
		}
	}
	return got
}

const testContainerID = "0d4a7f1e9b2c3d4e5f60718293a4b5c6d7e8f90112233445566778899aabbccd"

func TestSensorReportsTheContainerAClientStartsAndNothingElseItSends(t *testing.T) {
	dir := t.TempDir()
	engine := filepath.Join(dir, "engine.sock")
	other := filepath.Join(dir, "other.sock")
	engineStandIn(t, engine)
	engineStandIn(t, other)
	s := requestSensor(t, engine)
	start := "POST /v1.41/containers/" + testContainerID + "/start HTTP/1.1\r\nHost: api.moby.localhost\r\nUser-Agent: Docker-Client/20.10.24\r\n\r\n"
	create := "POST /v1.41/containers/create HTTP/1.1\r\nHost: api.moby.localhost\r\n\r\n"
	wait := "POST /v1.41/containers/" + testContainerID + "/wait?condition=removed HTTP/1.1\r\n\r\n"
	// docker exec's start: the kernel's sieve (a path ending in
	// "/start") lets it through, and the parser refuses it.
	execStart := "POST /v1.41/exec/" + testContainerID + "/start HTTP/1.1\r\n\r\n"
	dropped := s.RequestsDropped()

	// The engine is known by its socket's inode, not its path: the
	// engine's socket moved away, and another bound in its place (as
	// anyone can in a mount namespace of their own), the old one is still
	// the engine and the new one is not.
	moved := filepath.Join(dir, "engine-moved.sock")
	if err := os.Rename(engine, moved); err != nil {
		t.Fatal(err)
	}
	engineStandIn(t, engine)

	// A client of another name, a client writing to another socket and
	// one writing to the impostor at the engine's path are not read at
	// all; then the real one, whose start is the only request reported:
	// its create and wait are not sent by the kernel, its exec start is
	// sent and dropped by the parser.
	notClient := runClient(t, "dockerd-x", moved, start)
	elsewhere := runClient(t, "docker", other, start)
	impostor := runClient(t, "docker", engine, start)
	client := runClient(t, "docker", moved, create, wait, execStart, start)

	evs := collect(t, s,
		func(ev lineage.Event) bool {
			return ev.Kind == lineage.KindRequest || ev.Kind == lineage.KindExit && ev.Proc.PID == client
		},
		func(ev lineage.Event) bool { return ev.Kind == lineage.KindExit && ev.Proc.PID == client })
	var got []lineage.Event
	for _, ev := range evs {
		if ev.Kind == lineage.KindRequest {
			got = append(got, ev)
		}
	}
	if len(got) != 1 {
		t.Fatalf("request events = %+v; want exactly the start sent by pid %d (not %d, named otherwise, nor %d, sent elsewhere, nor %d, sent to a socket bound at the engine's path)", got, client, notClient, elsewhere, impostor)
	}
	ev := got[0]
	if ev.Proc.PID != client || ev.Comm != "docker" {
		t.Errorf("request from pid %d (%s), want the client %d", ev.Proc.PID, ev.Comm, client)
	}
	if want := containers.Request(testContainerID, containers.VerbStart); ev.Request != want {
		t.Errorf("request = %q, want the canonical %q (nothing else of what was sent)", ev.Request, want)
	}
	// The exec start was sent and dropped; the create and the wait were
	// never sent (the kernel's sieve), or they would be dropped here too.
	if n := s.RequestsDropped() - dropped; n != 1 {
		t.Errorf("requests the parser dropped = %d, want 1 (the exec start; the create and the wait are not sent)", n)
	}
}

// The kernel sends only lines whose path ends in "/start" or
// "/restart" (before its first ' ' or '?'), a necessary condition of
// what containers.ParseRequest keeps: each line below is sent by a
// client of its own, and exactly the starts are reported, in their
// canonical form.
func TestKernelSendsOnlyRequestsThatStartAContainer(t *testing.T) {
	dir := t.TempDir()
	engine := filepath.Join(dir, "engine.sock")
	engineStandIn(t, engine)
	s := requestSensor(t, engine)
	id := testContainerID
	long := strings.Repeat("n", containers.MaxRefBytes) // no end within the bytes read
	cases := []struct {
		line string
		want string // the request reported, "" for none
	}{
		{"POST /v1.41/containers/" + id + "/start HTTP/1.1\r\n\r\n", containers.Request(id, containers.VerbStart)},
		{"POST /v1.41/containers/" + id + "/start?detachKeys=ctrl-p HTTP/1.1\r\n\r\n", containers.Request(id, containers.VerbStart)},
		{"POST /v1.41/containers/" + id + "/restart?t=10 HTTP/1.1\r\n\r\n", containers.Request(id, containers.VerbRestart)},
		{"POST /containers/my-db/start HTTP/1.1\r\n\r\n", containers.Request("my-db", containers.VerbStart)},
		{"POST /v1.41/containers/create?name=start HTTP/1.1\r\n\r\n", ""},
		{"POST /v1.41/containers/" + id + "/attach?stream=1 HTTP/1.1\r\n\r\n", ""},
		{"POST /v1.41/containers/" + id + "/wait?condition=/start HTTP/1.1\r\n\r\n", ""},
		{"POST /v1.41/containers/" + id + "/kill?signal=SIGKILL HTTP/1.1\r\n\r\n", ""},
		{"POST /v1.41/containers/" + id + "/startx HTTP/1.1\r\n\r\n", ""},
		{"POST /v1.41/containers/" + id + "/xstart HTTP/1.1\r\n\r\n", ""},
		{"POST /v1.41/containers/" + long + "/start HTTP/1.1\r\n\r\n", ""},
	}
	// One client a line, each exited before the next; then the events
	// of all of them, read once (collect reads the sensor to its end).
	dropped := s.RequestsDropped()
	var pids []uint32
	for _, c := range cases {
		pids = append(pids, runClient(t, "docker", engine, c.line))
	}
	got := requestsOf(t, s, pids...)
	for i, c := range cases {
		path := strings.Fields(c.line)[1]
		switch {
		case c.want == "" && len(got[i]) != 0:
			t.Errorf("%s: reported %q; want nothing: it starts no container", path, got[i])
		case c.want != "" && (len(got[i]) != 1 || got[i][0] != c.want):
			t.Errorf("%s: reported %q; want %q", path, got[i], c.want)
		}
	}
	// The parser refuses every line above that starts nothing; that it
	// dropped none says the kernel never sent them.
	if n := s.RequestsDropped() - dropped; n != 0 {
		t.Errorf("the parser dropped %d requests: the kernel sent lines that start nothing", n)
	}
}

// A docker run sends a create, an attach and a wait beside its start;
// the race at 200 sessions (issue 33) showed that when those counted,
// one user's sessions used up the uid's budget of request records with
// them and their own starts went unread. Only starts count now: a
// client that sends 1,000 other requests within about a second, then a
// start, has its start reported and nothing counted over its budget
// (REQUESTS_PER_UID_PER_SEC is 256, so 1,000 would have been over it in
// any second they span).
func TestRequestsThatStartNothingUseNoBudget(t *testing.T) {
	dir := t.TempDir()
	engine := filepath.Join(dir, "engine.sock")
	engineStandIn(t, engine)
	s := requestSensor(t, engine)
	_, overBefore, err := s.RequestDrops()
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for i := range 500 {
		ref := fmt.Sprintf("%062x%02d", 0xdef, i%100)
		lines = append(lines, "POST /v1.41/containers/create HTTP/1.1\r\n\r\n", "POST /v1.41/containers/"+ref+"/wait HTTP/1.1\r\n\r\n")
	}
	start := "POST /v1.41/containers/" + testContainerID + "/start HTTP/1.1\r\n\r\n"
	began := time.Now()
	client := runClient(t, "docker", engine, append(lines, start)...)
	took := time.Since(began)
	got := requestsOf(t, s, client)[0]
	_, overAfter, err := s.RequestDrops()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d requests that start nothing and a start sent in %v", len(lines), took)
	if want := containers.Request(testContainerID, containers.VerbStart); len(got) != 1 || got[0] != want {
		t.Errorf("reported %q; want only the start %q", got, want)
	}
	if overAfter != overBefore {
		t.Errorf("%d requests counted over the uid's budget; requests that start nothing must use none", overAfter-overBefore)
	}
}

// The request reader is a hook on every system call. Attached and
// detached by one agent after another (each pinned set taken over by the
// next) while processes with many threads exec and a client sends its
// requests, the kernel stays responsive and every round reads its
// client's start: in QEMU guests of 5.10 and 6.1, test agents that each
// attached it showed soft lockups, which this would turn into a time-out.
func TestRequestReaderSurvivesAgentsTakingOverUnderLoad(t *testing.T) {
	dir := t.TempDir()
	engine := filepath.Join(dir, "engine.sock")
	engineStandIn(t, engine)
	pin := sensor.PinDirForTest(t)
	start := "POST /v1.41/containers/" + testContainerID + "/start HTTP/1.1\r\n\r\n"
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for round := range 4 {
		s := openSensor(t, sensor.Options{ContainerClients: containers.Clients, PinDir: pin})
		if err := s.RequestsErr(); err != nil {
			testenv.Missing(t, "reading container clients' engine requests", err.Error())
		}
		if err := s.SetEngineSockets([]string{engine}); err != nil {
			t.Fatal(err)
		}
		for range 3 {
			cmd := exec.Command(self, "-test.run=^$")
			cmd.Env = testenv.HelperEnv("threads-exec")
			cmd.Run() // exits 7 from sh
		}
		client := runClient(t, "docker", engine, start)
		evs := collect(t, s,
			func(ev lineage.Event) bool { return ev.Kind == lineage.KindRequest && ev.Proc.PID == client },
			func(ev lineage.Event) bool { return true })
		if len(evs) != 1 {
			t.Fatalf("round %d: %d requests from the client", round, len(evs))
		}
		s.Close()
	}
}

// A start sent right after one agent's sensor took over another's is
// read before anyone calls SetEngineSockets: the engine sockets given to
// Open (Options.EngineSockets) attach the new reader before the old one
// is detached. Without them nothing would read it until the agent's
// first engine check, a second later.
func TestRequestSentRightAfterATakeoverIsRead(t *testing.T) {
	dir := t.TempDir()
	engine := filepath.Join(dir, "engine.sock")
	engineStandIn(t, engine)
	pin := sensor.PinDirForTest(t)
	old := openSensor(t, sensor.Options{ContainerClients: containers.Clients, PinDir: pin})
	if err := old.RequestsErr(); err != nil {
		testenv.Missing(t, "reading container clients' engine requests", err.Error())
	}
	if err := old.SetEngineSockets([]string{engine}); err != nil {
		t.Fatal(err)
	}
	old.Close() // pinned: its reader stays attached until taken over
	s := openSensor(t, sensor.Options{ContainerClients: containers.Clients, PinDir: pin, EngineSockets: []string{engine}})
	start := "POST /v1.41/containers/" + testContainerID + "/start HTTP/1.1\r\n\r\n"
	client := runClient(t, "docker", engine, start)
	evs := collect(t, s,
		func(ev lineage.Event) bool {
			return ev.Proc.PID == client && (ev.Kind == lineage.KindRequest || ev.Kind == lineage.KindExit)
		},
		func(ev lineage.Event) bool { return ev.Kind == lineage.KindExit })
	if len(evs) != 2 || evs[0].Kind != lineage.KindRequest {
		t.Fatalf("events of the client: %+v; want its start, then its exit", evs)
	}
}

// TestKernelSurvivesTheRequestReaderAttachedAndDetachedUnderSocketReads
// attaches and detaches the request reader again and again while other
// threads read from unix sockets without pause. Each first attach and
// last detach patches the code of every socket read (the tracepoint's
// static key) under running CPUs. A real CPU takes that in its stride;
// QEMU's multi-threaded TCG does not (an "Oops: int3", or both vCPUs in
// a soft lockup, seen when the reader was on sys_enter), which is why
// vmexec holds the tracepoint in its guests (vmtests/doc.go). Bounded
// by count and time: 40 rounds (10 in an emulated guest), or 30 s once
// the fewest rounds that prove anything (10; 3 in a guest) are done.
// The rounds are what matters, not their rate: a loaded machine makes
// them slower, which is no failure (it failed so, "only 6 attach rounds
// in 30 s", on a 5.10 guest of a busy host).
func TestKernelSurvivesTheRequestReaderAttachedAndDetachedUnderSocketReads(t *testing.T) {
	dir := t.TempDir()
	engine := filepath.Join(dir, "engine.sock")
	engineStandIn(t, engine)
	stop := make(chan struct{})
	done := make(chan struct{})
	var calls atomic.Int64
	for range 2 {
		fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			defer func() { done <- struct{}{} }()
			defer unix.Close(fds[0])
			defer unix.Close(fds[1])
			b := []byte("x")
			for {
				select {
				case <-stop:
					return
				default:
				}
				for range 1000 {
					unix.Write(fds[0], b)
					unix.Read(fds[1], b)
				}
				calls.Add(1000)
			}
		}()
	}
	maxRounds, minRounds := testenv.Sized(40, 10), testenv.Sized(10, 3)
	deadline := time.Now().Add(time.Duration(testenv.Sized(30, 5)) * time.Second)
	giveUp := time.Now().Add(testenv.Bound(3 * time.Minute))
	rounds := 0
	for rounds < maxRounds && (rounds < minRounds || time.Now().Before(deadline)) && time.Now().Before(giveUp) {
		s := openSensor(t, sensor.Options{ContainerClients: containers.Clients})
		if err := s.RequestsErr(); err != nil {
			testenv.Missing(t, "reading container clients' engine requests", err.Error())
		}
		if err := s.SetEngineSockets([]string{engine}); err != nil {
			t.Fatal(err)
		}
		s.Close()
		rounds++
	}
	close(stop)
	<-done
	<-done
	if rounds < minRounds {
		t.Fatalf("only %d attach rounds in %v", rounds, testenv.Bound(3*time.Minute))
	}
	t.Logf("%d attach and detach rounds under %d socket reads", rounds, calls.Load())
}

// TestOneUsersRequestFloodBlindsOnlyThemselves: issue 31's docker-group
// user, whose clients write start lines at the engine's socket in a
// loop (only starts count: TestRequestsThatStartNothingUseNoBudget), used up the kernel's
// per-CPU budget of request records, and root's session then claimed
// none of its containers. Now the budget is per uid first: root's
// starts sent in the middle of the flood are every one reported, and
// the flooder's excess is counted as over its uid's budget. The flood
// is proven over that budget before root's client starts, and still on
// when it ends.
func TestOneUsersRequestFloodBlindsOnlyThemselves(t *testing.T) {
	const nobody = 65534
	// A directory every uid may enter, the engine's socket anyone may
	// connect to (standing in for a docker group member's access), and
	// the test binary where nobody may run it, named docker.
	dir, err := os.MkdirTemp("", "mcptrace-standin-engine-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	engine := filepath.Join(dir, "engine.sock")
	engineStandIn(t, engine)
	if err := os.Chmod(engine, 0o777); err != nil {
		t.Fatal(err)
	}
	self := testenv.SelfForEveryone(t)
	docker := filepath.Join(filepath.Dir(self), "docker")
	if err := os.Symlink(self, docker); err != nil {
		t.Fatal(err)
	}
	s := requestSensor(t, engine)
	_, overBefore, err := s.RequestDrops()
	if err != nil {
		t.Fatal(err)
	}

	// The flooders write start lines until the test ends them (each
	// waits for the stand-in's byte, so a request is one read of the
	// engine's); four of them, so that a guest slow to schedule them
	// still floods. Root's starts are sent only once the kernel has
	// counted the flood over its budget: a flood that never gets there
	// proves nothing, and fails the test after the bound.
	flood := "POST /v1.41/containers/" + testContainerID + "/start HTTP/1.1\r\nHost: api.moby.localhost\r\n\r\n"
	var stderr testenv.LockedBuffer
	type flooder struct {
		cmd  *exec.Cmd
		done chan error
	}
	var flooders []flooder
	for range 4 {
		c := exec.Command(docker)
		c.Env = testenv.HelperEnv("send-requests", "MCPTRACE_TEST_SOCKET="+engine, "MCPTRACE_TEST_LINES="+flood, "MCPTRACE_TEST_FOR=1h")
		c.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
		c.Stderr = &stderr
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		f := flooder{c, make(chan error, 1)}
		go func() { f.done <- c.Wait() }()
		flooders = append(flooders, f)
	}
	t.Cleanup(func() {
		for _, f := range flooders {
			f.cmd.Process.Kill()
			<-f.done
		}
	})
	// ended says whether a flooder has ended, and how.
	ended := func() (bool, error) {
		for _, f := range flooders {
			select {
			case err := <-f.done:
				f.done <- err // for the cleanup
				return true, err
			default:
			}
		}
		return false, nil
	}
	floodStart := time.Now()
	testenv.Eventually(t, fmt.Sprintf("uid %d's flood over its budget", nobody), func() (bool, string) {
		if gone, err := ended(); gone {
			t.Fatalf("a flooder ended before the test ended it: %v\n%s", err, stderr.String())
		}
		_, over, err := s.RequestDrops()
		if err != nil {
			t.Fatal(err)
		}
		return over > overBefore, fmt.Sprintf("nothing counted over uid %d's budget after %v", nobody, time.Since(floodStart).Round(time.Millisecond))
	})
	t.Logf("uid %d's flood over its budget after %v", nobody, time.Since(floodStart).Round(time.Millisecond))

	// Root's client: 20 starts, one container each, in the flood.
	var starts []string
	want := map[string]bool{}
	for i := range 20 {
		id := fmt.Sprintf("%062x%02d", 0xabc, i)
		starts = append(starts, "POST /v1.41/containers/"+id+"/start HTTP/1.1\r\nHost: api.moby.localhost\r\n\r\n")
		want[containers.Request(id, containers.VerbStart)] = true
	}
	client := runClient(t, "docker", engine, starts...)
	evs := collect(t, s,
		func(ev lineage.Event) bool {
			return ev.Kind == lineage.KindRequest && ev.Proc.PID == client || ev.Kind == lineage.KindExit && ev.Proc.PID == client
		},
		func(ev lineage.Event) bool { return ev.Kind == lineage.KindExit && ev.Proc.PID == client })
	got := 0
	for _, ev := range evs {
		if ev.Kind == lineage.KindRequest && want[ev.Request] {
			got++
		}
	}
	// Every flooder still flooding: root's starts were sent in the flood.
	if gone, err := ended(); gone {
		t.Errorf("a flooder ended before root's client did: %v\n%s", err, stderr.String())
	}
	_, overAfter, err := s.RequestDrops()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("root's starts reported: %d of %d; uid %d's requests over its budget: %d", got, len(want), nobody, overAfter-overBefore)
	if got != len(want) {
		t.Errorf("root's client sent %d starts in uid %d's flood; %d were reported", len(want), nobody, got)
	}
}
