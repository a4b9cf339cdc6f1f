package sensor

import (
	"log/slog"
	"testing"
	"time"

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
