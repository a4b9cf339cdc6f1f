// Package agent runs the node agent: it opens the kernel sensor, seeds the
// lineage graph from /proc while the sensor already buffers events (so no
// fork between the scan and the attach is missed), applies every event to
// the graph and the session tracker, hands ended sessions and generations
// to the enforcer, repairs the graph from /proc whenever the kernel reports
// lost events (retrying a repair that fails until it succeeds), retires
// dead branches, and serves the API.
//
// # Restarts
//
// Nothing is forgotten when the agent stops, crashes or is upgraded:
//   - the kernel side keeps running, pinned (sensor.Options.PinDir): events
//     queue in the ring buffer and doomed processes keep dying, and the
//     next agent takes the programs over without a window;
//   - the agent's memory (the graph with its exited wrappers and argv, the
//     sessions with their generations and markers, endings under way,
//     reports and kill records, counters) is kept in Options.StateDir: a
//     checkpoint, then a journal of every input applied since, written
//     before the kernel may reuse an event's space (package state). A
//     SIGKILL at any moment loses nothing: what was not journaled is still
//     in the ring buffer.
//
// Start-up order (Run): load the checkpoint and replay the journal; attach
// and take over the previous programs; apply events, the previous ring's
// first; check the graph against /proc; wait until the graph caught up
// with the kernel (Sync); end the sessions whose roots died meanwhile;
// resume the endings that were under way; serve.
//
// cmd/mcptrace only turns configuration into Options and calls Run.
//
// # What it does not do
//
// The agent keeps no state across a reboot (processes do not survive one
// either): its state directory and pins live on tmpfs and bpffs. It does
// not remove its pinned programs when it stops; `mcptrace uninstall`
// does.
package agent
