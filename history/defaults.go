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
	// when the writer is idle: the most a crash can take.
	DefaultFlushInterval = 200 * time.Millisecond
)

// FileName is the store's file in Options.Dir.
const FileName = "history.db"
