// Package enforcer kills what an AI agent session left behind, and nothing
// else.
//
// When a session ends (its root exited, or a destroy marker was seen) the
// agent calls End with a MembersFunc: a closure over the lineage graph
// that returns the session's members — every process the session's root
// created, at any depth, through wrappers that already exited and across
// reparenting (lineage.Graph.Descendants). End kills every live member and
// sweeps until none is left, because members keep forking while they die
// (MCP servers leak by the hundreds otherwise).
//
// # What it kills
//
// Only lineage.Process values the MembersFunc returned, and only while they
// are provably those processes. For each member End opens a pidfd
// (pidfd_open), then reads the process through package procfs (one read
// through a handle on /proc/PID: stat, status, cmdline, exe) and requires
// its start time to equal the member's lineage ID start at clock-tick
// precision (lineage.TickNS, 10ms). A process procfs reports gone (a
// zombie: its exit already happened) is recorded "exited-before-signal"; a
// thread-group leader that exited while other threads run is alive, as
// procfs says, and signalling it ends them all. The open pidfd pins the process — its PID cannot be
// recycled while the pidfd is held and the process has not been reaped —
// so a match proves the pidfd refers to the member, and every signal goes
// through that pidfd (pidfd_send_signal), after the start time is checked
// once more. There is no fallback to kill(2) by PID, ever.
//
// PolicyGraceful (default) sends SIGTERM to every live member at once,
// watches the pidfds (a pidfd polls readable when its process exits) until
// Config.Grace has passed since End started, then sends SIGKILL to the
// rest; members found after the grace get SIGKILL at once. Members born
// during the grace (started after End began: a SIGTERM handler's
// cleanup) get no SIGTERM: they run until the grace ends, then SIGKILL.
// PolicyImmediate sends SIGKILL at once.
//
// The sweep calls the MembersFunc again every Config.SweepInterval and
// signals members it has not seen yet (children forked during the kill).
// It ends when two calls one interval apart find no new member and no
// tracked member alive: "dead" means the pidfd reported exit or
// pidfd_open said ESRCH, not that the graph has seen the exit event yet,
// which arrives asynchronously. Report.Empty is then true. After
// Config.SweepTimeout (or when ctx is done) it gives up: members still
// alive are Report.Survivors, recorded "failed: still alive, …" and
// logged at error.
//
// With a Doomer (the sensor's BPF map), the members of a SIGKILL batch are
// doomed right before any of them is sent SIGKILL, and never earlier:
// under the graceful policy a member may fork or exec in its SIGTERM
// handler. The kernel kills a doomed process that forks or execs, and
// children inherit doom, so the race between SIGKILL and a fork is closed
// in the kernel; the sweep is the safety net that works without it. When
// End returns it undooms the members it saw die (the kernel deletes
// entries on exit, so this is only a safety net) and leaves survivors
// doomed: they are still members. Doom applies only to processes that
// would be signalled, never to spared or refused ones, and never in audit
// mode. An End interrupted by its context (the agent stopping) dooms its
// live members before it returns: no agent will be there when the grace
// ends, and the kernel holds them until one resumes the ending. New
// hands the spare rules to the Doomer (ExecSparer) so that a doomed
// process exec'ing a program a rule may protect leaves doom alive instead
// of being killed; a Doomer that cannot take them is not used when spare
// rules exist.
//
// Before every signal a target is judged again as it is now: a spare
// rule may match a program it exec'd since (the graph's latest image or
// /proc), or its uids may be out of the owner's reach; it is then spared
// (and undoomed). The judgement and the signal are two steps: an exec
// between them (microseconds) is still signalled.
//
// # What it never kills
//
// Refused, with the reason in the record ("refused: <why>"):
//   - PID 0 and PID 1;
//   - kernel threads: Process.Kernel, PF_KTHREAD in /proc/PID/stat, or no
//     /proc/PID/exe and parent kthreadd — checked on the pinned process;
//   - the agent itself, any of its threads, and its ancestors (as they
//     were when New ran, by identity);
//   - a member whose start time is unknown (0) or later than now;
//   - a member whose PID now belongs to another process (identity
//     mismatch: the PID was reused) — that process is left alone;
//   - anything the MembersFunc did not return.
//
// Spared ("spared"): members matching a Config.Spare rule (a procmatch
// rule read with procmatch.All: every field it sets must match), against
// what the graph says and what /proc says; either matching spares. A rule
// spares that process only, not its subtree.
//
// Spared across a privilege boundary ("spared: privilege boundary: <uids>",
// Report.SparedPrivilege, Stats.SparedPrivilege, also counted as spared):
// when Ending.Owner is not root and Config.CrossUID is off, members the
// owner could not signal itself by kill(2)'s rule — the owner is neither
// the member's real nor its saved set-user-ID, as /proc/PID/status says
// at admission and before every signal (a sudo, a setuid helper, another
// user's process). They are never doomed. Root-owned sessions end members
// of every uid.
//
// A member that has exited before it could be signalled is recorded
// "exited-before-signal"; a member the graph already marks Exited is not
// recorded at all.
//
// # What it deliberately does not do
//
//   - It does not decide membership: the MembersFunc does. It does not walk
//     /proc itself or follow process groups, sessions or cgroups.
//   - It does not kill by PID, process group (kill(-pgid)) or cgroup.
//   - It does not retry a refusal, and never escalates a refusal to a kill.
//   - Audit mode (ModeAudit) does one pass: every check, no doom, no
//     signal; it records "would-kill" with the first signal enforce would
//     send, for exactly the live members enforce would signal.
//   - An invalid Config does not fail New: the enforcer runs in audit mode
//     and logs the error (Config.Validate reports it up front).
//   - It never logs or records a raw argv: records hold redact.Argv output
//     and logs render it with redact.String.
//
// # Time and identity
//
// End's endedAt is CLOCK_BOOTTIME ns (the clock of lineage event times; 0
// means now). KillRecord.Latency runs from it to the moment the death was
// observed. Identities are compared at tick precision: a PID reused within
// the same 10ms tick as the member's start cannot be told apart by /proc,
// which needs the PID space to wrap (pid_max) within that tick.
//
// PIDs are read in the agent's PID namespace, which must be the initial one
// (the one lineage IDs come from); New warns when it is not, and the
// identity check refuses what does not match.
//
// # On Windows
//
// End (enforcer_windows.go) opens every member through package winproc
// as a handle whose create time must match the member's identity at tick
// precision; the held handle keeps the PID from naming another process,
// and TerminateProcess goes through it (Signal "TerminateProcess"), never
// through a PID. Windows has no SIGTERM for a console program: under
// PolicyGraceful members get the grace to exit on their own (an MCP
// server exits when its stdin closes), then are terminated. Spare rules
// match the graph's image and the live image path and command line.
// A session owned by a non-root owner spares members whose token has
// another owner number (Config.Owner: package owners). There is no doom and no Sync; containers are recorded failed.
//
// On other systems Supported returns ErrUnsupported and End records every
// live member as failed.
package enforcer
