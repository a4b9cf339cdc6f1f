package history

import "time"

// Defaults of the history journal (history.*), exposed by package config.
const (
	// DefaultMaxAge is how long records are kept.
	DefaultMaxAge = 7 * 24 * time.Hour
	// DefaultMaxBytes bounds the store's file.
	DefaultMaxBytes = 256 << 20
	// DefaultMaxQueue bounds the bytes of records waiting for the writer.
	DefaultMaxQueue = 64 << 20
	// DefaultFlushInterval is the longest an event waits to be written
	// when nothing asks for it sooner (a checkpoint, a session record,
	// wakeQueue bytes queued): what a crash takes from the queue, and what
	// the agent's state replay hands in again. A batch of events is one
	// fdatasync (a bbolt transaction, when it carries session records or
	// notes, two more); on this project's machines they cost an exec
	// storm beside them nothing measurable
	// (docs/benchmarks.md, "The history's price"), and batches 1 s and
	// 5 s apart cost the same within noise.
	DefaultFlushInterval = 5 * time.Second
)

// wakeQueue is how many bytes of records wake the writer before its
// interval: under a burst the queue, and the agent's memory, stay small
// (the whole queue, up to MaxQueue, is what a burst the disk cannot keep
// up with may hold).
const wakeQueue = 1 << 20

// FileName is the store's file in Options.Dir.
const FileName = "history.db"
