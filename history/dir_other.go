//go:build !linux

package history

// checkDir: who may write the history directory elsewhere is settled
// where it is made (the agent's secureDir on Windows).
func checkDir(string) error { return nil }
