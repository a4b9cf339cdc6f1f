package state

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"strconv"
	"strings"
	"time"
)

// The on-disk layouts. doc.go describes them for people; this file is the
// one definition.

const (
	// FormatVersion is the version of the checkpoint and segment layouts this
	// package writes and the newest it reads.
	FormatVersion = 1

	// MaxRecord is the largest Record.Data Append accepts. Open treats a
	// record length field above it as corruption, so no length read from
	// disk can make it allocate or scan more.
	MaxRecord = 16 << 20

	// MaxBootID is the longest boot id (in bytes) a header can carry.
	MaxBootID = 64

	checkpointName  = "checkpoint"
	checkpointMagic = "MCPTRACE-STATE"
	walPrefix       = "wal-"
	walMagic        = "MCPTRACE-WAL"
	tmpSuffix       = ".tmp"

	// seqDigits is the width of the sequence number in a segment's name.
	seqDigits = 16
	// maxSeq is the largest sequence number a segment name can carry.
	maxSeq = 9_999_999_999_999_999

	// recordHeaderSize is [u32 length][u32 crc][u8 kind].
	recordHeaderSize = 9

	// checkpointFixed is the checkpoint header without the boot id and the
	// header checksum: magic, version, first segment, payload length,
	// payload checksum, boot id length.
	checkpointFixed = len(checkpointMagic) + 2 + 8 + 8 + 4 + 1
	// walFixed is the segment header without the boot id and the header
	// checksum: magic, version, sequence, boot id length.
	walFixed = len(walMagic) + 2 + 8 + 1

	// keepGenerations is how many moves aside (one timestamp each) are kept
	// as evidence; older moved-aside files are deleted.
	keepGenerations = 4

	// timeLayout names moved-aside files; it sorts by time as text.
	timeLayout = "20060102T150405.000000000Z"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func checksum(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

// Reasons a file is moved aside: the suffix of its new name,
// <name>.<reason>-<UTC timestamp>.
const (
	reasonCorrupt      = "corrupt"       // failed a check: magic, length, checksum, numbering
	reasonOtherBoot    = "other-boot"    // intact but written before the last reboot
	reasonNewerFormat  = "newer-format"  // written by a newer agent in a format this one cannot read
	reasonNoCheckpoint = "no-checkpoint" // WAL segments with no checkpoint to apply them to
	reasonUnreplayed   = "unreplayed"    // intact segments after a gap or after corruption
	reasonDiscarded    = "discarded"     // the caller could not use what Open loaded (Discard)
)

var reasons = []string{reasonCorrupt, reasonOtherBoot, reasonNewerFormat, reasonNoCheckpoint, reasonUnreplayed, reasonDiscarded}

// fault is why a file cannot be used: the reason names the moved-aside file,
// what explains it to a person.
type fault struct {
	reason string
	what   string
}

func corrupt(format string, args ...any) *fault {
	return &fault{reasonCorrupt, fmt.Sprintf(format, args...)}
}

// segmentName is the file name of WAL segment seq.
func segmentName(seq uint64) string {
	return fmt.Sprintf("%s%0*d", walPrefix, seqDigits, seq)
}

// parseSegmentName returns the sequence number of a segment's file name.
func parseSegmentName(name string) (uint64, bool) {
	digits, ok := strings.CutPrefix(name, walPrefix)
	if !ok || len(digits) != seqDigits {
		return 0, false
	}
	for _, c := range digits {
		if c < '0' || c > '9' {
			return 0, false
		}
	}
	seq, err := strconv.ParseUint(digits, 10, 64)
	return seq, err == nil
}

// asideName is the name a file gets when it is moved aside.
func asideName(name, reason string, at time.Time) string {
	return name + "." + reason + "-" + at.UTC().Format(timeLayout)
}

// parseAsideName returns the timestamp part of a moved-aside file's name:
// all files moved by one Open or Discard share it (one generation).
func parseAsideName(name string) (stamp string, ok bool) {
	base, rest, ok := strings.Cut(name, ".")
	if !ok {
		return "", false
	}
	if _, isSeg := parseSegmentName(base); base != checkpointName && !isSeg {
		return "", false
	}
	for _, r := range reasons {
		if s, ok := strings.CutPrefix(rest, r+"-"); ok {
			// A name taken twice within one timestamp gets "-2", "-3"...
			if len(s) < len(timeLayout) {
				return "", false
			}
			stamp, n := s[:len(timeLayout)], s[len(timeLayout):]
			if _, err := time.Parse(timeLayout, stamp); err != nil {
				return "", false
			}
			if n != "" {
				digits, ok := strings.CutPrefix(n, "-")
				if _, err := strconv.ParseUint(digits, 10, 32); !ok || err != nil {
					return "", false
				}
			}
			return stamp, true
		}
	}
	return "", false
}

// appendCheckpoint appends a checkpoint header for payload to b:
//
//	off   size  field
//	0     14    magic "MCPTRACE-STATE"
//	14    2     format version (1)
//	16    8     first WAL segment the checkpoint does not cover
//	24    8     payload length
//	32    4     CRC32C of the payload
//	36    1     boot id length n (1..64)
//	37    n     boot id
//	37+n  4     CRC32C of bytes [0, 37+n)
//	41+n  ...   payload
//
// length and sum are the payload's length and checksum: the payload may
// be written after its header's place (Store.WriteCheckpointFrom).
func appendCheckpointHeader(b []byte, bootID string, first, length uint64, sum uint32) []byte {
	start := len(b)
	b = append(b, checkpointMagic...)
	b = binary.LittleEndian.AppendUint16(b, FormatVersion)
	b = binary.LittleEndian.AppendUint64(b, first)
	b = binary.LittleEndian.AppendUint64(b, length)
	b = binary.LittleEndian.AppendUint32(b, sum)
	b = append(b, byte(len(bootID)))
	b = append(b, bootID...)
	return binary.LittleEndian.AppendUint32(b, checksum(b[start:]))
}

// parseCheckpoint checks a whole checkpoint file written for bootID and
// returns the first segment it does not cover and its payload (a sub-slice
// of b). Integrity is checked before the boot id, so "other boot" means an
// intact checkpoint from another boot.
func parseCheckpoint(b []byte, bootID string) (first uint64, payload []byte, f *fault) {
	if len(b) < len(checkpointMagic)+2 {
		return 0, nil, corrupt("checkpoint corrupt: %d bytes, shorter than its header", len(b))
	}
	if string(b[:len(checkpointMagic)]) != checkpointMagic {
		return 0, nil, corrupt("checkpoint corrupt: bad magic %q", b[:len(checkpointMagic)])
	}
	switch v := binary.LittleEndian.Uint16(b[len(checkpointMagic):]); {
	case v == 0:
		return 0, nil, corrupt("checkpoint corrupt: format version 0")
	case v > FormatVersion:
		return 0, nil, &fault{reasonNewerFormat, fmt.Sprintf("checkpoint written in a newer format (version %d, this agent reads up to %d)", v, FormatVersion)}
	}
	if len(b) < checkpointFixed {
		return 0, nil, corrupt("checkpoint corrupt: %d bytes, shorter than its header", len(b))
	}
	n := int(b[checkpointFixed-1])
	hlen := checkpointFixed + n + 4
	if len(b) < hlen {
		return 0, nil, corrupt("checkpoint corrupt: %d bytes, shorter than its header", len(b))
	}
	if want, got := binary.LittleEndian.Uint32(b[hlen-4:]), checksum(b[:hlen-4]); want != got {
		return 0, nil, corrupt("checkpoint corrupt: header checksum mismatch (stored %08x, computed %08x)", want, got)
	}
	first = binary.LittleEndian.Uint64(b[16:])
	length := binary.LittleEndian.Uint64(b[24:])
	sum := binary.LittleEndian.Uint32(b[32:])
	boot := string(b[checkpointFixed : checkpointFixed+n])
	if first == 0 || first > maxSeq {
		return 0, nil, corrupt("checkpoint corrupt: first segment %d out of range", first)
	}
	if n == 0 || n > MaxBootID {
		return 0, nil, corrupt("checkpoint corrupt: boot id of %d bytes", n)
	}
	if rest := uint64(len(b) - hlen); length != rest {
		return 0, nil, corrupt("checkpoint corrupt: payload length mismatch (header says %d bytes, file holds %d)", length, rest)
	}
	payload = b[hlen:]
	if got := checksum(payload); got != sum {
		return 0, nil, corrupt("checkpoint corrupt: payload checksum mismatch (stored %08x, computed %08x)", sum, got)
	}
	if boot != bootID {
		return 0, nil, &fault{reasonOtherBoot, fmt.Sprintf("checkpoint from another boot (boot id %q, this boot %q)", boot, bootID)}
	}
	return first, payload, nil
}

// appendSegmentHeader appends the header of WAL segment seq to b:
//
//	off   size  field
//	0     12    magic "MCPTRACE-WAL"
//	12    2     format version (1)
//	14    8     sequence number (the one in the file name)
//	22    1     boot id length n (1..64)
//	23    n     boot id
//	23+n  4     CRC32C of bytes [0, 23+n)
func appendSegmentHeader(b []byte, bootID string, seq uint64) []byte {
	start := len(b)
	b = append(b, walMagic...)
	b = binary.LittleEndian.AppendUint16(b, FormatVersion)
	b = binary.LittleEndian.AppendUint64(b, seq)
	b = append(b, byte(len(bootID)))
	b = append(b, bootID...)
	return binary.LittleEndian.AppendUint32(b, checksum(b[start:]))
}

// parseSegmentHeader checks the header of segment seq and returns its size.
func parseSegmentHeader(b []byte, bootID string, seq uint64) (int, *fault) {
	short := func() (int, *fault) {
		return 0, corrupt("WAL segment corrupt: %d bytes, shorter than its header", len(b))
	}
	if len(b) < len(walMagic)+2 {
		return short()
	}
	if string(b[:len(walMagic)]) != walMagic {
		return 0, corrupt("WAL segment corrupt: bad magic %q", b[:len(walMagic)])
	}
	switch v := binary.LittleEndian.Uint16(b[len(walMagic):]); {
	case v == 0:
		return 0, corrupt("WAL segment corrupt: format version 0")
	case v > FormatVersion:
		return 0, &fault{reasonNewerFormat, fmt.Sprintf("WAL segment written in a newer format (version %d, this agent reads up to %d)", v, FormatVersion)}
	}
	if len(b) < walFixed {
		return short()
	}
	n := int(b[walFixed-1])
	hlen := walFixed + n + 4
	if len(b) < hlen {
		return short()
	}
	if want, got := binary.LittleEndian.Uint32(b[hlen-4:]), checksum(b[:hlen-4]); want != got {
		return 0, corrupt("WAL segment corrupt: header checksum mismatch (stored %08x, computed %08x)", want, got)
	}
	if s := binary.LittleEndian.Uint64(b[14:]); s != seq {
		return 0, corrupt("WAL segment corrupt: header says sequence %d, file name says %d", s, seq)
	}
	if boot := string(b[walFixed : walFixed+n]); boot != bootID {
		return 0, &fault{reasonOtherBoot, fmt.Sprintf("WAL segment from another boot (boot id %q, this boot %q)", boot, bootID)}
	}
	return hlen, nil
}

// appendRecord appends one framed record to b:
//
//	off  size  field
//	0    4     length of data (0..MaxRecord)
//	4    4     CRC32C of kind and data
//	8    1     kind (never 0)
//	9    ...   data
func appendRecord(b []byte, r Record) []byte {
	b = binary.LittleEndian.AppendUint32(b, uint32(len(r.Data)))
	at := len(b)
	b = append(b, 0, 0, 0, 0, byte(r.Kind))
	b = append(b, r.Data...)
	binary.LittleEndian.PutUint32(b[at:], checksum(b[at+4:]))
	return b
}

// frameAt reports whether a whole valid record starts at b[0] and, if so,
// its size. why says what is wrong otherwise; incomplete says the record
// runs past the end of b (a torn write looks like this).
func frameAt(b []byte) (size int, why string, incomplete bool) {
	if len(b) < recordHeaderSize {
		return 0, fmt.Sprintf("%d bytes left, less than a record header", len(b)), true
	}
	n := binary.LittleEndian.Uint32(b)
	if n > MaxRecord {
		return 0, fmt.Sprintf("length %d exceeds the %d-byte limit", n, MaxRecord), false
	}
	size = recordHeaderSize + int(n)
	if size > len(b) {
		return 0, fmt.Sprintf("length %d runs past the end of the file", n), true
	}
	if want, got := binary.LittleEndian.Uint32(b[4:]), checksum(b[8:size]); want != got {
		return 0, fmt.Sprintf("checksum mismatch (stored %08x, computed %08x)", want, got), false
	}
	if b[8] == 0 {
		return 0, "kind 0", false
	}
	return size, "", false
}

// scanBudget bounds the bytes validFrameAfter checksums, so a crafted tail
// cannot make Open quadratic.
const scanBudget = 4 * MaxRecord

// validFrameAfter reports whether a valid record starts anywhere in b, or
// (ok false) that it could not tell within scanBudget.
func validFrameAfter(b []byte) (found, ok bool) {
	budget := scanBudget
	for q := 0; q+recordHeaderSize <= len(b); q++ {
		n := binary.LittleEndian.Uint32(b[q:])
		if n > MaxRecord || recordHeaderSize+int(n) > len(b)-q || b[q+8] == 0 {
			continue
		}
		if budget -= 1 + int(n); budget < 0 {
			return false, false
		}
		if _, why, _ := frameAt(b[q:]); why == "" {
			return true, true
		}
	}
	return false, true
}

// tail is how the records of a segment end.
type tail struct {
	good int    // bytes of whole valid records (after the header)
	torn bool   // the rest is an incomplete last record: cut it
	bad  string // the rest is corruption: why (empty when clean or torn)
}

// parseRecords reads the records in b (a segment after its header). In the
// last segment, an invalid record that nothing valid follows is a torn
// tail; anywhere else an invalid record is corruption.
//
// base is the file offset of b, for messages.
func parseRecords(b []byte, base int, last bool, recs []Record) ([]Record, tail) {
	p := 0
	for p < len(b) {
		size, why, incomplete := frameAt(b[p:])
		if why != "" {
			atEnd := incomplete
			if !incomplete {
				if n := binary.LittleEndian.Uint32(b[p:]); n <= MaxRecord {
					atEnd = p+recordHeaderSize+int(n) == len(b)
				}
			}
			if last && atEnd {
				found, ok := validFrameAfter(b[p+1:])
				switch {
				case found:
					why += "; valid records follow it"
				case !ok:
					why += "; cannot tell whether valid records follow it"
				default:
					return recs, tail{good: p, torn: true}
				}
			}
			return recs, tail{good: p, bad: fmt.Sprintf("offset %d: %s", base+p, why)}
		}
		recs = append(recs, Record{Kind: Kind(b[p+8]), Data: b[p+recordHeaderSize : p+size : p+size]})
		p += size
	}
	return recs, tail{good: p}
}
