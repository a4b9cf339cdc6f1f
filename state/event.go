package state

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/mcptrace/mcptrace/lineage"
)

// The lineage.Event encoding, version 1:
//
//	u8       format version (1)
//	u8       Kind
//	u8       flags: bit 0 ArgvTruncated, bit 1 Argv is not nil, bit 2
//	         Request is not empty, bit 3 Groups is not empty, bit 4
//	         Stdio is not zero; others 0
//	uvarint  Time
//	uvarint  Proc.PID, uvarint Proc.Start
//	uvarint  Creator.PID, uvarint Creator.Start
//	uvarint  Parent.PID, uvarint Parent.Start
//	uvarint  UID
//	uvarint  CgroupID
//	string   Comm
//	string   Filename
//	         when flag bit 1: uvarint argc, then argc strings
//	varint   ExitCode (zigzag)
//	varint   Signal (zigzag)
//	         when flag bit 2: string Request
//	         when flag bit 3: uvarint n (at least 1), then n uvarint Groups
//	         when flag bit 4: u8 Stdio.In, u8 Stdio.Out
//
// A string is a uvarint byte length and the bytes, kept as they are (no
// UTF-8 check: comm and argv are whatever the kernel saw). Nothing may
// follow the last field. A later version changes the first byte.

// EventFormat is the version byte AppendEvent writes.
const EventFormat = 1

const (
	flagArgvTruncated = 1 << iota
	flagArgv
	flagRequest
	flagGroups
	flagStdio
	flagsKnown = flagArgvTruncated | flagArgv | flagRequest | flagGroups | flagStdio
)

// maxGroups is the most groups an event carries: the kernel's
// NGROUPS_MAX, and one more for the effective gid.
const maxGroups = 65536 + 1

// ErrBadEvent is wrapped by every DecodeEvent error.
var ErrBadEvent = errors.New("state: malformed event")

// AppendEvent appends the encoding of ev to b. The encoding is
// deterministic, and DecodeEvent returns an Event reflect.DeepEqual to ev,
// nil and empty Argv included (empty Groups come back nil).
func AppendEvent(b []byte, ev lineage.Event) []byte {
	var flags byte
	if ev.ArgvTruncated {
		flags |= flagArgvTruncated
	}
	if ev.Argv != nil {
		flags |= flagArgv
	}
	if ev.Request != "" {
		flags |= flagRequest
	}
	if len(ev.Groups) > 0 {
		flags |= flagGroups
	}
	if ev.Stdio != (lineage.Stdio{}) {
		flags |= flagStdio
	}
	b = append(b, EventFormat, byte(ev.Kind), flags)
	b = binary.AppendUvarint(b, ev.Time)
	b = appendID(b, ev.Proc)
	b = appendID(b, ev.Creator)
	b = appendID(b, ev.Parent)
	b = binary.AppendUvarint(b, uint64(ev.UID))
	b = binary.AppendUvarint(b, ev.CgroupID)
	b = appendString(b, ev.Comm)
	b = appendString(b, ev.Filename)
	if ev.Argv != nil {
		b = appendArgv(b, ev.Argv)
	}
	b = binary.AppendVarint(b, int64(ev.ExitCode))
	b = binary.AppendVarint(b, int64(ev.Signal))
	if ev.Request != "" {
		b = appendString(b, ev.Request)
	}
	if len(ev.Groups) > 0 {
		b = binary.AppendUvarint(b, uint64(len(ev.Groups)))
		for _, g := range ev.Groups {
			b = binary.AppendUvarint(b, uint64(g))
		}
	}
	if flags&flagStdio != 0 {
		b = append(b, byte(ev.Stdio.In), byte(ev.Stdio.Out))
	}
	return b
}

func appendID(b []byte, id lineage.ID) []byte {
	b = binary.AppendUvarint(b, uint64(id.PID))
	return binary.AppendUvarint(b, id.Start)
}

// appendArgv appends a uvarint count, then each string (decoder.argv).
func appendArgv(b []byte, argv []string) []byte {
	b = binary.AppendUvarint(b, uint64(len(argv)))
	for _, a := range argv {
		b = appendString(b, a)
	}
	return b
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// DecodeEvent decodes what AppendEvent encoded. Anything else (truncated,
// trailing bytes, an unknown version or flag, a value out of range) is an
// error wrapping ErrBadEvent; it never panics, and it allocates at most
// about len(b) bytes whatever the counts in b say. The strings of the
// result share one allocation.
func DecodeEvent(b []byte) (lineage.Event, error) {
	d := decoder{b: b}
	var ev lineage.Event
	version, kind, flags := d.byte(), d.byte(), d.byte()
	if d.err != nil {
		return lineage.Event{}, d.err
	}
	if version != EventFormat {
		return lineage.Event{}, fmt.Errorf("%w: format version %d (this agent reads %d)", ErrBadEvent, version, EventFormat)
	}
	if flags&^flagsKnown != 0 {
		return lineage.Event{}, fmt.Errorf("%w: unknown flags %#x", ErrBadEvent, flags)
	}
	ev.Kind = lineage.EventKind(kind)
	ev.ArgvTruncated = flags&flagArgvTruncated != 0
	ev.Time = d.uvarint()
	ev.Proc = d.id()
	ev.Creator = d.id()
	ev.Parent = d.id()
	ev.UID = d.uint32()
	ev.CgroupID = d.uvarint()
	ev.Comm = d.string()
	ev.Filename = d.string()
	if flags&flagArgv != 0 {
		ev.Argv = d.argv()
	}
	ev.ExitCode = d.int()
	ev.Signal = d.int()
	if flags&flagRequest != 0 {
		if ev.Request = d.string(); ev.Request == "" && d.err == nil {
			d.fail("request flag set with an empty request")
		}
	}
	if flags&flagGroups != 0 {
		n := d.uvarint()
		// Every group takes at least one byte.
		switch {
		case d.err != nil:
		case n == 0 || n > maxGroups || n > uint64(len(d.b)):
			d.fail("group count %d (%d bytes left)", n, len(d.b))
		default:
			ev.Groups = make([]uint32, n)
			for i := range ev.Groups {
				ev.Groups[i] = d.uint32()
			}
		}
	}
	if flags&flagStdio != 0 {
		ev.Stdio = d.stdio()
	}
	if d.err == nil && len(d.b) != 0 {
		d.fail("%d trailing bytes", len(d.b))
	}
	if d.err != nil {
		return lineage.Event{}, d.err
	}
	return ev, nil
}

// decoder reads fields from b; after the first error every read returns
// zero and err stays the first error.
type decoder struct {
	b   []byte
	err error
	// strs holds the bytes of all strings not read yet, converted once on
	// the first non-empty string; each string read is a substring of it.
	strs string
	// strOff is where b[0] is in strs.
	strOff int
}

func (d *decoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: %s", ErrBadEvent, fmt.Sprintf(format, args...))
	}
	d.b = nil
}

func (d *decoder) byte() byte {
	if d.err != nil {
		return 0
	}
	if len(d.b) == 0 {
		d.fail("truncated")
		return 0
	}
	c := d.b[0]
	d.advance(1)
	return c
}

func (d *decoder) advance(n int) {
	d.b = d.b[n:]
	if d.strs != "" {
		d.strOff += n
	}
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail("truncated or overlong varint")
		return 0
	}
	d.advance(n)
	return v
}

func (d *decoder) int() int {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail("truncated or overlong varint")
		return 0
	}
	if v < math.MinInt || v > math.MaxInt {
		d.fail("%d does not fit an int", v)
		return 0
	}
	d.advance(n)
	return int(v)
}

func (d *decoder) uint32() uint32 {
	v := d.uvarint()
	if v > math.MaxUint32 {
		d.fail("%d does not fit 32 bits", v)
		return 0
	}
	return uint32(v)
}

// argv reads a uvarint count, then that many strings.
func (d *decoder) argv() []string {
	n := d.uvarint()
	if d.err != nil {
		return nil
	}
	// Every argument takes at least its length byte.
	if n > uint64(len(d.b)) {
		d.fail("argv count %d exceeds the %d bytes left", n, len(d.b))
		return nil
	}
	argv := make([]string, n)
	for i := range argv {
		argv[i] = d.string()
	}
	return argv
}

// stdio reads the two bytes of a Stdio that is not zero.
func (d *decoder) stdio() lineage.Stdio {
	s := lineage.Stdio{In: lineage.FileKind(d.byte()), Out: lineage.FileKind(d.byte())}
	if d.err == nil && (s == (lineage.Stdio{}) || s.In > lineage.FileOther || s.Out > lineage.FileOther) {
		d.fail("stdio %d/%d out of range", s.In, s.Out)
	}
	return s
}

func (d *decoder) id() lineage.ID {
	return lineage.ID{PID: d.uint32(), Start: d.uvarint()}
}

func (d *decoder) string() string {
	n := d.uvarint()
	if d.err != nil || n == 0 {
		return ""
	}
	if n > uint64(len(d.b)) {
		d.fail("string of %d bytes, %d left", n, len(d.b))
		return ""
	}
	if d.strs == "" {
		d.strs, d.strOff = string(d.b), 0
	}
	s := d.strs[d.strOff : d.strOff+int(n)]
	d.advance(int(n))
	return s
}
