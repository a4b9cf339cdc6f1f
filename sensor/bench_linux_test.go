package sensor

import (
	"errors"
	"flag"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mcptrace/mcptrace/internal/testenv"
	"github.com/mcptrace/mcptrace/procfs"
)

// BenchmarkExecCostOfBackups prices the backup programs: fork+exec+wait of
// /bin/true with no programs, with the primaries only, and with primaries
// and backups (the agent's setup), events drained by a reader. The three
// alternate in rounds within one run; medians are reported side by side:
//
//	go test -run '^$' -bench ExecCostOfBackups -benchtime 2000x ./sensor/
//
// Read off-ns/op, primary-ns/op, both-ns/op and both/primary; ns/op sums
// all rounds and means nothing here.
func BenchmarkExecCostOfBackups(b *testing.B) {
	testenv.Root(b)
	const rounds = 7
	run := func() time.Duration { return testenv.ForkExecTrue(b) }
	with := func(opts Options) time.Duration {
		s, err := Open(opts)
		if err != nil {
			b.Fatal(err)
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			for {
				if _, err := s.Read(); err == ErrClosed {
					return
				}
			}
		}()
		d := run()
		s.Close()
		<-done
		return d
	}
	quiet := slog.New(slog.DiscardHandler)
	var off, primary, both []time.Duration
	b.ResetTimer()
	for r := 0; r < rounds; r++ {
		off = append(off, run())
		primary = append(primary, with(Options{skipBackups: true, Logger: quiet}))
		both = append(both, with(Options{Logger: quiet}))
	}
	median := testenv.Median
	b.ReportMetric(median(off), "off-ns/op")
	b.ReportMetric(median(primary), "primary-ns/op")
	b.ReportMetric(median(both), "both-ns/op")
	b.ReportMetric(median(both)/median(primary), "both/primary")
}

// BenchmarkSocketReadCostOfTheRequestReader prices the container request
// reader where it runs, on socket reads: a one-byte write(2) into a unix
// stream socket pair and read(2) of it from the other end, on CPU 0,
// with no programs and with the reader attached (an engine socket
// given, the sensor's other programs attached in both), alternating in
// rounds; and a one-byte write(2) to /dev/null the same way, which the
// reader, on socket reads only, must not slow. Medians side by side:
//
//	go test -run '^$' -bench SocketReadCostOfTheRequestReader -benchtime 200000x ./sensor/
//
// Read read-off-ns/op, read-on-ns/op, read-on/off and write-on/off; ns/op
// sums all rounds and means nothing here.
func BenchmarkSocketReadCostOfTheRequestReader(b *testing.B) {
	testenv.Root(b)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var cpu0 unix.CPUSet
	cpu0.Set(0)
	if err := unix.SchedSetaffinity(0, &cpu0); err != nil {
		b.Fatal(err)
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		b.Fatal(err)
	}
	defer unix.Close(fds[0])
	defer unix.Close(fds[1])
	null, err := unix.Open(os.DevNull, unix.O_WRONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		b.Fatal(err)
	}
	defer unix.Close(null)
	engine := filepath.Join(b.TempDir(), "engine.sock")
	l, err := net.Listen("unix", engine)
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	buf := []byte("x")
	reads := func() time.Duration {
		start := time.Now()
		for i := 0; i < b.N; i++ {
			unix.Write(fds[0], buf)
			unix.Read(fds[1], buf)
		}
		return time.Since(start) / time.Duration(b.N)
	}
	writes := func() time.Duration {
		start := time.Now()
		for i := 0; i < b.N; i++ {
			unix.Write(null, buf)
		}
		return time.Since(start) / time.Duration(b.N)
	}
	quiet := slog.New(slog.DiscardHandler)
	open := func(sockets []string) *Sensor {
		s, err := Open(Options{Logger: quiet, ContainerClients: []string{"docker"}, EngineSockets: sockets})
		if err != nil {
			b.Fatal(err)
		}
		if sockets != nil && s.RequestsErr() != nil {
			b.Fatal(s.RequestsErr())
		}
		return s
	}
	const rounds = 15
	var readOff, readOn, writeOff, writeOn []time.Duration
	b.ResetTimer()
	for r := 0; r < rounds; r++ {
		s := open(nil)
		readOff = append(readOff, reads())
		writeOff = append(writeOff, writes())
		s.Close()
		s = open([]string{engine})
		readOn = append(readOn, reads())
		writeOn = append(writeOn, writes())
		s.Close()
	}
	median := testenv.Median
	b.ReportMetric(median(readOff), "read-off-ns/op")
	b.ReportMetric(median(readOn), "read-on-ns/op")
	b.ReportMetric(median(readOn)/median(readOff), "read-on/off")
	b.ReportMetric(median(writeOn)/median(writeOff), "write-on/off")
}

var everyChildren = flag.Int("every.children", 200, "extra `sleep` processes BenchmarkReadEveryProcess starts before it reads (the start-up benchmark's node has 10,000)")

// BenchmarkReadEveryProcess reads every process of the node the two ways
// the agent can, alternately within one run: the task iterator
// (Tasks.Scan) and /proc's files (procfs.Scan), with -every.children
// extra sleep processes the benchmark starts. Medians side by side:
//
//	go test -run '^$' -bench ReadEveryProcess -benchtime 10x ./sensor/ -args -every.children=10000
//
// Read off iterator-ms, files-ms and files/iterator; ns/op sums both
// and means nothing here.
func BenchmarkReadEveryProcess(b *testing.B) {
	testenv.Root(b)
	tasks, err := OpenTasks("", nil)
	if err != nil {
		var ferr *FeatureError
		if errors.As(err, &ferr) {
			testenv.Missing(b, "the kernel's task iterator", err.Error())
		}
		b.Fatal(err)
	}
	defer tasks.Close()
	testenv.Sleepers(b, *everyChildren)
	var iter, files []time.Duration
	n, m := 0, 0
	for i := 0; b.Loop(); i++ {
		// Alternate which goes first: neither always reads a warm /proc.
		for j := range 2 {
			start := time.Now()
			if (i+j)%2 == 0 {
				snaps, _, err := tasks.Scan()
				if err != nil {
					b.Fatal(err)
				}
				iter, n = append(iter, time.Since(start)), len(snaps)
			} else {
				snaps, err := procfs.Scan("")
				if err != nil {
					b.Fatal(err)
				}
				files, m = append(files, time.Since(start)), len(snaps)
			}
		}
	}
	mi, mf := testenv.Median(iter), testenv.Median(files)
	b.ReportMetric(mi/1e6, "iterator-ms")
	b.ReportMetric(mf/1e6, "files-ms")
	b.ReportMetric(mf/mi, "files/iterator")
	b.ReportMetric(float64(n), "procs")
	b.ReportMetric(float64(m), "procs-files")
}
