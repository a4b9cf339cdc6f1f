package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/mcptrace/mcptrace/internal/dockertest"
)

// sections in the order they run.
var allSections = []string{"storms", "bpfstats", "events", "kill", "memory", "startup", "metrics"}

// bench is one run: its settings, its scratch space and what it found.
type bench struct {
	root     string // the repository
	mcptrace string // bin/mcptrace, built by the caller
	tmp      string
	// shm is a private directory on tmpfs for the agents' state: the
	// agent's default state.dir (/run/mcptrace) is on tmpfs where systemd
	// runs, and a state on disk would measure the disk's writeback.
	shm           string
	tools         *tools
	quick         bool
	rounds        int
	stormSecs     float64
	killTrials    int
	agentLogLevel string
	allowForeign  bool
	foreignSeen   bool // checkNoTracer found programs not the bench's
	agents        int
	// engineSock is the stand-in container engine socket (standInEngine).
	engineSock string
	// engine is the private Docker engine (startEngine), nil without one;
	// dockerRuns counts the sessions writeBesideAClient started.
	engine        *dockertest.Engine
	dockerRuns    int
	dirs          int
	res           *results
	section       string
	sectionN      int
	sectionsTotal int
}

func main() {
	var (
		out      = flag.String("out", "docs/benchmarks.md", "report to write the generated part into (between the make bench markers)")
		svg      = flag.String("svg", "docs/bench-ratios.svg", "plot of the storm ratios")
		sections = flag.String("sections", strings.Join(allSections, ","), "sections to run, comma-separated: "+strings.Join(allSections, ","))
		quick    = flag.Bool("quick", false, "run every section tiny (minutes), to smoke-test the harness; the report says so")
		rounds   = flag.Int("rounds", 5, "interleaved rounds of the storm section")
		secs     = flag.Float64("storm-seconds", 3, "seconds per storm measurement")
		trials   = flag.Int("kill-trials", 30, "trials per kill-latency policy")
		allow    = flag.Bool("allow-foreign", false, "go on (with a warning in the report) when a baseline round finds sched_process programs the bench did not start")
		bin      = flag.String("mcptrace", "bin/mcptrace", "agent binary to measure")
	)
	flag.StringVar(&onlyWorkloads, "workloads", "", "storms: only these workloads, separated by ';' (e.g. 'fork, CPU 0;exec, CPU 0'); default: all")
	flag.StringVar(&onlyConfigs, "configs", "", "storms: only these configurations beside the baseline, separated by ';' (e.g. 'mcptrace;mcptrace, no history'); default: all")
	flag.Parse()
	if err := run(*out, *svg, *sections, *quick, *rounds, *secs, *trials, *allow, *bin); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run(out, svg, sections string, quick bool, rounds int, secs float64, trials int, allow bool, bin string) error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("run as root: the agent, bpftrace and bpftool need it")
	}
	root, err := os.Getwd()
	if err != nil {
		return err
	}
	want := map[string]bool{}
	for _, s := range strings.Split(sections, ",") {
		s = strings.TrimSpace(s)
		if !contains(allSections, s) {
			return fmt.Errorf("unknown section %q (have %s)", s, strings.Join(allSections, ","))
		}
		want[s] = true
	}
	if quick {
		rounds, secs, trials = 2, 0.5, 3
	}
	tmp, err := os.MkdirTemp("", "mcpbench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	shm, err := os.MkdirTemp("/dev/shm", "mcpbench-")
	if err != nil {
		return fmt.Errorf("a directory on tmpfs for the agents' state: %w", err)
	}
	defer os.RemoveAll(shm)
	b := &bench{root: root, tmp: tmp, shm: shm, quick: quick, rounds: rounds, stormSecs: secs, killTrials: trials,
		agentLogLevel: "warn", allowForeign: allow}
	if b.mcptrace, err = filepath.Abs(bin); err != nil {
		return err
	}
	if _, err := os.Stat(b.mcptrace); err != nil {
		return fmt.Errorf("agent binary: %w (go build -o bin/mcptrace ./cmd/mcptrace)", err)
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	b.res = &results{command: strings.Join(append([]string{"go run ./bench"}, os.Args[1:]...), " "), started: time.Now(), quick: quick}
	if os.Getenv("MAKE_BENCH_COMMAND") != "" {
		b.res.command = os.Getenv("MAKE_BENCH_COMMAND")
	}
	b.res.env = readEnv(ctx, root, b.mcptrace)
	if l1, _, _ := strings.Cut(b.res.env.loadavg, " "); atof(l1) > 0.5*float64(b.res.env.cpus) {
		b.warn("the machine was not quiet: load average %s at the start, on %d CPUs", b.res.env.loadavg, b.res.env.cpus)
	}
	if b.tools, err = buildTools(ctx, tmp); err != nil {
		return err
	}
	if want["storms"] || want["bpfstats"] {
		b.startEngine()
		defer b.stopEngine()
	}
	// bpf_stats costs every program run a clock read: off everywhere but
	// in its own section; the node's setting is restored at the end.
	prevStats, err := os.ReadFile("/proc/sys/kernel/bpf_stats_enabled")
	if err != nil {
		return fmt.Errorf("read kernel.bpf_stats_enabled: %w", err)
	}
	defer os.WriteFile("/proc/sys/kernel/bpf_stats_enabled", prevStats, 0o644)
	if strings.TrimSpace(string(prevStats)) != "0" {
		b.warn("kernel.bpf_stats_enabled was %s when the bench started: set to 0 for the run (bpf_stats section excepted), restored after", strings.TrimSpace(string(prevStats)))
	}
	if err := setBPFStats(false); err != nil {
		return err
	}
	todo := []string{}
	for _, s := range allSections {
		if want[s] {
			todo = append(todo, s)
		}
	}
	fns := map[string]func(context.Context) error{
		"storms":   b.storms,
		"bpfstats": b.bpfStats,
		"events":   b.events,
		"kill":     b.kill,
		"memory":   b.memory,
		"startup":  b.startup,
		"metrics":  b.metrics,
	}
	var failed []string
	b.sectionsTotal = len(todo)
	for i, s := range todo {
		b.section, b.sectionN = s, i+1
		b.progress("start")
		start := time.Now()
		if err := fns[s](ctx); err != nil {
			b.progress("FAILED: %v", err)
			b.warn("section %s failed: %v", s, err)
			failed = append(failed, s)
		}
		b.progress("done in %s", time.Since(start).Round(time.Second))
		if ctx.Err() != nil {
			return ctx.Err()
		}
		_ = setBPFStats(false)
	}
	b.res.took = time.Since(b.res.started)
	b.res.env.loadEnd = loadavg()
	b.res.sectionsRun = todo
	if b.res.storms != nil && svg != "" {
		if err := os.WriteFile(svg, []byte(plotRatios(b.res.storms)), 0o644); err != nil {
			return fmt.Errorf("write %s: %w", svg, err)
		}
		b.res.svg = svg
	}
	if err := writeReport(out, svg, b.res); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "bench: wrote %s in %s\n", out, b.res.took.Round(time.Second))
	if len(failed) > 0 {
		return fmt.Errorf("sections failed: %s (see the report)", strings.Join(failed, ", "))
	}
	return nil
}

// progress prints "[i/n] section: message" to stderr.
func (b *bench) progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s [%d/%d] %s: %s\n", time.Now().Format("15:04:05"), b.sectionN, b.sectionsTotal, b.section, fmt.Sprintf(format, args...))
}

// warn records something suspicious for the report and prints it.
func (b *bench) warn(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	fmt.Fprintln(os.Stderr, "bench: warning:", msg)
	if !contains(b.res.warnings, msg) {
		b.res.warnings = append(b.res.warnings, msg)
	}
}

// tmpDir returns a fresh directory under the bench's scratch space.
func (b *bench) tmpDir(name string) string {
	b.dirs++
	d := filepath.Join(b.tmp, fmt.Sprintf("%s%d", name, b.dirs))
	_ = os.MkdirAll(d, 0o755)
	return d
}

// agentDirs returns fresh private places for an agent.
func (b *bench) agentDirs() agentDirs {
	b.dirs++
	return newAgentDirs(b.tmp, b.shm, b.dirs)
}

func setBPFStats(on bool) error {
	v := "0"
	if on {
		v = "1"
	}
	if err := os.WriteFile("/proc/sys/kernel/bpf_stats_enabled", []byte(v), 0o644); err != nil {
		return fmt.Errorf("sysctl kernel.bpf_stats_enabled=%s: %w", v, err)
	}
	return nil
}

func atof(s string) float64 {
	f, _ := strconv.ParseFloat(s, 64)
	return f
}

func contains(xs []string, s string) bool {
	for _, x := range xs {
		if x == s {
			return true
		}
	}
	return false
}

// sh runs a command and returns its trimmed output ("" on error).
func sh(ctx context.Context, name string, args ...string) string {
	out, err := exec.CommandContext(ctx, name, args...).Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}
