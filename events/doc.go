// Package events is the agent's stream of what happened on the node, one
// JSON object per event: sessions beginning and ending, destroy markers,
// the execs of session members, kills, containers started and stopped,
// orphans found and ended, and kernel losses. `mcptrace events` follows
// it through the API; an export file (export.file) hands it to a log
// pipeline (Fluent Bit, Vector, Loki, a SIEM), rotated at a size bound.
//
// A Hub fans each published event out to its followers. Publishing never
// blocks and costs one atomic load when nobody follows (Hub.On): the
// agent calls it from its event path, which every fork on the node runs
// through. Each follower has a bounded queue; an event that does not fit
// is dropped for that follower alone and counted, and the follower reads
// a Dropped event with the count before the next one it gets. Followers
// are bounded per uid and in all. The Hub keeps the last events other
// than member execs (a bounded backlog per audience uid) for `mcptrace
// events` without --follow.
//
// What it does not do: it decides nothing about who may see an event
// (the API narrows each event to its caller with the rules of its other
// answers, and a follower's accept function says what it may receive);
// it does not read the graph or the sessions (the agent builds events);
// it keeps nothing across a restart (the export file and the history
// do). Argv is redacted before any event leaves the package (Event.Redact,
// done by the follower's reader, off the agent's path).
package events
