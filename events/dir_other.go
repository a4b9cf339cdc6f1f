//go:build !linux

package events

import (
	"os"
	"path/filepath"
)

// exportDir is the export file's directory, by path: on systems other
// than Linux the agent's own directories are made for its account alone
// (state.dir's rules), and the export's is the operator's choice.
type exportDir struct{ path string }

func openExportDir(path string) (exportDir, error) {
	return exportDir{path}, os.MkdirAll(path, 0o700)
}

func (d exportDir) create(name string) (*os.File, error) {
	return os.OpenFile(filepath.Join(d.path, name), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
}

func (d exportDir) rename(from, to string) error {
	return os.Rename(filepath.Join(d.path, from), filepath.Join(d.path, to))
}

func (d exportDir) remove(name string) error { return os.Remove(filepath.Join(d.path, name)) }

func (d exportDir) close() {}
