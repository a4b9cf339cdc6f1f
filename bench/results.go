package main

import (
	"context"
	"math"
	"time"
)

// benchSessions is how many `mcptrace run` sessions are active while the
// agent is measured.
const benchSessions = 3

// results is everything one run found, for the report.
type results struct {
	env         envInfo
	command     string
	started     time.Time
	took        time.Duration
	quick       bool
	sectionsRun []string
	warnings    []string
	svg         string

	storms   *stormResults
	bpfstats *bpfStatsResults
	events   *eventResults
	kill     *killResults
	memory   *memoryResults
	startup  *startupResults
	metrics  *metricsResults
}

// Variants of the metrics section: an agent sampling for its metrics
// every second (fifteen times as often as by default) and one serving
// no metrics at all.
const (
	variantSampling  = "sampling every 1 s"
	variantNoMetrics = "no metrics"
)

// metricsResults are the metrics section's: scrape latencies and sample
// durations with sessions × processes live, and per variant the exec
// storm's rate in each round and the events lost.
type metricsResults struct {
	sessions, processes int
	scrapeMS, sampleMS  []float64
	bytes               int
	rates               map[string][]float64
	lost                map[string]uint64
}

// envInfo is what the numbers were measured on.
type envInfo struct {
	kernel    string
	cpuModel  string
	cpus      int
	memTotal  string
	goVersion string
	commit    string
	dirty     bool
	loadavg   string // at the start
	loadEnd   string // at the end
	bpftrace  string
	forkstat  string
}

// A workload is measured as a rate (higher is better), so that every
// ratio to the baseline reads the same way: 1.0 costs nothing.
type workload struct {
	name string
	unit string
	desc string
	run  func(ctx context.Context) (float64, error)
}

// stormResults are the raw rounds of every configuration and workload.
type stormResults struct {
	configs   []string
	workloads []workload
	// raw[config][workload] holds one rate per round.
	raw       map[string]map[string][]float64
	rounds    int
	stormSecs float64
	// foreignRounds are the rounds whose baseline ran with another
	// tracer's sched_process_* programs loaded (-allow-foreign).
	foreignRounds []int
	// engine says what the agents watched as their container engine: a
	// private dockerd, or a stand-in socket without docker.io.
	engine string
}

func (s *stormResults) median(cfg, wl string) float64 { return median(s.raw[cfg][wl]) }

// ratio is median(cfg)/median(baseline) for a workload.
func (s *stormResults) ratio(cfg, wl string) float64 {
	return s.median(cfg, wl) / s.median("baseline", wl)
}

// progCost is one program's bpf_stats delta over the workload.
type progCost struct {
	tracer          string
	name            string
	id              uint32
	runs            uint64
	ns              uint64
	recursionMisses uint64
}

// perRun is the mean time of one run in ns (NaN when it never ran).
func (p progCost) perRun() float64 { return float64(p.ns) / float64(p.runs) }

type bpfStatsResults struct {
	workload string
	progs    []progCost
}

// eventRun is the agent's counters over one load.
type eventRun struct {
	name      string
	processes int64
	seconds   float64
	made      uint64 // 3 per process: fork, exec, exit
	handled   uint64 // events_total delta (the node's other events too)
	lost      uint64
	recovered uint64
	repairs   uint64
	lostKinds map[string]uint64
	// The history journal over the load: events it wrote, dropped and
	// failed, and its file's growth.
	histWritten, histDropped, histFailed uint64
	histBytes                            int64
}

type eventResults struct {
	runs []eventRun
}

type killTrial struct {
	members   int
	latency   time.Duration // minus the grace for the graceful policy
	survivors int           // members alive 30 s after the SIGKILL
}

type killPolicy struct {
	name   string
	minus  time.Duration
	trials []killTrial
}

func (p killPolicy) latencies() []float64 {
	var xs []float64
	for _, t := range p.trials {
		xs = append(xs, float64(t.latency)/float64(time.Millisecond))
	}
	return xs
}

type killResults struct {
	size     int
	grace    time.Duration
	policies []killPolicy
}

type memPoint struct {
	label   string
	live    int // sleepers the bench started
	tracked int // the agent's tracked processes (live and exited)
	alive   int
	rss     int64
	kernel  mapMemory
}

type memoryResults struct {
	points []memPoint
}

// mapMemory is the kernel memory of a set of maps.
type mapMemory struct {
	total   uint64
	ringbuf uint64
	maps    []bpfMap
}

// bpfMap is one entry of `bpftool map show -j`.
type bpfMap struct {
	ID           uint32 `json:"id"`
	Type         string `json:"type"`
	Name         string `json:"name"`
	BytesMemlock uint64 `json:"bytes_memlock"`
}

type startPoint struct {
	serving  time.Duration // exec to the first status answer, as the bench sees it
	agentMS  float64       // the agent's own serving_after_ms
	logged   string        // start_to_serving from the agent's log
	tracked  int
	restored bool
}

type startupResults struct {
	processes int
	seed      []startPoint
	restart   []startPoint
}

// pairedDiff is the difference a configuration makes against another
// round by round: (a − b) / baseline median for each round both ran, its
// median, and an interval for that median (medianInterval). Pairs share
// a round's conditions (the machine's drift, the order), which this
// removes and the difference of the two ratios does not; on a workload
// that swings from round to round the two can still differ by more than
// a point, so the history's target wants both.
func (s *stormResults) pairedDiff(a, b, wl string) (med, lo, hi, cover float64) {
	xa, xb := s.raw[a][wl], s.raw[b][wl]
	base := s.median("baseline", wl)
	var d []float64
	for i := range min(len(xa), len(xb)) {
		d = append(d, (xa[i]-xb[i])/base)
	}
	if len(d) == 0 {
		return math.NaN(), math.NaN(), math.NaN(), 0
	}
	lo, hi, cover = medianInterval(d)
	return median(d), lo, hi, cover
}

// configNoHistory is the agent without its history journal, the
// configuration the storms compare the agent with.
const configNoHistory = "mcptrace, no history"
