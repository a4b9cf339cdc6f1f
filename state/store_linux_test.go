package state

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/mcptrace/mcptrace/internal/testenv"
)

func TestOpenFirstStartIsEmpty(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run", "state")
	s, ld := open(t, dir)
	if ld.Checkpoint != nil || len(ld.Records) != 0 {
		t.Fatalf("first start loaded %+v", ld)
	}
	clean(t, ld)
	fi, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if perm := fi.Mode().Perm(); perm != 0o700 {
		t.Fatalf("created with mode %o, want 0700", perm)
	}
	// The parent it created stays searchable: the agent's socket lives
	// beside the state (/run/mcptrace), and other users must reach it.
	if fi, err := os.Stat(filepath.Dir(dir)); err != nil || fi.Mode().Perm() != 0o755 {
		t.Fatalf("parent created with mode %v (%v), want 0755", fi.Mode().Perm(), err)
	}
	if got := files(t, dir); len(got) != 0 {
		t.Fatalf("Open created %v before any write", got)
	}
	if n, err := s.Size(); err != nil || n != 0 {
		t.Fatalf("Size = %d, %v", n, err)
	}
}

func TestAppendReopenReturnsRecordsInOrderAcrossCheckpoints(t *testing.T) {
	dir := t.TempDir()
	s, ld := open(t, dir)
	clean(t, ld)
	var (
		payload []byte
		since   []Record // appended since the last checkpoint's Cut
		next    int
	)
	for cycle := range 6 {
		// Some records, a Cut, more records while the checkpoint is
		// written (they belong to the WAL after it), then a reopen.
		n := 1 + cycle*7
		mustAppend(t, s, recs(next, next+n)...)
		next += n
		if cycle%2 == 0 {
			for range 3 { // single-record appends too
				mustAppend(t, s, rec(next))
				next++
			}
		}
		c := s.Cut()
		since = nil
		after := recs(next, next+cycle)
		for _, r := range after {
			mustAppend(t, s, r)
		}
		next += cycle
		since = append(since, after...)
		payload = fmt.Appendf(nil, `{"cycle":%d,"next":%d}`, cycle, next-cycle)
		if err := s.WriteCheckpoint(c, payload); err != nil {
			t.Fatal(err)
		}
		if cycle%3 == 2 { // a Cut without checkpoint keeps both segments
			s.Cut()
			mustAppend(t, s, rec(next))
			since = append(since, rec(next))
			next++
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		s, ld = open(t, dir)
		clean(t, ld)
		if !bytes.Equal(ld.Checkpoint, payload) {
			t.Fatalf("cycle %d: checkpoint %q, want %q", cycle, ld.Checkpoint, payload)
		}
		checkRecords(t, ld.Records, since)
		// Segments the checkpoint covers are gone.
		for _, seg := range segments(t, dir) {
			if seq, _ := parseSegmentName(seg); seq < c.seq {
				t.Fatalf("cycle %d: %s survived a checkpoint at %d", cycle, seg, c.seq)
			}
		}
	}
}

func TestCheckpointPayloadRoundTrip(t *testing.T) {
	big := make([]byte, 3<<20)
	rand.NewChaCha8([32]byte{1}).Read(big)
	tests := []struct {
		name    string
		payload []byte
	}{
		{"empty", []byte{}},
		{"one byte", []byte{0}},
		{"json", []byte(`{"graph":{"nodes":[]},"sessions":{}}`)},
		{"3 MiB random", big},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			s, _ := open(t, dir)
			mustCheckpoint(t, s, tt.payload)
			s.Close()
			_, ld := open(t, dir)
			clean(t, ld)
			if ld.Checkpoint == nil || !bytes.Equal(ld.Checkpoint, tt.payload) {
				t.Fatalf("payload of %d bytes came back as %d bytes (nil %v)", len(tt.payload), len(ld.Checkpoint), ld.Checkpoint == nil)
			}
		})
	}
}

// TestCheckpointWrittenAsItIsMade: a payload written in pieces of
// every size, across the buffer's boundary, comes back whole; a write
// that fails leaves the checkpoint before it, and its error is the one
// returned.
func TestCheckpointWrittenAsItIsMade(t *testing.T) {
	big := make([]byte, 3*checkpointBuffer+7)
	rand.NewChaCha8([32]byte{2}).Read(big)
	dir := t.TempDir()
	s, _ := open(t, dir)
	err := s.WriteCheckpointFrom(s.Cut(), func(w io.Writer) error {
		for rest, n := big, 1; len(rest) > 0; n = n*3 + 1 {
			k := min(n, len(rest))
			if _, err := w.Write(rest[:k]); err != nil {
				return err
			}
			rest = rest[k:]
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	mustAppend(t, s, rec(1))
	failed := errors.New("the encoder failed")
	err = s.WriteCheckpointFrom(s.Cut(), func(w io.Writer) error {
		w.Write(big[:2*checkpointBuffer]) // written out, then abandoned
		return failed
	})
	if err != failed {
		t.Fatalf("a write that failed returned %v, want its own error", err)
	}
	for _, e := range files(t, dir) {
		if strings.HasSuffix(e, tmpSuffix) {
			t.Fatalf("the failed write left %s", e)
		}
	}
	s.Close()
	_, ld := open(t, dir)
	clean(t, ld)
	if !bytes.Equal(ld.Checkpoint, big) {
		t.Fatalf("payload of %d bytes came back as %d bytes", len(big), len(ld.Checkpoint))
	}
	checkRecords(t, ld.Records, []Record{rec(1)})
}

func TestCutWithNothingAppendedIsTheSameCut(t *testing.T) {
	dir := t.TempDir()
	s, _ := open(t, dir)
	c1, c2 := s.Cut(), s.Cut()
	if c1 != c2 {
		t.Fatalf("two Cuts with nothing between: %v, %v", c1, c2)
	}
	mustAppend(t, s, rec(0))
	c3, c4 := s.Cut(), s.Cut()
	if c3 == c2 || c3 != c4 {
		t.Fatalf("Cut after an Append: %v then %v, before %v", c3, c4, c2)
	}
	if got := segments(t, dir); len(got) != 1 {
		t.Fatalf("segments %v, want exactly the one appended to", got)
	}
	if err := s.WriteCheckpoint(c1, nil); err != nil {
		t.Fatal(err)
	}
	if err := s.WriteCheckpoint(c4, nil); err != nil {
		t.Fatal(err)
	}
	if got := segments(t, dir); len(got) != 0 {
		t.Fatalf("segments %v after a checkpoint covering everything", got)
	}
}

// prepare writes a checkpoint and then appends batches in one segment;
// it returns the dir and the segment's path.
func prepare(t *testing.T, batches ...[]Record) (string, string) {
	t.Helper()
	dir := t.TempDir()
	s, _ := open(t, dir)
	mustCheckpoint(t, s, []byte("ck"))
	for _, b := range batches {
		mustAppend(t, s, b...)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	segs := segments(t, dir)
	if len(segs) != 1 {
		t.Fatalf("segments %v", segs)
	}
	return dir, join(dir, segs[0])
}

func TestTornTailIsCutAndCounted(t *testing.T) {
	// The last Append wrote three records; a kill can cut it anywhere.
	before, last := recs(0, 5), recs(5, 8)
	dir0, seg0 := prepare(t, before, last)
	full := readFile(t, seg0)
	offs := recordOffsets(t, full)
	start := offs[len(before)] // where the torn Append begins
	for cut := start; cut < len(full); cut++ {
		t.Run(fmt.Sprintf("cut at %d of %d", cut, len(full)), func(t *testing.T) {
			dir := t.TempDir()
			for _, n := range files(t, dir0) {
				writeFile(t, join(dir, n), readFile(t, join(dir0, n)))
			}
			seg := join(dir, filepath.Base(seg0))
			if err := os.Truncate(seg, int64(cut)); err != nil {
				t.Fatal(err)
			}
			// Whole records of the torn Append survive; a partial one is cut.
			kept := 0
			for kept < len(last) && cut >= offs[len(before)+kept]+recordHeaderSize+len(last[kept].Data) {
				kept++
			}
			torn := 0
			if cut != start && (kept == len(last) || cut != offs[len(before)+kept]) {
				torn = 1
			}
			s, ld := open(t, dir)
			if len(ld.Problems) != 0 || ld.Torn != torn {
				t.Fatalf("problems %+v, torn %d; want none, torn %d", ld.Problems, ld.Torn, torn)
			}
			want := append(slices.Clone(before), last[:kept]...)
			checkRecords(t, ld.Records, want)
			if fi, _ := os.Stat(seg); torn == 1 && int(fi.Size()) == cut {
				t.Fatal("torn tail not truncated")
			}
			mustAppend(t, s, rec(100), rec(101))
			s.Close()
			_, ld = open(t, dir)
			clean(t, ld)
			checkRecords(t, ld.Records, append(want, rec(100), rec(101)))
		})
	}
}

func TestCorruptMiddleRecordIsMovedAside(t *testing.T) {
	all := recs(0, 6)
	dir0, seg0 := prepare(t, all[:2], all[2:3], all[3:])
	full := readFile(t, seg0)
	offs := recordOffsets(t, full)
	from, to := offs[2], offs[3] // flip every byte of record 2
	for at := from; at < to; at++ {
		t.Run(fmt.Sprintf("byte %d", at), func(t *testing.T) {
			dir := t.TempDir()
			for _, n := range files(t, dir0) {
				writeFile(t, join(dir, n), readFile(t, join(dir0, n)))
			}
			seg := join(dir, filepath.Base(seg0))
			bad := slices.Clone(full)
			bad[at] ^= 0x10
			writeFile(t, seg, bad)

			s, ld := open(t, dir)
			problemWith(t, ld, 1, "corrupt WAL record at offset")
			p := ld.Problems[0]
			if p.File != seg || !strings.Contains(p.MovedTo, ".corrupt-") {
				t.Fatalf("problem %+v", p)
			}
			if ld.Torn != 0 {
				t.Fatalf("corruption counted as torn")
			}
			checkRecords(t, ld.Records, all[:2])
			if got := readFile(t, p.MovedTo); !bytes.Equal(got, bad[from:]) {
				t.Fatalf("moved aside %d bytes, want the %d from the bad record on", len(got), len(bad)-from)
			}
			if got := readFile(t, seg); !bytes.Equal(got, full[:from]) {
				t.Fatalf("segment kept %d bytes, want the good prefix of %d", len(got), from)
			}
			mustAppend(t, s, rec(50))
			s.Close()
			_, ld = open(t, dir)
			clean(t, ld)
			checkRecords(t, ld.Records, append(slices.Clone(all[:2]), rec(50)))
		})
	}
}

func TestCorruptionInAnEarlierSegmentStopsReplay(t *testing.T) {
	dir := t.TempDir()
	s, _ := open(t, dir)
	mustCheckpoint(t, s, []byte("ck"))
	mustAppend(t, s, recs(0, 4)...)
	s.Cut() // no checkpoint: both segments are replayed
	mustAppend(t, s, recs(4, 8)...)
	s.Close()
	segs := segments(t, dir)
	if len(segs) != 2 {
		t.Fatalf("segments %v", segs)
	}
	// Flip the last byte of the first segment: a bad record with nothing
	// after it, but not in the last segment, so not a torn tail.
	b := readFile(t, join(dir, segs[0]))
	b[len(b)-1] ^= 1
	writeFile(t, join(dir, segs[0]), b)

	s, ld := open(t, dir)
	checkRecords(t, ld.Records, recs(0, 3))
	if len(ld.Problems) != 2 {
		t.Fatalf("problems %+v", ld.Problems)
	}
	if p := ld.Problems[0]; p.File != join(dir, segs[1]) || !strings.Contains(p.What, "after corruption in "+segs[0]) || !strings.Contains(p.MovedTo, ".unreplayed-") {
		t.Fatalf("later segment: %+v", p)
	}
	if p := ld.Problems[1]; p.File != join(dir, segs[0]) || !strings.Contains(p.What, "corrupt WAL record") {
		t.Fatalf("corrupt segment: %+v", p)
	}
	// New records go after the kept segment, and replay after them.
	mustAppend(t, s, rec(20))
	s.Close()
	_, ld = open(t, dir)
	clean(t, ld)
	checkRecords(t, ld.Records, append(recs(0, 3), rec(20)))
}

func TestGapInSegmentNumberingStopsReplay(t *testing.T) {
	dir := t.TempDir()
	s, _ := open(t, dir)
	mustCheckpoint(t, s, []byte("ck"))
	for i := range 4 {
		mustAppend(t, s, rec(i))
		s.Cut()
	}
	s.Close()
	segs := segments(t, dir)
	os.Remove(join(dir, segs[2]))

	s, ld := open(t, dir)
	checkRecords(t, ld.Records, recs(0, 2))
	problemWith(t, ld, 1, "gap in numbering: "+segs[2]+" is missing")
	if ld.Problems[0].File != join(dir, segs[3]) {
		t.Fatalf("problem %+v", ld.Problems[0])
	}
	mustAppend(t, s, rec(9))
	s.Close()
	_, ld = open(t, dir)
	clean(t, ld)
	checkRecords(t, ld.Records, append(recs(0, 2), rec(9)))
	if got := segments(t, dir); !slices.Equal(got, segs[:3]) {
		t.Fatalf("segments %v, want %v (the gap refilled)", got, segs[:3])
	}
}

// checkpointWith writes a valid checkpoint for boot with payload and first.
func checkpointFile(boot string, first uint64, payload []byte) []byte {
	return append(appendCheckpointHeader(nil, boot, first, uint64(len(payload)), checksum(payload)), payload...)
}

func TestBadCheckpointMovesEverythingAside(t *testing.T) {
	payload := []byte(`{"state":"x"}`)
	good := checkpointFile(testBoot, 1, payload)
	hl := len(good) - len(payload)
	flip := func(i int) func([]byte) []byte {
		return func(b []byte) []byte { b[i] ^= 0x01; return b }
	}
	setVersion := func(v uint16) func([]byte) []byte {
		return func(b []byte) []byte { binary.LittleEndian.PutUint16(b[14:], v); return b }
	}
	tests := []struct {
		name   string
		mutate func([]byte) []byte
		reason string
		what   string
	}{
		{"bad magic", flip(0), reasonCorrupt, "bad magic"},
		{"empty file", func([]byte) []byte { return nil }, reasonCorrupt, "shorter than its header"},
		{"cut in the magic", func(b []byte) []byte { return b[:7] }, reasonCorrupt, "shorter than its header"},
		{"cut in the header", func(b []byte) []byte { return b[:30] }, reasonCorrupt, "shorter than its header"},
		{"cut before the header checksum", func(b []byte) []byte { return b[:hl-2] }, reasonCorrupt, "shorter than its header"},
		{"version 0", setVersion(0), reasonCorrupt, "format version 0"},
		{"first segment field", flip(16), reasonCorrupt, "header checksum mismatch"},
		{"payload length field", flip(24), reasonCorrupt, "header checksum mismatch"},
		{"payload checksum field", flip(32), reasonCorrupt, "header checksum mismatch"},
		{"boot id length", flip(36), reasonCorrupt, ""},
		{"boot id byte", flip(40), reasonCorrupt, "header checksum mismatch"},
		{"header checksum", flip(hl - 1), reasonCorrupt, "header checksum mismatch"},
		{"payload byte", flip(hl + 3), reasonCorrupt, "payload checksum mismatch"},
		{"payload cut short", func(b []byte) []byte { return b[:len(b)-1] }, reasonCorrupt, "payload length mismatch"},
		{"bytes after the payload", func(b []byte) []byte { return append(b, 0) }, reasonCorrupt, "payload length mismatch"},
		{"first segment 0", func([]byte) []byte { return checkpointFile(testBoot, 0, payload) }, reasonCorrupt, "first segment 0 out of range"},
		{"another boot", func([]byte) []byte { return checkpointFile("another-boot", 1, payload) }, reasonOtherBoot, `checkpoint from another boot (boot id "another-boot"`},
		{"newer format", setVersion(2), reasonNewerFormat, "newer format (version 2"},
		{"much newer format, short", func(b []byte) []byte { return setVersion(9)(b)[:16] }, reasonNewerFormat, "newer format (version 9"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			s, _ := open(t, dir)
			mustCheckpoint(t, s, payload)
			mustAppend(t, s, recs(0, 3)...)
			s.Cut()
			mustAppend(t, s, recs(3, 5)...)
			s.Close()
			segs := segments(t, dir)
			ck := join(dir, checkpointName)
			if !bytes.Equal(readFile(t, ck), good) {
				t.Fatal("test checkpoint differs from what the store writes")
			}
			bad := tt.mutate(slices.Clone(good))
			writeFile(t, ck, bad)

			s, ld := open(t, dir)
			s.Close()
			if ld.Checkpoint != nil || len(ld.Records) != 0 {
				t.Fatalf("loaded %q and %d records from a bad checkpoint", ld.Checkpoint, len(ld.Records))
			}
			problemWith(t, ld, 1+len(segs), "")
			last := ld.Problems[len(ld.Problems)-1] // the checkpoint is moved last
			if last.File != ck || !strings.Contains(last.What, tt.what) || !strings.Contains(last.MovedTo, "checkpoint."+tt.reason+"-") {
				t.Fatalf("checkpoint problem %+v, want %q moved as %s", last, tt.what, tt.reason)
			}
			if got := readFile(t, last.MovedTo); !bytes.Equal(got, bad) {
				t.Fatal("moved-aside checkpoint differs from the original")
			}
			for i, p := range ld.Problems[:len(segs)] {
				if !strings.Contains(p.MovedTo, "."+tt.reason+"-") || !strings.Contains(p.What, "moved aside with its checkpoint") {
					t.Fatalf("segment problem %d: %+v", i, p)
				}
			}
			if got := files(t, dir); slices.Contains(got, checkpointName) || len(segments(t, dir)) != 0 {
				t.Fatalf("left in place: %v", got)
			}
			// A restart after that is a clean first start.
			_, ld = open(t, dir)
			clean(t, ld)
			if ld.Checkpoint != nil {
				t.Fatal("checkpoint after reopen")
			}
		})
	}
}

func TestWALWithoutCheckpointIsMovedAside(t *testing.T) {
	dir := t.TempDir()
	s, _ := open(t, dir)
	mustAppend(t, s, recs(0, 3)...)
	s.Cut()
	mustAppend(t, s, recs(3, 4)...)
	s.Close()
	segs := segments(t, dir)

	s, ld := open(t, dir)
	if len(ld.Records) != 0 || ld.Checkpoint != nil {
		t.Fatalf("loaded %+v", ld)
	}
	problemWith(t, ld, 2, "WAL without a checkpoint")
	for _, p := range ld.Problems {
		if !strings.Contains(p.MovedTo, ".no-checkpoint-") {
			t.Fatalf("problem %+v", p)
		}
	}
	if got := segments(t, dir); len(got) != 0 {
		t.Fatalf("segments left: %v", got)
	}
	// Numbering goes on after the moved segments.
	mustCheckpoint(t, s, []byte("x"))
	mustAppend(t, s, rec(7))
	if got := segments(t, dir); len(got) != 1 || got[0] <= segs[1] {
		t.Fatalf("new segment %v after %v", got, segs)
	}
}

func TestLeftoverSegmentsOlderThanTheCheckpointAreDeleted(t *testing.T) {
	dir := t.TempDir()
	s, _ := open(t, dir)
	mustCheckpoint(t, s, []byte("one"))
	mustAppend(t, s, recs(0, 3)...)
	c := s.Cut()
	mustAppend(t, s, recs(3, 5)...)
	old := map[string][]byte{}
	for _, n := range segments(t, dir) {
		old[n] = readFile(t, join(dir, n))
	}
	if err := s.WriteCheckpoint(c, []byte("two")); err != nil {
		t.Fatal(err)
	}
	s.Close()
	// A crash between the checkpoint's rename and the deletes.
	for n, b := range old {
		writeFile(t, join(dir, n), b)
	}
	_, ld := open(t, dir)
	clean(t, ld)
	if string(ld.Checkpoint) != "two" {
		t.Fatalf("checkpoint %q", ld.Checkpoint)
	}
	checkRecords(t, ld.Records, recs(3, 5))
	for _, n := range segments(t, dir) {
		if seq, _ := parseSegmentName(n); seq < c.seq {
			t.Fatalf("leftover %s not deleted", n)
		}
	}
	if a := aside(t, dir); len(a) != 0 {
		t.Fatalf("leftovers moved aside instead of deleted: %v", a)
	}
}

func TestInterruptedWritesAreIgnoredAndRemoved(t *testing.T) {
	dir := t.TempDir()
	s, _ := open(t, dir)
	mustCheckpoint(t, s, []byte("old"))
	mustAppend(t, s, recs(0, 2)...)
	c := s.Cut()
	s.Close()
	// A crash between writing the new checkpoint and renaming it, and one
	// while starting a segment.
	writeFile(t, join(dir, checkpointName+tmpSuffix), checkpointFile(testBoot, c.seq, []byte("new")))
	writeFile(t, join(dir, segmentName(c.seq)+tmpSuffix), appendSegmentHeader(nil, testBoot, c.seq)[:5])
	writeFile(t, join(dir, "unrelated.tmp"), []byte("not ours"))

	_, ld := open(t, dir)
	clean(t, ld)
	if string(ld.Checkpoint) != "old" {
		t.Fatalf("checkpoint %q, want the renamed one", ld.Checkpoint)
	}
	checkRecords(t, ld.Records, recs(0, 2))
	got := files(t, dir)
	if slices.Contains(got, checkpointName+tmpSuffix) || slices.Contains(got, segmentName(c.seq)+tmpSuffix) {
		t.Fatalf("tmp files left: %v", got)
	}
	if !slices.Contains(got, "unrelated.tmp") {
		t.Fatalf("a file that is not ours was removed: %v", got)
	}
}

func TestBadSegmentHeaderStopsReplay(t *testing.T) {
	tests := []struct {
		name   string
		header func(seq uint64) []byte
		reason string
		what   string
	}{
		{"bad magic", func(seq uint64) []byte {
			b := appendSegmentHeader(nil, testBoot, seq)
			b[0] = 'X'
			return b
		}, reasonCorrupt, "bad magic"},
		{"short", func(seq uint64) []byte { return appendSegmentHeader(nil, testBoot, seq)[:20] }, reasonCorrupt, "shorter than its header"},
		{"header checksum", func(seq uint64) []byte {
			b := appendSegmentHeader(nil, testBoot, seq)
			b[len(b)-6] ^= 1
			return b
		}, reasonCorrupt, "header checksum mismatch"},
		{"sequence differs from the name", func(seq uint64) []byte { return appendSegmentHeader(nil, testBoot, seq+7) }, reasonCorrupt, "file name says"},
		{"another boot", func(seq uint64) []byte { return appendSegmentHeader(nil, "other", seq) }, reasonOtherBoot, "WAL segment from another boot"},
		{"newer format", func(seq uint64) []byte {
			b := appendSegmentHeader(nil, testBoot, seq)
			binary.LittleEndian.PutUint16(b[12:], 3)
			return b
		}, reasonNewerFormat, "newer format (version 3"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			s, _ := open(t, dir)
			mustCheckpoint(t, s, []byte("ck"))
			for i := range 3 {
				mustAppend(t, s, rec(i))
				s.Cut()
			}
			s.Close()
			segs := segments(t, dir)
			mid := join(dir, segs[1])
			seq, _ := parseSegmentName(segs[1])
			b := readFile(t, mid)
			hl, _ := parseSegmentHeader(b, testBoot, seq)
			hdr := tt.header(seq)
			if len(hdr) < walFixed { // a segment that is only part of a header
				b = b[:hl]
			}
			writeFile(t, mid, append(hdr, b[hl:]...))

			s, ld := open(t, dir)
			checkRecords(t, ld.Records, recs(0, 1))
			if len(ld.Problems) != 2 {
				t.Fatalf("problems %+v", ld.Problems)
			}
			if p := ld.Problems[0]; p.File != join(dir, segs[2]) || !strings.Contains(p.MovedTo, ".unreplayed-") {
				t.Fatalf("later segment: %+v", p)
			}
			if p := ld.Problems[1]; p.File != mid || !strings.Contains(p.What, tt.what) || !strings.Contains(p.MovedTo, "."+tt.reason+"-") {
				t.Fatalf("bad segment: %+v, want %q as %s", p, tt.what, tt.reason)
			}
			mustAppend(t, s, rec(30))
			s.Close()
			_, ld = open(t, dir)
			clean(t, ld)
			checkRecords(t, ld.Records, append(recs(0, 1), rec(30)))
		})
	}
}

func TestNonRegularFilesAreMovedAside(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(join(dir, checkpointName), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc/passwd", join(dir, segmentName(1))); err != nil {
		t.Fatal(err)
	}
	s, ld := open(t, dir)
	s.Close()
	if len(ld.Problems) != 2 || !strings.Contains(ld.Problems[1].What, "not a regular file") {
		t.Fatalf("problems %+v", ld.Problems)
	}
	if _, err := os.Stat("/etc/passwd"); err != nil {
		t.Fatal("symlink target touched")
	}
	_, ld = open(t, dir)
	clean(t, ld)
}

func TestMovedAsideFilesAreBounded(t *testing.T) {
	dir := t.TempDir()
	opts := testOptions(dir)
	for round := range 10 {
		s, _ := openWith(t, opts)
		mustCheckpoint(t, s, []byte("ck"))
		mustAppend(t, s, recs(0, 3)...)
		s.Close()
		writeFile(t, join(dir, checkpointName), []byte("garbage"))
		s, ld := openWith(t, opts)
		if len(ld.Problems) != 2 {
			t.Fatalf("round %d: problems %+v", round, ld.Problems)
		}
		s.Close()
	}
	gens := map[string]int{}
	for _, n := range aside(t, dir) {
		st, _ := parseAsideName(n)
		gens[st]++
	}
	if len(gens) != keepGenerations {
		t.Fatalf("%d generations kept (%v), want %d", len(gens), aside(t, dir), keepGenerations)
	}
	for st, n := range gens {
		if n != 2 {
			t.Fatalf("generation %s has %d files, want checkpoint and segment", st, n)
		}
	}
}

func TestDiscardStartsEmpty(t *testing.T) {
	dir := t.TempDir()
	s, _ := open(t, dir)
	c := mustCheckpoint(t, s, []byte("not json"))
	mustAppend(t, s, recs(0, 3)...)
	s.Close()

	s, ld := open(t, dir)
	clean(t, ld)
	if err := s.Discard("payload does not decode"); err != nil {
		t.Fatal(err)
	}
	if got := files(t, dir); slices.Contains(got, checkpointName) || len(segments(t, dir)) != 0 {
		t.Fatalf("left after Discard: %v", got)
	}
	as := aside(t, dir)
	if len(as) != 2 || !strings.Contains(strings.Join(as, " "), ".discarded-") {
		t.Fatalf("moved aside: %v", as)
	}
	if err := s.WriteCheckpoint(c, nil); !errors.Is(err, ErrStaleCut) {
		t.Fatalf("WriteCheckpoint with a Cut from before Discard: %v", err)
	}
	mustCheckpoint(t, s, []byte("fresh"))
	mustAppend(t, s, rec(9))
	s.Close()
	_, ld = open(t, dir)
	clean(t, ld)
	if string(ld.Checkpoint) != "fresh" {
		t.Fatalf("checkpoint %q", ld.Checkpoint)
	}
	checkRecords(t, ld.Records, []Record{rec(9)})
}

func TestWriteCheckpointRefusesStaleAndForeignCuts(t *testing.T) {
	s, _ := open(t, t.TempDir())
	mustAppend(t, s, rec(0))
	old := s.Cut()
	mustAppend(t, s, rec(1))
	mustCheckpoint(t, s, nil)
	if err := s.WriteCheckpoint(old, nil); !errors.Is(err, ErrStaleCut) {
		t.Fatalf("older cut: %v", err)
	}
	if err := s.WriteCheckpoint(Cut{}, nil); err == nil {
		t.Fatal("zero Cut accepted")
	}
	if err := s.WriteCheckpoint(Cut{seq: 1 << 40}, nil); err == nil {
		t.Fatal("cut from the future accepted")
	}
}

func TestOpenRefusesUnsafeDir(t *testing.T) {
	tests := []struct {
		name  string
		setup func(t *testing.T, dir string) string
		want  string
	}{
		{"symlink", func(t *testing.T, dir string) string {
			real := join(dir, "real")
			os.Mkdir(real, 0o700)
			link := join(dir, "link")
			if err := os.Symlink(real, link); err != nil {
				t.Fatal(err)
			}
			return link
		}, "is a symlink"},
		{"group-writable", func(t *testing.T, dir string) string {
			d := join(dir, "d")
			os.Mkdir(d, 0o700)
			os.Chmod(d, 0o770)
			return d
		}, "mode 0770, writable by group or others"},
		{"world-writable", func(t *testing.T, dir string) string {
			d := join(dir, "d")
			os.Mkdir(d, 0o700)
			os.Chmod(d, os.ModeSticky|0o777)
			return d
		}, "mode 1777"},
		{"not a directory", func(t *testing.T, dir string) string {
			f := join(dir, "f")
			writeFile(t, f, nil)
			return f
		}, "is not a directory"},
		{"dangling symlink", func(t *testing.T, dir string) string {
			link := join(dir, "link")
			if err := os.Symlink(join(dir, "nowhere"), link); err != nil {
				t.Fatal(err)
			}
			return link
		}, "is a symlink"},
		{"owned by another user", func(t *testing.T, dir string) string {
			if os.Geteuid() != 0 {
				testenv.Missing(t, "root", "chown to another uid")
			}
			d := join(dir, "d")
			os.Mkdir(d, 0o700)
			if err := os.Chown(d, 65534, 65534); err != nil {
				t.Fatal(err)
			}
			return d
		}, "owned by uid 65534"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := tt.setup(t, t.TempDir())
			s, _, err := Open(testOptions(d))
			if err == nil {
				s.Close()
				t.Fatal("Open accepted it")
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %q does not say %q", err, tt.want)
			}
			t.Log(err)
		})
	}
}

func TestOpenLocksTheDir(t *testing.T) {
	dir := t.TempDir()
	s, _ := open(t, dir)
	if _, _, err := Open(testOptions(dir)); !errors.Is(err, ErrLocked) {
		t.Fatalf("second Open: %v, want ErrLocked", err)
	}
	s.Close()
	s2, _ := open(t, dir)
	s2.Close()
}

func TestRemoveRefusesADirAStoreHolds(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	if removed, err := Remove(dir); removed || err != nil {
		t.Fatalf("remove of a missing dir: %v, %v; want false, nil", removed, err)
	}
	s, _ := open(t, dir)
	mustCheckpoint(t, s, nil)
	if removed, err := Remove(dir); removed || !errors.Is(err, ErrLocked) {
		t.Fatalf("remove while a store holds it: %v, %v; want false, ErrLocked", removed, err)
	}
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("the held dir is gone: %v", err)
	}
	s.Close()
	if removed, err := Remove(dir); !removed || err != nil {
		t.Fatalf("remove once closed: %v, %v; want true, nil", removed, err)
	}
	if _, err := os.Lstat(dir); !os.IsNotExist(err) {
		t.Fatalf("the dir is still there: %v", err)
	}
}

func TestAppendRefusesBadRecords(t *testing.T) {
	dir := t.TempDir()
	s, _ := open(t, dir)
	mustCheckpoint(t, s, nil)
	if err := s.Append(rec(0), Record{Kind: 0, Data: []byte("x")}); err == nil {
		t.Fatal("kind 0 accepted")
	}
	if err := s.Append(Record{Kind: 1, Data: make([]byte, MaxRecord+1)}); err == nil {
		t.Fatal("oversized record accepted")
	}
	big := Record{Kind: 1, Data: bytes.Repeat([]byte{7}, MaxRecord)}
	mustAppend(t, s, big, Record{Kind: 2})
	s.Close()
	_, ld := open(t, dir)
	clean(t, ld)
	checkRecords(t, ld.Records, []Record{big, {Kind: 2}})
}

func TestFilesAreCreatedPrivate(t *testing.T) {
	dir := t.TempDir()
	s, _ := open(t, dir)
	mustCheckpoint(t, s, []byte("x"))
	mustAppend(t, s, rec(0))
	for _, n := range files(t, dir) {
		fi, err := os.Lstat(join(dir, n))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode() != 0o600 {
			t.Fatalf("%s has mode %v", n, fi.Mode())
		}
	}
}

func TestSizeCountsCheckpointAndSegments(t *testing.T) {
	dir := t.TempDir()
	s, _ := open(t, dir)
	mustCheckpoint(t, s, make([]byte, 1000))
	mustAppend(t, s, recs(0, 10)...)
	writeFile(t, join(dir, "wal-0000000000000001.corrupt-20260101T000000.000000000Z"), make([]byte, 5000))
	var want int64
	for _, n := range append(segments(t, dir), checkpointName) {
		fi, _ := os.Stat(join(dir, n))
		want += fi.Size()
	}
	if got, err := s.Size(); err != nil || got != want {
		t.Fatalf("Size = %d, %v; want %d", got, err, want)
	}
}

func TestClosedStoreRefusesWork(t *testing.T) {
	s, _ := open(t, t.TempDir())
	c := s.Cut()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	for name, err := range map[string]error{
		"Append":          s.Append(rec(0)),
		"WriteCheckpoint": s.WriteCheckpoint(c, nil),
		"Discard":         s.Discard("x"),
	} {
		if !errors.Is(err, ErrClosed) {
			t.Errorf("%s after Close: %v", name, err)
		}
	}
	if _, err := s.Size(); !errors.Is(err, ErrClosed) {
		t.Errorf("Size after Close: %v", err)
	}
}

// TestConcurrentAppendsAndCheckpoints runs the agent's pattern: appends
// and Cut under one lock, checkpoints written outside it meanwhile.
func TestConcurrentAppendsAndCheckpoints(t *testing.T) {
	dir := t.TempDir()
	s, _ := open(t, dir)
	mustCheckpoint(t, s, []byte("0"))
	var (
		lock  sync.Mutex
		next  int
		wg    sync.WaitGroup
		ckMu  sync.Mutex
		lastN int
	)
	for range 4 {
		wg.Go(func() {
			for range 200 {
				lock.Lock()
				if err := s.Append(rec(next)); err != nil {
					t.Error(err)
				}
				next++
				lock.Unlock()
			}
		})
	}
	wg.Go(func() {
		for range 20 {
			lock.Lock()
			c, n := s.Cut(), next
			lock.Unlock()
			ckMu.Lock() // as the agent's single checkpoint writer
			if err := s.WriteCheckpoint(c, fmt.Append(nil, n)); err != nil {
				t.Error(err)
			}
			lastN = n
			ckMu.Unlock()
		}
	})
	wg.Wait()
	s.Close()
	_, ld := open(t, dir)
	clean(t, ld)
	var n int
	fmt.Sscan(string(ld.Checkpoint), &n)
	if n != lastN {
		t.Fatalf("checkpoint says %d, last written %d", n, lastN)
	}
	checkRecords(t, ld.Records, recs(n, 800))
}

// FuzzOpen writes arbitrary bytes as the checkpoint and up to three
// segments and opens them: Open must not panic, must return exactly the
// records a plain reading of the files finds valid, and a second Open must
// find a clean directory with the same content.
//
//	go test -run x -fuzz FuzzOpen -fuzztime 60s ./state/
func FuzzOpen(f *testing.F) {
	frame := func(rs ...Record) []byte {
		var b []byte
		for _, r := range rs {
			b = appendRecord(b, r)
		}
		return b
	}
	f.Add([]byte("ck"), frame(recs(0, 3)...), frame(rec(3)), []byte{}, uint8(0x03))
	f.Add([]byte("ck"), frame(recs(0, 3)...)[:40], []byte{}, []byte{}, uint8(0x07))
	f.Add([]byte("ck"), frame(recs(0, 2)...), frame(rec(3))[:5], frame(rec(4)), uint8(0x0f))
	f.Add(checkpointFile(testBoot, 1, []byte("x")), appendSegmentHeader(nil, testBoot, 1), []byte{}, []byte{}, uint8(0x00))
	f.Add([]byte("MCPTRACE-STATE\x01\x00"), []byte("MCPTRACE-WAL"), []byte{0, 0, 0, 0}, []byte{}, uint8(0x10))
	f.Fuzz(func(t *testing.T, ck, seg1, seg2, seg3 []byte, flags uint8) {
		// flags bit 0: ck is a valid checkpoint's payload (else raw file);
		// bit 1: segments get valid headers (else raw files);
		// bits 2-3: first segment number - 1 the checkpoint claims;
		// bit 4: skip writing seg2 (a gap).
		dir := t.TempDir()
		first := 1 + uint64(flags>>2&3)
		ckFile := ck
		if flags&1 != 0 {
			ckFile = checkpointFile(testBoot, first, ck)
		}
		writeFile(t, join(dir, checkpointName), ckFile)
		segs := [][]byte{seg1, seg2, seg3}
		for i, b := range segs {
			if i == 1 && flags&0x10 != 0 {
				continue
			}
			if flags&2 != 0 {
				b = append(appendSegmentHeader(nil, testBoot, uint64(i+1)), b...)
			}
			writeFile(t, join(dir, segmentName(uint64(i+1))), b)
		}
		before := map[string][]byte{}
		for _, n := range files(t, dir) {
			before[n] = readFile(t, join(dir, n))
		}

		s, ld, err := Open(testOptions(dir))
		if err != nil {
			t.Fatal(err)
		}
		want, wantCk := reference(before)
		if !bytes.Equal(ld.Checkpoint, wantCk) || (ld.Checkpoint == nil) != (wantCk == nil) {
			t.Fatalf("checkpoint %q, reference %q", ld.Checkpoint, wantCk)
		}
		if err := sameRecords(ld.Records, want); err != nil {
			t.Fatalf("records differ from the reference reading: %v", err)
		}
		if ld.Checkpoint != nil {
			mustAppend(t, s, rec(1000))
		}
		s.Close()

		s, again, err := Open(testOptions(dir))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if len(again.Problems) != 0 || again.Torn != 0 {
			t.Fatalf("second Open: problems %+v, torn %d", again.Problems, again.Torn)
		}
		if ld.Checkpoint == nil {
			if again.Checkpoint != nil || len(again.Records) != 0 {
				t.Fatalf("second Open loaded %+v", again)
			}
		} else {
			want = append(want, rec(1000))
			if !bytes.Equal(again.Checkpoint, ld.Checkpoint) {
				t.Fatal("checkpoint changed")
			}
			if err := sameRecords(again.Records, want); err != nil {
				t.Fatalf("second Open: %v", err)
			}
		}
	})
}

// reference reads a directory's files the simplest way: the checkpoint
// when it is valid, then consecutive segments from its first, each up to
// its first invalid record, stopping at the first segment that has one.
func reference(files map[string][]byte) ([]Record, []byte) {
	ckb, ok := files[checkpointName]
	if !ok {
		return nil, nil
	}
	first, payload, f := parseCheckpoint(ckb, testBoot)
	if f != nil {
		return nil, nil
	}
	var rs []Record
	for seq := first; ; seq++ {
		b, ok := files[segmentName(seq)]
		if !ok {
			return rs, payload
		}
		hl, f := parseSegmentHeader(b, testBoot, seq)
		if f != nil {
			return rs, payload
		}
		for p := hl; p < len(b); {
			if len(b)-p < 9 {
				return rs, payload
			}
			n := int(binary.LittleEndian.Uint32(b[p:]))
			if n > MaxRecord || p+9+n > len(b) || b[p+8] == 0 ||
				checksum(b[p+8:p+9+n]) != binary.LittleEndian.Uint32(b[p+4:]) {
				return rs, payload
			}
			rs = append(rs, Record{Kind: Kind(b[p+8]), Data: b[p+9 : p+9+n]})
			p += 9 + n
		}
	}
}

// BenchmarkAppend appends a typical batch of 64 encoded events (forks,
// execs with 5-10 argv words, exits) as 64 records in one Append, with a
// Cut and a small checkpoint every 4096 batches as the agent would.
//
//	go test -run x -bench Append -benchmem -count 10 ./state/ | benchstat -
func BenchmarkAppend(b *testing.B) {
	for _, encode := range []bool{false, true} {
		name := "batch=64"
		if encode {
			name += "/encode"
		}
		b.Run(name, func(b *testing.B) {
			s, _ := open(b, b.TempDir())
			mustCheckpoint(b, s, nil)
			evs := benchEvents()
			batch := make([]Record, len(evs))
			bufs := make([][]byte, len(evs))
			size := 0
			for i, ev := range evs {
				bufs[i] = AppendEvent(nil, ev)
				batch[i] = Record{Kind: 1, Data: bufs[i]}
				size += len(bufs[i]) + recordHeaderSize
			}
			b.SetBytes(int64(size))
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if encode {
					for j, ev := range evs {
						bufs[j] = AppendEvent(bufs[j][:0], ev)
						batch[j].Data = bufs[j]
					}
				}
				if err := s.Append(batch...); err != nil {
					b.Fatal(err)
				}
				if i++; i%4096 == 0 {
					if err := s.WriteCheckpoint(s.Cut(), nil); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}

func TestProblemsAreLoggedAtWarn(t *testing.T) {
	dir := t.TempDir()
	s, _ := open(t, dir)
	mustAppend(t, s, rec(0))
	s.Close()
	var buf bytes.Buffer
	opts := testOptions(dir)
	opts.Logger = slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelWarn}))
	s, ld := openWith(t, opts)
	problemWith(t, ld, 1, "WAL without a checkpoint")
	if out := buf.String(); !strings.Contains(out, "level=WARN") || !strings.Contains(out, "WAL without a checkpoint") || !strings.Contains(out, ld.Problems[0].MovedTo) {
		t.Fatalf("log:\n%s", out)
	}
	buf.Reset()
	mustCheckpoint(t, s, nil)
	if err := s.Discard("payload version 7 unknown"); err != nil {
		t.Fatal(err)
	}
	if out := buf.String(); !strings.Contains(out, "discarded by the caller: payload version 7 unknown") {
		t.Fatalf("Discard log:\n%s", out)
	}
}
