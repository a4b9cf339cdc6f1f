package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
)

func (b *bench) workloads() ([]workload, error) {
	proj := b.tmpDir("cproject")
	files, builds, npms := 40, 2, 5
	if b.quick {
		files, builds, npms = 10, 1, 1
	}
	if err := makeProject(proj, files); err != nil {
		return nil, fmt.Errorf("write C project: %w", err)
	}
	host := filepath.Join(b.root, "e2e/testdata/mcphost")
	t, secs := b.tools, b.stormSecs
	storm := func(mode byte, cpu int) func(ctx context.Context) (float64, error) {
		return func(ctx context.Context) (float64, error) {
			r, err := t.storm(ctx, mode, secs, 0, cpu, 1)
			return r.rate(), err
		}
	}
	all := []workload{
		{"fork, CPU 0", "forks/s", fmt.Sprintf("`taskset -c 0 storm f %g`: fork, the child _exit(0)s, waitpid", secs), storm('f', 0)},
		{"exec, CPU 0", "execs/s", fmt.Sprintf("`taskset -c 0 storm e %g`: fork, the child execv()s a static true, waitpid", secs), storm('e', 0)},
		{"write, CPU 0", "writes/s", fmt.Sprintf("`taskset -c 0 storm w %g`: write(2) of one byte to /dev/null in a loop", secs), storm('w', 0)},
		{"socket read, CPU 0", "reads/s", fmt.Sprintf("`taskset -c 0 storm r %g`: write(2) of one byte into a unix socket pair and read(2) of it from the other end, in a loop (the hook of the container request reader)", secs), storm('r', 0)},
		{"fork, unpinned", "forks/s", "the fork storm, one process, not pinned", storm('f', -1)},
		{"exec, unpinned", "execs/s", "the exec storm, one process, not pinned", storm('e', -1)},
		{"make -j2", "builds/s", fmt.Sprintf("%d clean builds (`make -j2`) of a generated C project of %d files", builds, files+1),
			func(ctx context.Context) (float64, error) { return makeBuilds(ctx, proj, builds) }},
		{"npm exec", "runs/s", fmt.Sprintf("%d× `npm exec --offline -- node-which node` in e2e/testdata/mcphost", npms),
			func(ctx context.Context) (float64, error) { return npmExecs(ctx, host, npms) }},
	}
	if b.engine != nil {
		all = slices.Insert(all, 3, workload{workloadDockerWrite, "writes/s",
			"the write storm, CPU 0, while a session's `docker run -i --rm` client (the session's root) and its container run, on a private dockerd (internal/dockertest); started before, removed after each run",
			b.writeBesideAClient})
	}
	return selectNamed(all, func(w workload) string { return w.name }, "-workloads", onlyWorkloads)
}

// workloadDockerWrite names the write storm beside a docker run -i
// client in a session.
const workloadDockerWrite = "write, CPU 0, docker run -i in a session"

// onlyWorkloads, when not empty, names the workloads the storms run
// (-workloads), separated by ';'.
var onlyWorkloads string

// storms runs every workload under every configuration, in interleaved
// rounds: for each round, each configuration is started, runs every
// workload, and is stopped; the order rotates from round to round.
func (b *bench) storms(ctx context.Context) error {
	wls, err := b.workloads()
	if err != nil {
		return err
	}
	cfgs, err := b.configs()
	if err != nil {
		return err
	}
	res := &stormResults{workloads: wls, raw: map[string]map[string][]float64{}, rounds: b.rounds, stormSecs: b.stormSecs,
		engine: "a socket standing in for an engine (no docker.io: see the warnings)"}
	if b.engine != nil {
		res.engine = "a private dockerd's (internal/dockertest)"
	}
	for _, c := range cfgs {
		res.configs = append(res.configs, c.name)
		res.raw[c.name] = map[string][]float64{}
	}
	b.res.storms = res
	// One run of every workload first, discarded: the first build and
	// the first npm exec warm caches the rounds then share.
	b.progress("warm-up")
	for _, w := range wls {
		if _, err := w.run(ctx); err != nil {
			return fmt.Errorf("warm-up, %s: %w", w.name, err)
		}
	}
	for r := 1; r <= b.rounds; r++ {
		// Each round starts one configuration later than the last, so
		// that what a place in the round costs (the configuration before
		// it stopping, caches) falls on every configuration alike. In
		// fixed order, mcptrace (always second) ran up to 2.2 points
		// behind mcptrace, no containers on the exec storms, which differ
		// only in the request reader these storms hardly reach (the
		// 9-round make bench of 2026-11-26).
		order := append(slices.Clone(cfgs[(r-1)%len(cfgs):]), cfgs[:(r-1)%len(cfgs)]...)
		for _, c := range order {
			b.progress("round %d/%d: %s", r, b.rounds, c.name)
			b.foreignSeen = false
			stop, err := c.start(ctx)
			if b.foreignSeen && c.name == "baseline" {
				res.foreignRounds = append(res.foreignRounds, r)
			}
			if err != nil {
				return fmt.Errorf("round %d: start %s: %w", r, c.name, err)
			}
			for _, w := range wls {
				v, werr := w.run(ctx)
				if werr != nil {
					err = fmt.Errorf("round %d, %s, %s: %w", r, c.name, w.name, werr)
					break
				}
				res.raw[c.name][w.name] = append(res.raw[c.name][w.name], v)
			}
			if serr := stop(); serr != nil {
				err = errors.Join(err, fmt.Errorf("round %d: stop %s: %w", r, c.name, serr))
			}
			if err != nil {
				return err
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
		}
	}
	return nil
}
