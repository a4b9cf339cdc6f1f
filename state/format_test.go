package state

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestSegmentNamesRoundTrip(t *testing.T) {
	for _, seq := range []uint64{1, 42, maxSeq} {
		name := segmentName(seq)
		if len(name) != len(walPrefix)+seqDigits {
			t.Fatalf("%s: width %d", name, len(name))
		}
		if got, ok := parseSegmentName(name); !ok || got != seq {
			t.Fatalf("parseSegmentName(%s) = %d, %v", name, got, ok)
		}
	}
	for _, name := range []string{"wal-1", "wal-00000000000000001", "wal-000000000000000x", "wal-+000000000000001", "xal-0000000000000001",
		"wal-0000000000000001.tmp", "wal-0000000000000001.corrupt-20260101T000000.000000000Z"} {
		if _, ok := parseSegmentName(name); ok {
			t.Errorf("parseSegmentName accepted %q", name)
		}
	}
}

func TestMovedAsideNamesRoundTrip(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 6, time.FixedZone("x", 3600))
	for _, name := range []string{checkpointName, segmentName(7)} {
		for _, r := range reasons {
			a := asideName(name, r, at)
			stamp, ok := parseAsideName(a)
			if !ok || stamp != "20260102T020405.000000006Z" {
				t.Fatalf("parseAsideName(%s) = %q, %v", a, stamp, ok)
			}
			if _, ok := parseAsideName(a + "-2"); !ok {
				t.Fatalf("parseAsideName rejects a renumbered %s", a)
			}
		}
	}
	for _, name := range []string{"checkpoint", "checkpoint.tmp", "checkpoint.corrupt-", "checkpoint.corrupt-2026",
		"checkpoint.bogus-20260102T020405.000000006Z", "other.corrupt-20260102T020405.000000006Z",
		"checkpoint.corrupt-20260102T020405.000000006Z-", "checkpoint.corrupt-20260102T020405.000000006Zx"} {
		if _, ok := parseAsideName(name); ok {
			t.Errorf("parseAsideName accepted %q", name)
		}
	}
}

func TestRecordFraming(t *testing.T) {
	b := appendRecord(nil, Record{Kind: 3, Data: []byte("abc")})
	want := []byte{3, 0, 0, 0, 0, 0, 0, 0, 3, 'a', 'b', 'c'}
	copy(want[4:8], b[4:8]) // the checksum, checked next
	if !bytes.Equal(b, want) {
		t.Fatalf("framed as %x", b)
	}
	if got := checksum([]byte{3, 'a', 'b', 'c'}); got != uint32(b[4])|uint32(b[5])<<8|uint32(b[6])<<16|uint32(b[7])<<24 {
		t.Fatalf("checksum does not cover kind and data")
	}
	if size, why, _ := frameAt(b); size != len(b) || why != "" {
		t.Fatalf("frameAt = %d, %q", size, why)
	}
}

// TestTornTailNeedsNothingValidAfterIt: an invalid record at the end of the
// last segment is torn only if no valid record starts after it; a crafted
// tail that would take too long to search is corruption, not torn.
func TestTornTailNeedsNothingValidAfterIt(t *testing.T) {
	good := appendRecord(nil, Record{Kind: 1, Data: []byte("good")})
	tests := []struct {
		name string
		b    []byte
		torn bool
		bad  string
	}{
		{"incomplete header", append(bytes.Clone(good), 5, 0, 0), true, ""},
		{"incomplete data", append(bytes.Clone(good), good[:len(good)-1]...), true, ""},
		{"length runs past the end over a valid record", append(append(bytes.Clone(good), 0xff, 0, 0, 0, 1, 2, 3, 4, 1), good...), false, "valid records follow it"},
		{"bad checksum at the very end", append(bytes.Clone(good), append(good[:4:4], 0, 0, 0, 0, 1, 'g', 'o', 'o', 'd')...), true, ""},
		{"bad checksum with bytes after", append(append(bytes.Clone(good), append(good[:4:4], 0, 0, 0, 0, 1, 'g', 'o', 'o', 'd')...), 0), false, "checksum mismatch"},
		{"length above the limit", append(bytes.Clone(good), 0, 0, 0, 0x10, 0, 0, 0, 0, 1), false, "exceeds"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			recs, tl := parseRecords(tt.b, 0, true, nil)
			if len(recs) != 1 || tl.good != len(good) || tl.torn != tt.torn || !strings.Contains(tl.bad, tt.bad) || (tl.bad == "") != tt.torn {
				t.Fatalf("%d records, tail %+v", len(recs), tl)
			}
			// In a segment that is not the last, any of it is corruption.
			if _, tl := parseRecords(tt.b, 0, false, nil); tl.torn || tl.bad == "" {
				t.Fatalf("not last: tail %+v", tl)
			}
		})
	}

	// Every 9 bytes a record of 1 MiB that fits and has a kind: checking
	// them all would checksum about 150 GiB.
	crafted := bytes.Repeat([]byte{0, 0, 0x10, 0, 1, 2, 3, 4, 1}, 1<<18)
	if found, ok := validFrameAfter(crafted); found || ok {
		t.Fatalf("validFrameAfter = %v, %v; want it to give up", found, ok)
	}
	// A last record of MaxRecord bytes that runs past the end, over it.
	_, tl := parseRecords(append(bytes.Clone(good), append([]byte{0, 0, 0, 1}, crafted...)...), 0, true, nil)
	if tl.torn || !strings.Contains(tl.bad, "cannot tell") {
		t.Fatalf("tail %+v", tl)
	}
}
