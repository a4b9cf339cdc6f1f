//go:build !linux

package sensor

import (
	"errors"

	"github.com/mcptrace/mcptrace/lineage"
)

// ErrNotSupported: the eBPF sensor runs on Linux only (Windows uses windows/etw).
var ErrNotSupported = errors.New("the eBPF sensor is not supported on this OS")

type Options struct{}

type Sensor struct{}

func Open(Options) (*Sensor, error)                              { return nil, ErrNotSupported }
func (*Sensor) Read() (lineage.Event, error)                     { return lineage.Event{}, ErrNotSupported }
func (*Sensor) Lost() (map[lineage.EventKind]uint64, error)      { return nil, ErrNotSupported }
func (*Sensor) Recovered() (map[lineage.EventKind]uint64, error) { return nil, ErrNotSupported }
func (*Sensor) Close() error                                     { return nil }

// Uninstall has nothing to remove on this OS.
func Uninstall(pinDir string) (int, error) { return 0, ErrNotSupported }

// Preflight reports that the sensor does not run on this OS.
func Preflight() error { return ErrNotSupported }
