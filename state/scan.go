package state

import (
	"encoding/binary"
	"fmt"

	"github.com/mcptrace/mcptrace/lineage"
)

// Scan is a read of every process (from the kernel's task iterator or
// /proc) as the graph took it in: Seed at a first start, Repair after a
// restore or a loss. Journaled where it was applied, it lets a replay
// take it in at the same place among the events: the events after it
// descend from processes only the scan knew.
type Scan struct {
	ReadAt    uint64 // when the read began (CLOCK_BOOTTIME ns), as Seed and Repair take it
	Repair    bool   // Graph.Repair, not Graph.Seed
	Snapshots []lineage.Snapshot
}

// The Scan encoding, version 1:
//
//	u8       format version (1)
//	u8       flags: bit 0 Repair; others 0
//	uvarint  ReadAt
//	uvarint  n, then n snapshots:
//	  u8       flags: bit 0 Kernel, bit 1 Argv is not nil, bit 2 Stdio is
//	           not zero, bit 3 a PPID; others 0
//	  uvarint  ID.PID, uvarint ID.Start
//	           when bit 3: uvarint PPID
//	  uvarint  UID
//	  string   Comm
//	  string   Filename
//	           when bit 1: uvarint argc, then argc strings
//	           when bit 2: u8 Stdio.In, u8 Stdio.Out
//
// Strings as in the event encoding. Nothing may follow the last snapshot.

// ScanFormat is the version byte AppendScan writes.
const ScanFormat = 1

const (
	scanRepair     = 1
	scanFlagsKnown = scanRepair
)

const (
	snapKernel = 1 << iota
	snapArgv
	snapStdio
	snapPPID
	snapFlagsKnown = snapKernel | snapArgv | snapStdio | snapPPID
)

// AppendScan appends the encoding of s to b. It is deterministic, and
// DecodeScan returns a Scan reflect.DeepEqual to s (nil and empty Argv
// kept apart; no snapshots comes back as nil).
func AppendScan(b []byte, s Scan) []byte {
	var flags byte
	if s.Repair {
		flags |= scanRepair
	}
	b = append(b, ScanFormat, flags)
	b = binary.AppendUvarint(b, s.ReadAt)
	b = binary.AppendUvarint(b, uint64(len(s.Snapshots)))
	for i := range s.Snapshots {
		p := &s.Snapshots[i]
		var f byte
		if p.Kernel {
			f |= snapKernel
		}
		if p.Argv != nil {
			f |= snapArgv
		}
		if p.Stdio != (lineage.Stdio{}) {
			f |= snapStdio
		}
		if p.PPID != 0 {
			f |= snapPPID
		}
		b = append(b, f)
		b = appendID(b, p.ID)
		if p.PPID != 0 {
			b = binary.AppendUvarint(b, uint64(p.PPID))
		}
		b = binary.AppendUvarint(b, uint64(p.UID))
		b = appendString(b, p.Comm)
		b = appendString(b, p.Filename)
		if p.Argv != nil {
			b = appendArgv(b, p.Argv)
		}
		if f&snapStdio != 0 {
			b = append(b, byte(p.Stdio.In), byte(p.Stdio.Out))
		}
	}
	return b
}

// DecodeScan decodes what AppendScan encoded. Anything else is an error
// wrapping ErrBadEvent (the journal's records share one sentinel); it
// never panics and allocates at most a small multiple of len(b) whatever
// the counts in b say.
func DecodeScan(b []byte) (Scan, error) {
	d := decoder{b: b}
	version, flags := d.byte(), d.byte()
	if d.err != nil {
		return Scan{}, d.err
	}
	if version != ScanFormat {
		return Scan{}, fmt.Errorf("%w: scan format version %d (this agent reads %d)", ErrBadEvent, version, ScanFormat)
	}
	if flags&^scanFlagsKnown != 0 {
		return Scan{}, fmt.Errorf("%w: unknown scan flags %#x", ErrBadEvent, flags)
	}
	s := Scan{Repair: flags&scanRepair != 0, ReadAt: d.uvarint()}
	n := d.uvarint()
	// A snapshot takes at least six bytes (flags, PID, start, UID and two
	// string lengths).
	if d.err == nil && n > uint64(len(d.b))/6 {
		d.fail("%d snapshots in %d bytes", n, len(d.b))
	}
	if d.err == nil && n > 0 {
		s.Snapshots = make([]lineage.Snapshot, n)
	}
	for i := range s.Snapshots {
		if d.err != nil {
			break
		}
		p := &s.Snapshots[i]
		f := d.byte()
		if f&^snapFlagsKnown != 0 {
			d.fail("snapshot %d: unknown flags %#x", i, f)
			break
		}
		p.Kernel = f&snapKernel != 0
		p.ID = d.id()
		if f&snapPPID != 0 {
			if p.PPID = d.uint32(); p.PPID == 0 && d.err == nil {
				d.fail("snapshot %d: PPID flag with PPID 0", i)
			}
		}
		p.UID = d.uint32()
		p.Comm = d.string()
		p.Filename = d.string()
		if f&snapArgv != 0 {
			p.Argv = d.argv()
		}
		if f&snapStdio != 0 {
			p.Stdio = d.stdio()
		}
	}
	if d.err == nil && len(d.b) != 0 {
		d.fail("%d trailing bytes", len(d.b))
	}
	if d.err != nil {
		return Scan{}, d.err
	}
	return s, nil
}
