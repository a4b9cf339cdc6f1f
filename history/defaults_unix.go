//go:build !windows

package history

// DefaultDir is on disk, not tmpfs: the history is for after a reboot
// too.
const DefaultDir = "/var/lib/mcptrace/history"
