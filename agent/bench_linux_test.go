package agent_test

import (
	"testing"
	"time"

	"github.com/mcptrace/mcptrace/agent"
	"github.com/mcptrace/mcptrace/internal/testenv"
)

// BenchmarkForkExecOverhead measures what the agent costs every process on
// the node: fork+exec+wait of /bin/true without and with a running agent
// (programs attached, every event applied to the graph, sessions tracked).
// The two configurations alternate in rounds within one run, and the
// medians are reported side by side with their ratio:
//
//	go test -run '^$' -bench ForkExecOverhead -benchtime 2000x ./agent/
//
// Read off-ns/op and on-ns/op (the medians of each configuration) and
// on/off (their ratio); ns/op sums all rounds and means nothing here.
func BenchmarkForkExecOverhead(b *testing.B) {
	const rounds = 7
	run := func() time.Duration { return testenv.ForkExecTrue(b) }
	var off, on []time.Duration
	for r := 0; r < rounds; r++ {
		b.StopTimer()
		off = append(off, run())
		a := startAgentForBench(b)
		b.StartTimer()
		on = append(on, run())
		b.StopTimer()
		a()
	}
	median := testenv.Median
	b.ReportMetric(median(off), "off-ns/op")
	b.ReportMetric(median(on), "on-ns/op")
	b.ReportMetric(median(on)/median(off), "on/off")
}

// startAgentForBench starts an agent and returns a function that stops it.
func startAgentForBench(b *testing.B) func() {
	var stop func()
	tb := &benchTB{TB: b}
	startAgent(tb, agent.Options{})
	stop = tb.cleanup
	return stop
}

// benchTB runs cleanups when the caller says so, not at the end of the
// benchmark, so every round stops its agent.
type benchTB struct {
	testing.TB
	cleanups []func()
}

func (b *benchTB) Cleanup(f func()) { b.cleanups = append(b.cleanups, f) }

func (b *benchTB) cleanup() {
	for i := len(b.cleanups) - 1; i >= 0; i-- {
		b.cleanups[i]()
	}
	b.cleanups = nil
}
