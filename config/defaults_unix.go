//go:build !windows

package config

import "github.com/mcptrace/mcptrace/safefile"

// DefaultFile is read when Load is given no file, if it exists.
const DefaultFile = "/etc/mcptrace/config.yaml"

// readTrusted reads a configuration file through what root or the
// caller owns alone (safefile): the agent runs as root, and what it
// reads decides what it ends, so a file, a directory or a symbolic link
// of another user on the path is refused, naming it.
func readTrusted(path string) ([]byte, error) {
	f, err := safefile.Open(path, safefile.Read)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return f.Data, nil
}
