package agent

// OptionsOf is the options a (with their defaults) runs with, for tests
// that start a second agent beside it.
func OptionsOf(a *Agent) Options { return a.opts }

// HoldSeedCheckpoint holds the checkpoint after the start-up's process
// read of an agent run with o until release is closed: a crash before it
// is written is then a copy of the state directory.
func HoldSeedCheckpoint(o *Options, release <-chan struct{}) { o.holdSeedCheckpoint = release }
