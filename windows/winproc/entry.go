package winproc

import (
	"path"
	"strings"

	"github.com/mcptrace/mcptrace/lineage"
	"github.com/mcptrace/mcptrace/windows/owners"
)

// Entry is one process of a snapshot.
type Entry struct {
	PID, PPID uint32
	// Create is the process's create time, a FILETIME; 0 when it could
	// not be read (the process exited, or access was denied).
	Create uint64
	// Image is the executable's file name as the snapshot gives it.
	Image string
	// Path is the executable's full path; empty when it could not be read.
	Path string
	// Argv is the command line split as CommandLineToArgvW does.
	// ArgvTruncated says it was cut, or could not be read (Argv nil), as
	// lineage.Event.ArgvTruncated does on Linux.
	Argv          []string
	ArgvTruncated bool
	// Token is what decides the process's owner (package owners);
	// TokenOK is false when its token could not be read.
	Token   owners.Token
	TokenOK bool
}

// OwnerOf is the owner of e on a table's terms: owner(e.Token), or
// owners.Unknown when its token could not be read or there is no owner
// function: a process is never root's by default.
func OwnerOf(e Entry, owner func(owners.Token) uint32) uint32 {
	if !e.TokenOK || owner == nil {
		return owners.Unknown
	}
	return owner(e.Token)
}

// Snapshots turns snapshot entries into lineage snapshots on clock, each
// with its owner (OwnerOf). An
// entry whose create time is unknown is left out: it cannot be named. A
// parent PID is kept only when the snapshot holds that process and it was
// created no later than the child: Windows keeps a process's parent PID
// after the parent exits, and the PID may since name another process.
func Snapshots(entries []Entry, clock Clock, owner func(owners.Token) uint32) []lineage.Snapshot {
	created := make(map[uint32]uint64, len(entries))
	for _, e := range entries {
		if e.Create != 0 {
			created[e.PID] = e.Create
		}
	}
	out := make([]lineage.Snapshot, 0, len(entries))
	for _, e := range entries {
		if e.Create == 0 || e.PID == 0 {
			continue
		}
		ppid := e.PPID
		if pc, ok := created[ppid]; !ok || pc > e.Create || ppid == e.PID {
			ppid = 0
		}
		file := e.Path
		if file == "" {
			file = e.Image
		}
		out = append(out, lineage.Snapshot{
			ID:       lineage.ID{PID: e.PID, Start: clock.Since(e.Create)},
			PPID:     ppid,
			UID:      OwnerOf(e, owner),
			Comm:     ImageBase(e.Image),
			Filename: file,
			Argv:     e.Argv,
		})
	}
	return out
}

// ImageBase is the file name of an NT or Win32 path, as comm is on Linux.
func ImageBase(p string) string {
	return path.Base(strings.ReplaceAll(p, `\`, "/"))
}
