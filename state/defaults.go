package state

import "time"

// Defaults of the agent's durable state (state.*), exposed by package
// config.
const (
	// DefaultDir is on tmpfs: the state is for restarts of the agent, not
	// of the machine (a reboot ends every process anyway).
	DefaultDir = "/run/mcptrace/state"
	// DefaultCheckpointInterval is how often the whole state is written
	// and the journal started anew.
	DefaultCheckpointInterval = 30 * time.Second
)
