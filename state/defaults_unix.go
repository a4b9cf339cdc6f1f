//go:build !windows

package state

// DefaultDir is on tmpfs: the state is for restarts of the agent, not of
// the machine (a reboot ends every process anyway).
const DefaultDir = "/run/mcptrace/state"
