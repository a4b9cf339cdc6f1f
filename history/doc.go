// Package history is the node's journal of what happened, kept on disk
// for forensics after the fact: every kernel process event (birth, exec
// with its argv redacted, exit), the sessions with their members, kills
// and containers as the agent last saw them, and notes of what the
// journal itself lost.
//
// Events are appended to segment files (segments.go, in Options.Dir/
// events), in chunks encoded as they are queued (records.go): each batch
// is one writev and one fdatasync, by one goroutine off the agent's hot
// path, and each chunk a frame with its checksum, the batch's last
// marked. Sessions and notes are in an embedded bbolt store (one file,
// history.db), a transaction per batch. A crash at any moment loses at
// most the batch being written: Open cuts each segment after its last
// whole batch, and says so in a note. A bbolt store that cannot be
// opened is moved aside (history.db.corrupt-TIME), said once in the log,
// and a new one is started: the agent runs on.
//
// Each event carries its time on the wall clock, its PID and its kind.
// The wall time is the boot-clock time plus this boot's epoch, fixed
// the first time a boot is seen and kept in the store, so the same
// event always has the same key: writing it again (the agent replays
// its state journal after a restart and hands the events here once
// more) stores a copy that reads never return, and events the journal
// had queued when the agent was killed are repaired that way.
//
// The store is bounded by age (Options.MaxAge) and size
// (Options.MaxBytes), shared by uid (retention.go): each uid's events
// are a stream of segments of their own (streams.go), and when the store
// is full the uid that holds the most loses its oldest records, events a
// segment at a time: one user's churn removes only their own. The
// queue in front of
// the writer is bounded too (Options.MaxQueue); what does not fit is
// counted (Stats.Dropped) and noted in the store, never blocked on.
//
// What it does not do: decide who may read what (package api narrows
// every answer to the caller), interpret session details (they are
// stored as the agent hands them), or redact (the agent hands it argv
// already redacted; see agent.stateArgv).
package history
