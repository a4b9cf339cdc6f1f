package sensor

import (
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mcptrace/mcptrace/internal/testenv"
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
