package agent_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mcptrace/mcptrace/agent"
	"github.com/mcptrace/mcptrace/internal/agenttest"
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

// BenchmarkRestartWith10kProcesses measures what a restart costs at scale:
// a session of 10,000 live processes (each a member, with its argv), then
// per round the agent stopped (SIGTERM, then SIGKILL, alternating) and
// started again; and a 30 s outage under a fork/exec/exit storm, drained
// by the next agent. CI runs it with -short, at 300 processes, 2 rounds
// and 2 s outages, so it cannot rot; the figures come from the full run:
//
//	go test -run '^$' -bench RestartWith10k -benchtime 1x -timeout 30m ./agent/
//
// Read restart-ms (median, stop to serving, both signals), restart-
// sigterm-ms and restart-sigkill-ms, state-bytes (checkpoint and journal
// after a SIGTERM), tracked, and for the outage drained-events,
// lost-events and made-events (fork, exec and exit of every process the
// load ran), for a busy node (about 50 processes/s) and a storm.
func BenchmarkRestartWith10kProcesses(b *testing.B) {
	n, rounds, outage := 10000, 6, 30
	if testing.Short() {
		n, rounds, outage = 300, 2, 2
	}
	ag := agenttest.StartProcess(b, "--lineage.retention=1h")
	env := fmt.Sprintf("MCPTRACE_BENCH_RESTART=%d", os.Getpid())
	host := exec.Command(ag.Bin, "run", "--session", "big", "--", "/bin/bash", "-c",
		fmt.Sprintf(`for ((i = 0; i < %d; i++)); do sleep 3600 & done; echo started; wait`, n))
	host.Env = append(os.Environ(), env)
	out, _ := host.StdoutPipe()
	if err := host.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		host.Process.Kill()
		host.Wait()
		for _, p := range agenttest.WithEnv(env) {
			p.Kill()
		}
	})
	bufio.NewScanner(out).Scan()
	c := ag.Client()
	testenv.Eventually(b, fmt.Sprintf("the agent to track the session's %d members", n), func() (bool, string) {
		d, err := c.Session(context.Background(), "big", nil)
		if err != nil {
			return false, err.Error()
		}
		return d.Session.Alive > n, fmt.Sprint(d.Session.Alive)
	})
	b.ResetTimer()
	var all, term, kill []time.Duration
	var stateBytes int64
	for r := 0; r < rounds; r++ {
		sig := syscall.SIGTERM
		if r%2 == 1 {
			sig = syscall.SIGKILL
		}
		ag.Stop(sig)
		if sig == syscall.SIGTERM {
			stateBytes = dirSize(b, ag.StateDir)
		}
		d := ag.Start()
		all = append(all, d)
		if sig == syscall.SIGTERM {
			term = append(term, d)
		} else {
			kill = append(kill, d)
		}
	}
	b.StopTimer()
	st, err := c.Status(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	d, err := c.Session(context.Background(), "big", nil)
	if err != nil || d.Session.Alive <= n {
		b.Fatalf("after the restarts the session has %d alive members (%v)", d.Session.Alive, err)
	}
	b.ReportMetric(testenv.Median(all)/1e6, "restart-ms")
	b.ReportMetric(testenv.Median(term)/1e6, "restart-sigterm-ms")
	b.ReportMetric(testenv.Median(kill)/1e6, "restart-sigkill-ms")
	b.ReportMetric(float64(stateBytes), "state-bytes")
	b.ReportMetric(float64(st.Tracked), "tracked")

	// Outages (30 s) under load: events queue in the pinned ring buffer and
	// the next agent drains them; what does not fit is counted lost (and
	// repaired from /proc). A busy node (processes started at about 50/s)
	// and a storm (as fast as the machine forks and execs).
	for _, load := range []struct{ name, script string }{
		// read -t on a fifo nobody writes waits without a process of its own.
		{"busy", fmt.Sprintf(`f=$(mktemp -u); mkfifo $f; exec 3<>$f; rm $f; end=$((SECONDS + %d)); n=0; while [ $SECONDS -lt $end ]; do /bin/true; n=$((n + 1)); read -t 0.02 -u 3; done; echo $n`, outage)},
		{"storm", fmt.Sprintf(`end=$((SECONDS + %d)); n=0; while [ $SECONDS -lt $end ]; do /bin/true; n=$((n + 1)); done; echo $n`, outage)},
	} {
		before, err := c.Status(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		ag.Stop(syscall.SIGTERM)
		storm := exec.Command("/bin/bash", "-c", load.script)
		var count strings.Builder
		storm.Stdout = &count
		if err := storm.Run(); err != nil {
			b.Fatal(err)
		}
		ag.Start()
		after, err := c.Status(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		var lost uint64
		for k, v := range after.Lost {
			lost += v - before.Lost[k]
		}
		procs, _ := strconv.Atoi(strings.TrimSpace(count.String()))
		b.ReportMetric(float64(after.Start.Drained), load.name+"-drained-events")
		b.ReportMetric(float64(lost), load.name+"-lost-events")
		b.ReportMetric(float64(3*procs), load.name+"-made-events")
	}
}

// dirSize is the bytes of the regular files in dir.
func dirSize(b *testing.B, dir string) int64 {
	var n int64
	ents, err := os.ReadDir(dir)
	if err != nil {
		b.Fatal(err)
	}
	for _, e := range ents {
		if fi, err := e.Info(); err == nil && fi.Mode().IsRegular() {
			n += fi.Size()
		}
	}
	return n
}
