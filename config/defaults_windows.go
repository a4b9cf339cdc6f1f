package config

import (
	"os"

	"github.com/mcptrace/mcptrace/windows/winsec"
)

// DefaultFile is read when Load is given no file, if it exists: under
// ProgramData, made by an administrator (a path such as /etc/… would be
// read from the current drive, where any user may create it).
const DefaultFile = `C:\ProgramData\mcptrace\config.yaml`

// checkTrusted refuses a configuration file that anyone but SYSTEM,
// Administrators or the caller's own user could change (winsec): the
// agent runs as SYSTEM, and what it reads decides what it ends.
func checkTrusted(path string) error { return winsec.CheckPath(path) }

// readTrusted reads a configuration file checkTrusted accepts.
func readTrusted(path string) ([]byte, error) {
	if err := checkTrusted(path); err != nil {
		return nil, err
	}
	return os.ReadFile(path)
}
