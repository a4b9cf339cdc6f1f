package state

import "time"

// Defaults of the agent's durable state (state.*), exposed by package
// config.
const (
	// DefaultCheckpointInterval is how often the whole state is written
	// and the journal started anew.
	DefaultCheckpointInterval = 30 * time.Second
)
