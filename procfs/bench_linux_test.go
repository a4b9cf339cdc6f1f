package procfs

import (
	"flag"
	"syscall"
	"testing"
	"time"

	"github.com/mcptrace/mcptrace/internal/testenv"
)

var scanChildren = flag.Int("scan.children", 200, "extra `sleep` processes BenchmarkScan starts before it scans (the restart benchmark's node has 10,000)")

// BenchmarkScan reads the real /proc, with -scan.children extra sleep
// processes the benchmark starts (one bash loop) and kills by the PIDs it
// recorded. It reports the processes read per scan and the CPU time
// (user and system, of the whole test process) per scan, which a loaded
// machine disturbs less than the wall time.
//
//	go test -run '^$' -bench Scan -count 10 ./procfs/ -args -scan.children=10000
func BenchmarkScan(b *testing.B) {
	testenv.Sleepers(b, *scanChildren)
	n := 0
	cpu0 := cpuTime(b)
	for b.Loop() {
		snaps, err := Scan("")
		if err != nil {
			b.Fatal(err)
		}
		n = len(snaps)
	}
	b.ReportMetric(float64(n), "procs")
	b.ReportMetric(float64(cpuTime(b)-cpu0)/float64(b.N), "cpu-ns/op")
}

// cpuTime is the user and system time the process used so far.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
