package agent

// OptionsOf is the options a (with their defaults) runs with, for tests
// that start a second agent beside it.
func OptionsOf(a *Agent) Options { return a.opts }
