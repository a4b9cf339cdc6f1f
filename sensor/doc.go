// Package sensor is the kernel side of the data path. On Linux it loads
// and attaches the programs of package bpf, reads their ring buffer and
// decodes each record into a platform-neutral lineage.Event; on Windows it
// consumes an ETW session instead (see "Windows" below), behind the same
// API. Elsewhere Open fails with ErrNotSupported.
//
// A Sensor is owned by one goroutine that calls ReadBatch and Commit (or
// Read); Counters, Lost, Recovered, DoomKills, Doom, Undoom, Barrier and
// Close may be called from any goroutine. Errors from Open name the kernel
// feature or the privilege that is missing (see FeatureError).
//
// # Surviving the agent
//
// With Options.PinDir the kernel side outlives the process that loaded it.
// Each Open creates a pin set, PinDir/set-<N>-<layout>: its maps (the ring
// buffer, the loss and recovery counters, the doomed map and its kill
// counters) and the links of its programs are pinned on bpffs, and Close
// only drops the agent's descriptors. While no agent runs, the programs
// keep reporting into the ring buffer (up to its size; beyond it they count
// losses) and keep killing doomed processes that fork or exec.
//
// The next Open of the same PinDir takes over: it attaches its own
// programs first, then detaches the previous sets' programs, so every
// event is reported by one set or by both (a duplicate, which the lineage
// graph absorbs), never by none. It copies the doomed processes that still
// run into its own map, and ReadBatch returns what the previous sets'
// ring buffers still hold, oldest set first, before its own records. A
// drained set is watched for late records (an RCU grace period, then
// settleDelay), its final counters are kept (Counters), and its pins are
// removed. This is also how a new build replaces an old one: nothing
// depends on the two builds' programs being the same. A previous set whose
// records have another layout (recordLayout) cannot be decoded: its unread
// records are dropped and counted (Counters.Discarded), and the caller
// repairs from /proc as after any loss.
//
// Records stay in the kernel's buffer until Commit, so a reader that dies
// between ReadBatch and Commit leaves them to the next agent. Uninstall
// removes every set: use it when mcptrace is removed from the node.
//
// # Every process at once
//
// Tasks (tasks_linux.go) reads every live process from the kernel's task
// iterator (bpf/tasks.bpf.c, Linux 5.18+) for the agent's seed and
// repair: the same lineage.Snapshot procfs.Read gives, in one pass
// instead of a dozen system calls a process. It is loaded once, read
// when asked, and attached to nothing. A kernel that cannot load it gets
// a FeatureError, and the caller reads /proc (package procfs).
//
// # Windows
//
// On Windows (sensor_windows.go) Open starts a real-time ETW session of
// the Microsoft-Windows-Kernel-Process provider (package etw), takes a
// process snapshot once it is enabled so that the creators of processes
// started later are known (etw.Translator.Seed), and consumes the session
// in the background. Each ProcessStart becomes a fork and an exec, each
// ProcessStop an exit, with identities that survive PID reuse. The
// started process is read at once through a handle checked against its
// create time (etw.ReadStarted, as etw.Feed does): its command line goes
// into the exec, and the owner its token maps to (Options.Owner, which
// Open requires) into both events. One that is gone or denies access
// reads as a truncated command line and owners.Unknown, never as another
// process.
//
// The callback never waits for the agent: events go into a queue of
// 65,536 events, and a start or stop that does not fit is dropped and
// counted in Counters.Lost, per kind, as are payloads that did not decode
// (also reported in Batch.Undecodable). The session's own losses
// (ControlTrace: events the logger had no buffer for, buffers lost on the
// way to the consumer), polled every second, are counted in
// Counters.Discarded, events of unknown kind. Either makes the agent
// repair its graph from a snapshot. The counters are named after the Open
// ("etw-<ns>"): a new session counts from zero.
//
// ETW delivers in real time only as its buffers are handed over: a buffer
// that does not fill waits up to the session's FlushTimer (1 s) before the
// consumer sees it. A process has been logged by the time it started or
// stopped (Windows logs it as the process is created or exits), but its
// event may reach the sensor up to about a second later, and no call asks
// ETW whether the consumer has seen everything logged before a given
// moment. So Barrier places its marker 1.5 s after it is
// asked (the flush period and half again for the delivery), behind every
// event queued by then and behind the event the callback has in hand:
// its promise holds for events ETW delivers within that time. A consumer
// that ETW holds back longer (a machine too loaded to run it) may get an
// event after the marker; the agent then applies it after the barrier,
// and what ETW drops meanwhile is counted as above.
//
// Nothing survives the agent: Close stops the session (what was queued
// and not read is dropped), Commit does nothing, and the next Open starts
// a new session, replacing one an agent that died left behind; the agent
// learns what it missed from a snapshot. Nothing is pinned (Uninstall has
// nothing to remove). The kernel kills nothing: Doom, Undoom and
// SpareExecs fail, as the enforcer ends processes through handles, and
// DoomKills is zero. No container requests are read (SetEngineSockets and
// RequestsErr say container attribution is not available). Open needs an
// elevated process (Preflight): the Kernel-Process provider, and reading
// other users' processes, require it. Only one Sensor runs per process.
//
// # What it does not do
//
// The sensor does not know about graphs, sessions or metrics: it turns
// kernel records into events and counts what the kernel could not send. It
// keeps no state of its own on disk; what it pins lives in the kernel and
// is gone after a reboot, as are the processes it describes.
package sensor
