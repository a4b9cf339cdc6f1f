//go:build !linux

package api

const (
	startByHand = "mcptrace agent in an elevated prompt (or mcptrace service install)"
	stopByHand  = "Ctrl-C where mcptrace agent runs"
)

// DetectInstall is how this process (the agent) was started: by hand;
// the Windows service says so itself (Install{Kind: InstallService}).
func DetectInstall() Install { return Install{Kind: InstallManual} }

// WriteInstall keeps no note outside Linux.
func WriteInstall(string, Install) error { return nil }

// ReadInstall is by hand outside Linux, where no note is kept.
func ReadInstall(string) Install { return Install{Kind: InstallManual} }
