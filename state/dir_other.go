//go:build !linux && !windows

package state

import (
	"errors"
	"runtime"
)

var errUnsupported = errors.New("state: not supported on " + runtime.GOOS)

// dir is the state directory; only Linux has one.
type dir struct{ path string }

type entry struct {
	name    string
	regular bool
}

type file struct{}

func openDir(string) (*dir, error)              { return nil, errUnsupported }
func (*dir) close() error                       { return errUnsupported }
func (*dir) list() ([]entry, error)             { return nil, errUnsupported }
func (*dir) readFile(string) ([]byte, error)    { return nil, errUnsupported }
func (*dir) size(string) (int64, error)         { return 0, errUnsupported }
func (*dir) exists(string) (bool, error)        { return false, errUnsupported }
func (*dir) create(string, bool) (*file, error) { return nil, errUnsupported }
func (*dir) rename(string, string) error        { return errUnsupported }
func (*dir) remove(string) error                { return errUnsupported }
func (*dir) truncate(string, int64) error       { return errUnsupported }
func (*dir) sync() error                        { return errUnsupported }
func (*file) writeAt([]byte, int64) error       { return errUnsupported }
func (*file) truncate(int64) error              { return errUnsupported }
func (*file) sync() error                       { return errUnsupported }
func (*file) close() error                      { return errUnsupported }
