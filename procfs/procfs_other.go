//go:build !linux

package procfs

import (
	"errors"
	"runtime"

	"github.com/mcptrace/mcptrace/lineage"
)

var errUnsupported = errors.New("procfs: not supported on " + runtime.GOOS)

// Scan is not supported on this OS.
func Scan(root string) ([]lineage.Snapshot, error) { return nil, errUnsupported }

// Read is not supported on this OS.
func Read(root string, pid uint32) (lineage.Snapshot, error) {
	return lineage.Snapshot{}, errUnsupported
}

// Threads is not supported on this OS.
func Threads(root string, pid uint32) ([]uint32, error) { return nil, errUnsupported }

// ReadCreds is not supported on this OS.
func ReadCreds(root string, pid uint32) (lineage.Snapshot, UIDs, error) {
	return lineage.Snapshot{}, UIDs{}, errUnsupported
}

// UIDs are a process's user IDs (real, effective, saved, file system).
type UIDs struct {
	Real, Effective, Saved, FS uint32
}

// ReadUIDs is not supported on this OS.
func ReadUIDs(root string, pid uint32) (UIDs, error) { return UIDs{}, errUnsupported }

// Usage is what a process has used so far (see the Linux version).
type Usage struct{ RSSBytes, CPUTicks, IOBytes uint64 }

// CPUSeconds is CPUTicks in seconds.
func (u Usage) CPUSeconds() float64 { return float64(u.CPUTicks*lineage.TickNS) / 1e9 }

// UsageReader is not supported on this OS.
type UsageReader struct{ Root string }

// Read is not supported on this OS.
func (u *UsageReader) Read(id lineage.ID) (Usage, error) { return Usage{}, errUnsupported }

// ReadFacts is not supported on this OS.
func ReadFacts(root string, id lineage.ID) (Facts, error) { return Facts{}, errUnsupported }

// ReadStdio is not supported on this OS.
func ReadStdio(root string, id lineage.ID) (Stdio, error) { return Stdio{}, errUnsupported }

// HoldsPipes is not supported on this OS.
func HoldsPipes(root string, id lineage.ID, pipes ...uint64) (bool, error) {
	return false, errUnsupported
}

// StdinCutOff is not supported on this OS.
func StdinCutOff(root string, id lineage.ID) (bool, error) { return false, errUnsupported }

// ReadStat is not supported on this OS.
func ReadStat(root string, pid uint32) (Stat, error) { return Stat{}, errUnsupported }

// ReadGroups is not supported on this OS.
func ReadGroups(root string, id lineage.ID) ([]uint32, error) { return nil, errUnsupported }
