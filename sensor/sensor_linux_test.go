package sensor_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mcptrace/mcptrace/internal/agenttest"
	"github.com/mcptrace/mcptrace/internal/testenv"
	"github.com/mcptrace/mcptrace/lineage"
	"github.com/mcptrace/mcptrace/sensor"
)

// The test binary doubles as a helper process so the tests need nothing but
// /bin/sh on the machine (or in the VM guest).
func TestMain(m *testing.M) {
	testenv.RunHelper(map[string]func(){"threads-exec": agenttest.ThreadsThenExec, "send-requests": sendRequests, "retitle": retitle})
	os.Exit(m.Run())
}

// openSensor opens a sensor for one test (see open in
// pinset_linux_test.go), closed when the test ends.
func openSensor(t *testing.T, opts sensor.Options) *sensor.Sensor { return sensor.OpenForTest(t, opts) }

// collect reads events in the background and returns those about pids the
// filter accepts, until stop returns true for one of them or the time is up.
func collect(t *testing.T, s *sensor.Sensor, keep func(lineage.Event) bool, stop func(lineage.Event) bool) []lineage.Event {
	t.Helper()
	out := make(chan lineage.Event, 1024)
	done := make(chan struct{})
	go func() {
		defer close(out)
		for {
			ev, err := s.Read()
			if errors.Is(err, sensor.ErrClosed) {
				return
			}
			if err != nil {
				t.Errorf("read: %v", err)
				return
			}
			if keep(ev) {
				select {
				case out <- ev:
				case <-done:
					return
				}
			}
		}
	}()
	defer close(done)
	var got []lineage.Event
	timeout := time.After(20 * time.Second)
	for {
		select {
		case ev := <-out:
			got = append(got, ev)
			if stop(ev) {
				return got
			}
		case <-timeout:
			t.Fatalf("timed out; events so far: %+v", got)
		}
	}
}

func TestSensorReportsShortProcessWithBothExecs(t *testing.T) {
	s := openSensor(t, sensor.Options{})
	cmd := exec.Command("/bin/sh", "-c", "exec env MCPTRACE_TEST=1 true --second-exec")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := uint32(cmd.Process.Pid)
	go cmd.Wait()
	evs := collect(t, s,
		func(ev lineage.Event) bool { return ev.Proc.PID == pid },
		func(ev lineage.Event) bool { return ev.Kind == lineage.KindExit })

	var argvs [][]string
	var forks, exits int
	var start uint64
	for _, ev := range evs {
		if start == 0 {
			start = ev.Proc.Start
		}
		if ev.Proc.Start != start {
			t.Errorf("identity changed within one process: %v then %v", start, ev.Proc.Start)
		}
		switch ev.Kind {
		case lineage.KindFork:
			forks++
			if ev.Creator.PID != uint32(os.Getpid()) {
				t.Errorf("creator = %d, want the test process %d", ev.Creator.PID, os.Getpid())
			}
		case lineage.KindExec:
			argvs = append(argvs, ev.Argv)
		case lineage.KindExit:
			exits++
			if ev.ExitCode != 0 || ev.Signal != 0 {
				t.Errorf("exit code %d signal %d, want 0 0", ev.ExitCode, ev.Signal)
			}
		}
	}
	if forks != 1 || exits != 1 {
		t.Errorf("forks=%d exits=%d, want 1 and 1", forks, exits)
	}
	want := []string{
		"[/bin/sh -c exec env MCPTRACE_TEST=1 true --second-exec]",
		"[env MCPTRACE_TEST=1 true --second-exec]",
		"[true --second-exec]",
	}
	if len(argvs) != len(want) {
		t.Fatalf("exec argvs = %q, want %q", argvs, want)
	}
	for i := range want {
		if got := fmt.Sprint(argvs[i]); got != want[i] {
			t.Errorf("exec %d argv = %s, want %s", i, got, want[i])
		}
	}
}

// An exec record says what fd 0 and fd 1 were at that exec: a host
// talks to the MCP servers it starts over pipes or sockets on both, and
// the commands it runs for itself often read /dev/null (roles tells them
// apart by it). One process, three execs: a pipe and a socket, then
// /dev/null and a closed stdout after the shell's redirections.
func TestSensorReportsWhatStdinAndStdoutAreAtExec(t *testing.T) {
	s := openSensor(t, sensor.Options{})
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	out, peer := os.NewFile(uintptr(fds[0]), "out"), os.NewFile(uintptr(fds[1]), "peer")
	defer peer.Close()
	cmd := exec.Command("/bin/sh", "-c", "exec env MCPTRACE_TEST=1 true --stdio </dev/null >&-")
	cmd.Stdin, cmd.Stdout = r, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r.Close()
	out.Close()
	pid := uint32(cmd.Process.Pid)
	go cmd.Wait()
	evs := collect(t, s,
		func(ev lineage.Event) bool { return ev.Proc.PID == pid },
		func(ev lineage.Event) bool { return ev.Kind == lineage.KindExit })
	var got []lineage.Stdio
	for _, ev := range evs {
		if ev.Kind == lineage.KindExec {
			got = append(got, ev.Stdio)
		}
	}
	want := []lineage.Stdio{
		{In: lineage.FilePipe, Out: lineage.FileSocket},
		{In: lineage.FileChar, Out: lineage.FileClosed},
		{In: lineage.FileChar, Out: lineage.FileClosed},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("stdio at each exec = %v, want %v", got, want)
	}
}

func TestSensorReportsThreadedProcessOnce(t *testing.T) {
	s := openSensor(t, sensor.Options{})
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self, "-test.run=^$")
	cmd.Env = testenv.HelperEnv("threads-exec")
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := uint32(cmd.Process.Pid)
	go cmd.Wait()
	evs := collect(t, s,
		func(ev lineage.Event) bool { return ev.Proc.PID == pid || ev.Creator.PID == pid },
		func(ev lineage.Event) bool { return ev.Kind == lineage.KindExit && ev.Proc.PID == pid })
	// Let late duplicates arrive before counting.
	time.Sleep(200 * time.Millisecond)

	counts := map[lineage.EventKind]int{}
	var start uint64
	for _, ev := range evs {
		if ev.Proc.PID != pid {
			t.Errorf("event about another process (a thread reported as a process?): %+v", ev)
			continue
		}
		counts[ev.Kind]++
		if start == 0 {
			start = ev.Proc.Start
		} else if ev.Proc.Start != start {
			t.Errorf("start time changed across the non-leader exec: %d then %d", start, ev.Proc.Start)
		}
		if ev.Kind == lineage.KindExit && ev.ExitCode != 7 {
			t.Errorf("exit code %d, want 7", ev.ExitCode)
		}
	}
	if counts[lineage.KindFork] != 1 || counts[lineage.KindExit] != 1 || counts[lineage.KindExec] != 2 {
		t.Errorf("fork/exec/exit = %d/%d/%d, want 1/2/1 (the test binary, then sh)",
			counts[lineage.KindFork], counts[lineage.KindExec], counts[lineage.KindExit])
	}
}

func TestSensorCountsLostEventsWhenRingBufferIsFull(t *testing.T) {
	s := openSensor(t, sensor.Options{RingBufferSize: sensor.MinRingBufferSize})
	// Nothing reads: a small buffer fills after a few exec records.
	for i := 0; i < 50; i++ {
		if err := exec.Command("/bin/sh", "-c", "true "+strconv.Itoa(i)).Run(); err != nil {
			t.Fatal(err)
		}
	}
	lost, err := s.Lost()
	if err != nil {
		t.Fatal(err)
	}
	if lost[lineage.KindExec] == 0 || lost[lineage.KindFork] == 0 || lost[lineage.KindExit] == 0 {
		t.Errorf("lost = %v, want every kind counted after 50 unread fork/exec/exit", lost)
	}
}

func TestOpenRejectsBadRingBufferSize(t *testing.T) {
	for _, size := range []int{4096 + 1, 3 * 4096, 4096} {
		t.Run(strconv.Itoa(size), func(t *testing.T) {
			_, err := sensor.Open(sensor.Options{RingBufferSize: size})
			if err == nil {
				t.Fatal("no error")
			}
		})
	}
}

// Every exec is reported exactly once or counted lost, also when execs
// race on every CPU: a kernel that skips the primary program (preemptible
// tracepoints, 7.2) has the backup run the event, and an event both miss
// is counted, never a silent gap.
func TestSensorReportsEveryConcurrentExecOnceOrCountsIt(t *testing.T) {
	s := openSensor(t, sensor.Options{})
	before, err := s.Lost()
	if err != nil {
		t.Fatal(err)
	}
	// 1,000 execs on the host, 200 in an emulated guest (ten times
	// slower): enough there to interleave four workers on two vCPUs.
	workers, runs := 4, testenv.Sized(250, 50)
	marker := fmt.Sprintf("mcptrace-exec-storm-%d", os.Getpid())
	seen := make(chan map[string]int, 1)
	stop := make(chan struct{})
	go func() {
		n := map[string]int{}
		defer func() { seen <- n }()
		for {
			ev, err := s.Read()
			if err != nil {
				return
			}
			if ev.Kind == lineage.KindExec && len(ev.Argv) == 3 && ev.Argv[1] == marker {
				n[ev.Argv[2]]++
			}
			select {
			case <-stop:
				return
			default:
			}
		}
	}()
	errs := make(chan error, workers)
	for w := 0; w < workers; w++ {
		go func() {
			for i := 0; i < runs; i++ {
				if err := exec.Command("/bin/true", marker, fmt.Sprintf("%d-%d", w, i)).Run(); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for w := 0; w < workers; w++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(time.Second) // let the reader drain the ring buffer
	close(stop)
	exec.Command("/bin/true").Run() // wake the reader
	got := <-seen
	after, err := s.Lost()
	if err != nil {
		t.Fatal(err)
	}
	rec, err := s.Recovered()
	if err != nil {
		t.Fatal(err)
	}
	lost := after[lineage.KindExec] - before[lineage.KindExec]
	twice := 0
	for _, n := range got {
		if n > 1 {
			twice++
		}
	}
	t.Logf("%d execs: %d reported, %d counted lost, %d reported more than once; since open: recovered by the backup %v, lost %v",
		workers*runs, len(got), lost, twice, rec, after)
	if uint64(len(got))+lost < uint64(workers*runs) {
		t.Errorf("%d execs reported + %d counted lost < %d run: execs vanished without a count", len(got), lost, workers*runs)
	}
	if twice > 0 {
		t.Errorf("%d execs reported more than once: the backup ran beside its primary", twice)
	}
}
