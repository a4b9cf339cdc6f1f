// Package sensor is the Linux kernel side of the data path: it loads and
// attaches the programs of package bpf, reads their ring buffer and decodes
// each record into a platform-neutral lineage.Event.
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
// # What it does not do
//
// The sensor does not know about graphs, sessions or metrics: it turns
// kernel records into events and counts what the kernel could not send. It
// keeps no state of its own on disk; what it pins lives in the kernel and
// is gone after a reboot, as are the processes it describes.
package sensor
