package history

import "time"

// Defaults of the history journal (history.*), exposed by package config.
const (
	// DefaultDir is on disk, not tmpfs: the history is for after a
	// reboot too.
	DefaultDir = "/var/lib/mcptrace/history"
	// DefaultMaxAge is how long records are kept.
	DefaultMaxAge = 7 * 24 * time.Hour
	// DefaultMaxBytes bounds the store's file.
	DefaultMaxBytes = 256 << 20
	// DefaultMaxQueue bounds the bytes of records waiting for the writer.
	DefaultMaxQueue = 64 << 20
	// DefaultFlushInterval is the longest a record waits to be written
	// when nothing asks for it sooner (a checkpoint, a full eighth of
	// the queue): what a crash takes from the queue, and what the agent's
	// state replay hands in again. Longer batches rewrite the last,
	// partly filled pages of the store less often.
	DefaultFlushInterval = time.Second
)

// FileName is the store's file in Options.Dir.
const FileName = "history.db"
