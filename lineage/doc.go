// Package lineage keeps a live graph of every process on a node: who created
// whom, what each process ran, and when it ended.
//
// A Graph is fed kernel events (Apply), seeded once from a /proc scan (Seed)
// and reconciled with a fresh scan after the kernel lost events (Repair). It
// answers lineage questions about any process it knows, alive or dead:
// Descendants gives everything a process created at any depth, which is what
// an enforcer kills at the end of an agent session, even when the chain runs
// through wrappers that already exited (npx → npm exec → sh -c → node).
//
// # Identity
//
// A process is identified by ID{PID, Start}, never by its PID alone: a
// recycled PID is a new node and the old node is kept unchanged. Identities
// read from /proc only know Start to a clock tick (Process.CoarseStart); the
// first kernel event naming such a process by its exact start upgrades the
// node in place. Two identities are never merged.
//
// # Edges
//
// The creator edge (who forked the process) is structural: it is written
// once and never changed, except that a creator guessed from a snapshot's
// PPID (seed or repair) yields to the creator named by the process's own
// fork event when that event arrives later (events buffered before a seed
// may be applied after it). Descendants, Children, Ancestors, Roots and
// retention all follow the creator edge. To stay bounded, the graph may
// fold an exited process that only connects an exited creator to one child
// out of the chain (fold.go): the child then names the nearest creator the
// graph holds and counts the ones between (Process.CreatorsElided), so
// what descends from what never changes. The parent edge is the current
// parent (task->real_parent) as last reported; it follows reparenting and is
// informational only.
//
// # Ordering and gaps
//
// Events may arrive out of order (per-CPU buffers), twice, or not at all.
// Apply never drops an event that names a process and never panics: unknown
// creators get placeholder nodes, execs and exits for unknown processes
// create the node, duplicate exits are ignored, and a later fork completes a
// node created out of order. Everything the graph had to guess is recorded
// in Process.Gaps and counted in Stats (the counters only grow).
// GapSeeded and GapRepaired say where a node came from and stay. GapNoFork,
// GapUnknownCreator and GapNoExit say something is missing and are cleared
// when it arrives late: a late fork clears GapNoFork on its node and
// GapUnknownCreator on the node and on the children a placeholder stood in
// for; a late exit event replaces an inferred exit. Applying a process's
// events in any order builds the same node.
//
// A process is never resurrected: once exited (by an event, by PID reuse,
// or by Repair) it stays exited, and a snapshot of it is ignored. A PID
// names one live process at a time, so creating a node marks any older
// node of the same PID exited (GapNoExit).
//
// # Concurrency
//
// A Graph is safe for concurrent use: one sync.RWMutex guards it, mutators
// take it exclusively and queries share it. Every Process returned is a deep
// copy; callers may keep or modify it freely.
//
// # Saving and restoring
//
// Dump copies everything a Graph holds into a State: every node with its
// edges as identities, and the bookkeeping no query shows but later calls
// depend on (a creator guessed from a snapshot that a fork may still
// correct, when each field was last set, when an exit was inferred, the
// last repair's scan, the clock and the counters). Restore builds from a
// State a Graph that answers every query and takes every later call exactly
// as the original would, so an agent can continue after a restart. A State
// round-trips through encoding/json exactly; Restore refuses a State that
// describes no graph with an error wrapping ErrInvalidState. Writing the
// State somewhere is the caller's job.
//
// # Bounds
//
// No local user can make the graph grow without bound. A process keeps its
// first image and its latest Config.MaxImages-1; the images in between are
// dropped and counted (Process.ImagesDropped). The graph holds at most
// Config.MaxNodes nodes and Config.MaxImageBytes bytes of images (by its own
// accounting, Stats.ImageBytes): reaching either evicts the entirely dead
// branches whose newest exit is oldest, a little under the cap
// (Stats.Evicted).
// Live processes, and dead ones with a live descendant, are never evicted,
// because lineage to a live process is what sessions are enforced on; when
// nothing else is left, new processes are admitted over the cap and
// counted (Stats.OverCap), bounded by the kernel's pid_max.
//
// Churn stays out of memory before any cap: an exited process that created
// nothing the graph holds and that no session holds (Claim) goes once
// Config.RecentExits newer exits followed, rather than after Retention
// (recent.go, Stats.Dropped).
//
// # What it does not do
//
// The package performs no I/O and makes no system calls: it does not read
// /proc (see package procfs), does not know the time (callers pass event
// times, snapshot read times and the retirement clock, all in nanoseconds
// since boot on CLOCK_BOOTTIME), and runs no goroutines or timers — callers
// decide when to call Retire. It tracks processes, not threads, and it does
// not judge what a process is: policy belongs to its callers.
package lineage
