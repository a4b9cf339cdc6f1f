package main

import (
	"context"
	"fmt"
	"sort"
	"strings"
)

// bpfStats measures the in-kernel cost per program run of the agent and of
// bpftrace under the same workload, from bpf_stats deltas.
func (b *bench) bpfStats(ctx context.Context) error {
	if err := setBPFStats(true); err != nil {
		return err
	}
	defer setBPFStats(false)
	res := &bpfStatsResults{workload: fmt.Sprintf("exec storm, fork storm, then socket read storm (the container request reader's hook), %g s each, unpinned", b.stormSecs)}
	b.res.bpfstats = res
	work := func() error {
		for _, mode := range []byte{'e', 'f', 'r'} {
			if _, err := b.tools.storm(ctx, mode, b.stormSecs, 0, -1, 1); err != nil {
				return err
			}
		}
		return nil
	}

	b.progress("mcptrace")
	a, err := b.startAgent(ctx, b.agentDirs())
	if err != nil {
		return err
	}
	ids, err := agentProgIDs(ctx, a.dirs.pinDir)
	if err == nil {
		var costs []progCost
		costs, err = measureProgs(ctx, "mcptrace", ids, work)
		res.progs = append(res.progs, costs...)
	}
	if cerr := a.close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}

	b.progress("bpftrace")
	before, err := progs(ctx)
	if err != nil {
		return err
	}
	stop, err := b.startBpftrace(ctx)
	if err != nil {
		return err
	}
	defer stop()
	after, err := progs(ctx)
	if err != nil {
		return err
	}
	ids = nil
	for id, p := range after {
		if _, old := before[id]; !old && p.Type == "tracepoint" && p.sched() {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		return fmt.Errorf("bpftrace's programs not found in bpftool prog show")
	}
	costs, err := measureProgs(ctx, "bpftrace", ids, work)
	nameBpftrace(costs)
	res.progs = append(res.progs, costs...)
	return err
}

// nameBpftrace gives bpftrace's programs their tracepoints' full names:
// the kernel keeps 15 bytes (sched_process_e is exec and exit), and
// bpftrace loads them in the script's order, so by ascending id.
func nameBpftrace(costs []progCost) {
	if len(costs) != 3 {
		return
	}
	sort.Slice(costs, func(i, j int) bool { return costs[i].id < costs[j].id })
	for i, full := range []string{"sched_process_fork", "sched_process_exec", "sched_process_exit"} {
		if strings.HasPrefix(full, costs[i].name) {
			costs[i].name = full
		}
	}
}

// measureProgs returns the bpf_stats deltas of programs ids over work.
func measureProgs(ctx context.Context, tracer string, ids []uint32, work func() error) ([]progCost, error) {
	before, err := progs(ctx)
	if err != nil {
		return nil, err
	}
	if err := work(); err != nil {
		return nil, err
	}
	after, err := progs(ctx)
	if err != nil {
		return nil, err
	}
	var out []progCost
	for _, id := range ids {
		p0, p1 := before[id], after[id]
		out = append(out, progCost{tracer: tracer, name: p1.Name, id: id,
			runs: p1.RunCnt - p0.RunCnt, ns: p1.RunTimeNS - p0.RunTimeNS, recursionMisses: p1.RecursionMisses - p0.RecursionMisses})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out, nil
}
