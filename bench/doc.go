// Command bench is `make bench`: it measures what the mcptrace agent costs
// a node and how well it keeps up, side by side with no tracer, bpftrace
// and forkstat, and writes the results into docs/benchmarks.md (between
// the `make bench` markers) with a plot of the storm ratios in
// docs/bench-ratios.svg.
//
// Sections (-sections picks some):
//
//	storms    fork and exec storms (pinned to CPU 0 and unpinned), write
//	          and socket read storms (CPU 0), the write storm beside a
//	          session's `docker run -i` client, a make build of a
//	          generated C project and `npm exec`, in interleaved rounds
//	          for every configuration; medians and ratios to the baseline
//	bpfstats  in-kernel cost per program run (kernel.bpf_stats_enabled,
//	          bpftool prog show deltas), agent and bpftrace
//	events    the agent's event counters at the top creation rate and in a
//	          burst of 1M fork/exec/exit events: handled, lost, recovered
//	kill      time from the SIGKILL of a 200-process session's root to the
//	          death of its last member, immediate and graceful policies
//	memory    agent RSS and BPF map memory at 0, 1k and 10k live
//	          processes and after 1M short-lived ones
//	startup   time to serving when seeding 10k live processes, and when
//	          restarting with 10k tracked processes in a session
//
// It measures the agent built from the tree it runs in (bin/mcptrace).
// For the storms and bpfstats it starts a private Docker engine
// (internal/dockertest.StartProgram: Debian's dockerd, a busybox image)
// whose socket the agents watch; without docker.io they watch a socket
// standing in for one, and the report says so.
// Every agent it starts is narrowed to the bench's own process subtree
// (--sessions.within-pid, no default host rules) with a private pin
// directory, state directory (on tmpfs, /dev/shm, as the default
// /run/mcptrace is where systemd runs) and socket, and is uninstalled
// when it stops;
// the bench signals only processes it started, by pidfd checked against
// the recorded start time.
//
// Flags: -quick (everything tiny, a smoke test in about a minute),
// -rounds, -storm-seconds, -kill-trials, -sections, -out, -svg. Before
// every baseline round it checks that no sched_process_* program is
// loaded and fails when one is (-allow-foreign: go on, and say in the
// report which rounds were falsified). A run replaces the whole generated
// part of the report, so a run of some sections leaves only those.
//
// It does not make the machine quiet: other load (and other tracers, which
// it checks for before every baseline round) falsifies its numbers. It is
// not part of CI, installs nothing itself (make bench runs
// scripts/setup.sh bench first), and keeps no history: each run replaces
// the generated part of the report.
package main
