//go:build !linux && !windows

package sensor

import (
	"errors"

	"github.com/cilium/ebpf/btf"

	"github.com/mcptrace/mcptrace/lineage"
)

// ErrNotSupported: the sensor runs on Linux (eBPF) and Windows (ETW) only.
var ErrNotSupported = errors.New("the sensor is not supported on this OS (it runs on Linux and Windows)")

// Sensor is the sensor's API on a system it does not run on: Open
// fails, so none of its methods is ever reached; they exist so that the
// code written against the API builds everywhere.
type Sensor struct{}

// Tasks: the kernel's task iterator is Linux's.
type Tasks struct{}

func OpenTasks(string, *btf.Cache) (*Tasks, error)    { return nil, ErrNotSupported }
func (*Tasks) Scan() ([]lineage.Snapshot, int, error) { return nil, 0, ErrNotSupported }
func (*Tasks) Close() error                           { return nil }

func Open(Options) (*Sensor, error)                              { return nil, ErrNotSupported }
func (*Sensor) ReadBatch(int) (Batch, error)                     { return Batch{}, ErrNotSupported }
func (*Sensor) Commit()                                          {}
func (*Sensor) Read() (lineage.Event, error)                     { return lineage.Event{}, ErrNotSupported }
func (*Sensor) Barrier(uint64) error                             { return ErrNotSupported }
func (*Sensor) Counters() ([]Counters, error)                    { return nil, ErrNotSupported }
func (*Sensor) Lost() (map[lineage.EventKind]uint64, error)      { return nil, ErrNotSupported }
func (*Sensor) Recovered() (map[lineage.EventKind]uint64, error) { return nil, ErrNotSupported }
func (*Sensor) Doom(lineage.ID) error                            { return ErrNotSupported }
func (*Sensor) Undoom(lineage.ID) error                          { return ErrNotSupported }
func (*Sensor) SpareExecs([]string, bool) error                  { return ErrNotSupported }
func (*Sensor) DoomKills() (DoomKills, error)                    { return DoomKills{}, ErrNotSupported }
func (*Sensor) KillsChildrenAtFork() bool                        { return false }
func (*Sensor) MapUsage() ([]MapUsage, error)                    { return nil, ErrNotSupported }
func (*Sensor) SetEngineSockets([]string) error                  { return ErrNotSupported }
func (*Sensor) RequestsDropped() uint64                          { return 0 }
func (*Sensor) RequestsErr() error                               { return ErrNotSupported }
func (*Sensor) RequestDrops() (node, overUID uint64, err error)  { return 0, 0, ErrNotSupported }
func (*Sensor) Withdraw() (bool, error)                          { return true, nil }
func (*Sensor) Close() error                                     { return nil }

// Uninstall has nothing to remove on this OS.
func Uninstall(pinDir string) (int, error) { return 0, ErrNotSupported }

// Preflight reports that the sensor does not run on this OS.
func Preflight() error { return ErrNotSupported }
