package history

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// segmentFiles are the segment files in a store's directory, of every
// stream: the shared one's, then each uid's, oldest first.
func segmentFiles(t testing.TB, dir string) []string {
	t.Helper()
	var all []string
	for _, pat := range []string{"*" + segmentSuffix, streamPrefix + "*/*" + segmentSuffix} {
		m, err := filepath.Glob(filepath.Join(dir, segmentsDir, pat))
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, m...)
	}
	return all
}

// uidLog is uid's stream (the tests' events are uid 0's unless set).
func uidLog(t testing.TB, j *Journal, uid uint32) *segmentLog {
	t.Helper()
	l, err := j.segs.log(uid)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// writeBatches writes batches of per events each (event i of size
// bytes), a batch per Flush, and closes the journal.
func writeBatches(t *testing.T, dir string, c *clock, batches, per, size int) {
	t.Helper()
	j := open(t, dir, c, nil)
	for b := range batches {
		var evs []Event
		for k := range per {
			evs = append(evs, ev(b*per+k, size))
		}
		j.Events(evs)
		flush(t, j)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestTornBatchIsCutAtOpenAndNoted: the frames of a batch a crash cut
// short (whole frames of it, without the one that ends it, and a torn
// frame) are cut at the next Open, a note says how many bytes, and the
// batches before it read back whole; the next batch appends after them.
func TestTornBatchIsCutAtOpenAndNoted(t *testing.T) {
	dir := t.TempDir()
	c := &clock{now: t0.Add(time.Hour)}
	writeBatches(t, dir, c, 3, 100, 300) // 30 KB a batch: two chunks each
	segs := segmentFiles(t, dir)
	if len(segs) != 1 {
		t.Fatalf("%d segments, want 1", len(segs))
	}
	whole, err := os.ReadFile(segs[0])
	if err != nil {
		t.Fatal(err)
	}
	// The last batch's first frame stays; its last frame (the one that
	// ends the batch) is torn in the middle.
	_, _, end, next, ok := frameAt(whole, int64(len(segmentMagic)))
	if !ok || end {
		t.Fatalf("the first batch's first frame: ok %v, ends the batch %v; want a batch of two frames", ok, end)
	}
	s, good := scanSegment(whole)
	if good != int64(len(whole)) || s.events != 300 {
		t.Fatalf("the whole segment scans to %d of %d bytes, %d events", good, len(whole), s.events)
	}
	cutAt := len(whole) - int(next-int64(len(segmentMagic)))/2 // within the last batch's last frame
	if err := os.Truncate(segs[0], int64(cutAt)); err != nil {
		t.Fatal(err)
	}
	j := open(t, dir, c, nil)
	defer j.Close()
	got := events(t, j)
	if len(got) != 200 || got[199] != 199 {
		t.Fatalf("after the torn batch: %d events, want the 200 of the two whole batches", len(got))
	}
	notes, _ := j.Notes()
	flush(t, j)
	notes, _ = j.Notes()
	if len(notes) != 1 || !strings.Contains(notes[0].What, "bytes after the last whole batch") {
		t.Fatalf("no note of the cut: %+v", notes)
	}
	j.Events([]Event{ev(200, 300)})
	flush(t, j)
	if got := events(t, j); len(got) != 201 || got[200] != 200 {
		t.Fatalf("a batch after the cut: %d events", len(got))
	}
}

// TestDamagedSegmentIsAnErrorToReadAndCutAtTheNextOpen: a byte changed
// in a frame after Open checked it is found by its checksum (a read
// fails, and says so; it never returns the damaged event), and the next
// Open cuts the segment before it.
func TestDamagedSegmentIsAnErrorToReadAndCutAtTheNextOpen(t *testing.T) {
	dir := t.TempDir()
	c := &clock{now: t0.Add(time.Hour)}
	j := open(t, dir, c, nil)
	defer func() { j.Close() }()
	for b := range 4 {
		var evs []Event
		for k := range 10 {
			evs = append(evs, ev(b*10+k, 100))
		}
		j.Events(evs)
		flush(t, j)
	}
	path := segmentFiles(t, dir)[0]
	b, _ := os.ReadFile(path)
	// In the third batch's data.
	i := bytes.Index(b, ev(25, 100).Data)
	if i < 0 {
		t.Fatal("event 25 is not in the segment as written")
	}
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteAt([]byte{b[i] ^ 0x40}, int64(i))
	f.Close()
	err = j.EventsBetween(time.Time{}, time.Unix(1<<33, 0), func(time.Time, []byte) bool { return true })
	if !errors.Is(err, errDamagedSegment) {
		t.Fatalf("reading a damaged segment: %v", err)
	}
	if j.Stats().Corrupt {
		t.Fatal("damage in a segment marked the whole store corrupt")
	}
	j.Close()
	j = open(t, dir, c, nil)
	if got := events(t, j); len(got) != 20 {
		t.Fatalf("after the cut: %d events, want the 20 of the batches before the damage", len(got))
	}
}

// TestSegmentsRotateAndRetentionRemovesTheFirstWritten: past a segment's
// size a new one starts, batches never span two, and under a size cap the
// first written go, whatever their events' times (a replayed old event
// in a new segment does not send it first).
func TestSegmentsRotateAndRetentionRemovesTheFirstWritten(t *testing.T) {
	const capBytes = 2 << 20 // segments of 64 KiB
	dir := t.TempDir()
	c := &clock{now: t0.Add(10 * time.Hour)}
	j := open(t, dir, c, func(o *Options) { o.MaxBytes = capBytes })
	defer j.Close()
	j.Events([]Event{ev(int(time.Hour/time.Millisecond), 500)})
	flush(t, j)
	for b := range 40 {
		var evs []Event
		for k := range 100 {
			evs = append(evs, ev(int(2*time.Hour/time.Millisecond)+b*100+k, 500))
		}
		if b == 20 {
			evs = append(evs, ev(1, 500)) // replayed: older than everything
		}
		j.Events(evs)
		flush(t, j)
	}
	segs := uidLog(t, j, 0).snapshot()
	if len(segs) < 4 {
		t.Fatalf("%d segments after 2 MB, want them 64 KiB each", len(segs))
	}
	for _, s := range segs[:len(segs)-1] {
		if s.size > j.segs.maxSize+60_000 {
			t.Fatalf("segment %d is %d bytes, limit %d and a batch", s.seq, s.size, j.segs.maxSize)
		}
	}
	got := events(t, j)
	if got[0] != 1 {
		t.Fatalf("the replayed old event went before segments written before it (first kept: %d)", got[0])
	}
	if got[1] == uint64(time.Hour/time.Millisecond) {
		t.Fatal("the first written segment was kept under the cap")
	}
	if st := j.Stats(); st.FileBytes > capBytes || storeBytes(t, dir) > capBytes {
		t.Fatalf("the store takes %d bytes (%d on disk), cap %d", st.FileBytes, storeBytes(t, dir), capBytes)
	}
}

// storeBytes is what the files of the store in dir take.
func storeBytes(t *testing.T, dir string) int64 {
	t.Helper()
	var n int64
	err := filepath.Walk(dir, func(_ string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() {
			n += fi.Size()
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestAQuietNodeStartsASegmentAnEighthOfMaxAgeOn: on a node too quiet
// to fill a segment, a new one starts once the newest holds an event
// older than MaxAge/8 (the first batch after a restart too), so the old
// one can go with its age: nothing stays on disk much past MaxAge.
func TestAQuietNodeStartsASegmentAnEighthOfMaxAgeOn(t *testing.T) {
	dir := t.TempDir()
	c := &clock{now: t0.Add(time.Hour)}
	maxAge := func(o *Options) { o.MaxAge = 8 * time.Hour }
	j := open(t, dir, c, maxAge)
	defer func() { j.Close() }()
	j.Events([]Event{ev(int(time.Hour/time.Millisecond), 100)})
	flush(t, j)
	c.now = c.now.Add(30 * time.Minute) // within MaxAge/8: the same segment
	j.Events([]Event{ev(int(90*time.Minute/time.Millisecond), 100)})
	flush(t, j)
	if n := len(segmentFiles(t, dir)); n != 1 {
		t.Fatalf("%d segments after half an hour, want 1", n)
	}
	// A restart between: the first batch after it starts the new one.
	j.Close()
	j = open(t, dir, c, maxAge)
	c.now = c.now.Add(2 * time.Hour)
	j.Events([]Event{ev(int(210*time.Minute/time.Millisecond), 100)})
	flush(t, j)
	if n := len(segmentFiles(t, dir)); n != 2 {
		t.Fatalf("%d segments after two hours more, want 2 (the first holds an event older than MaxAge/8)", n)
	}
	j.Close()
	c.now = t0.Add(3*time.Hour + 8*time.Hour) // the first segment's events are past MaxAge
	j = open(t, dir, c, maxAge)
	if got := events(t, j); len(got) != 1 || len(segmentFiles(t, dir)) != 1 {
		t.Fatalf("past MaxAge: %d events read, %d segments on disk; want the newest alone", len(got), len(segmentFiles(t, dir)))
	}
}

// TestABatchLargerThanASegmentKeepsTheCap: 1.5 MB handed in at once to
// a store capped at 2 MiB (segments of 64 KiB) is written as several
// batches, with room made before each: the files never pass the cap,
// and the newest events are all kept.
func TestABatchLargerThanASegmentKeepsTheCap(t *testing.T) {
	const capBytes = 2 << 20
	dir := t.TempDir()
	c := &clock{now: t0.Add(time.Hour)}
	j := open(t, dir, c, func(o *Options) { o.MaxBytes = capBytes; o.FlushInterval = time.Hour })
	defer j.Close()
	for round := range 3 {
		var evs []Event
		for k := range 3000 {
			evs = append(evs, ev(round*3000+k, 500))
		}
		j.Events(evs) // over wakeQueue: the writer may start before Flush
		flush(t, j)
		if n := storeBytes(t, dir); n > capBytes {
			t.Fatalf("after round %d the store's files take %d bytes, cap %d", round, n, capBytes)
		}
	}
	got := events(t, j)
	if st := j.Stats(); st.Failed != 0 || len(got) < 2000 || got[len(got)-1] != 8999 {
		t.Fatalf("%d events kept, the newest %d, failed %d", len(got), got[len(got)-1], st.Failed)
	}
}

// FuzzSegment: scanning any bytes never panics; what it keeps is whole
// batches whose frames check and whose chunks read, and scanning that
// again keeps all of it. A segment the writer wrote (batches of one
// frame and of several), cut anywhere and followed by any bytes, keeps
// every batch that ended before the cut, and when nothing follows the
// cut, nothing else: no frame of an unfinished batch.
func FuzzSegment(f *testing.F) {
	dir := f.TempDir()
	c := &clock{now: t0.Add(time.Hour)}
	j, err := Open(Options{Dir: dir, BootID: "boot-1", Now: c.wall, BootNow: c.boot, FlushInterval: time.Hour})
	if err != nil {
		f.Fatal(err)
	}
	var ends []int64 // where each batch ends
	for b := range 4 {
		evs := []Event{ev(4*b, 20), ev(4*b+1, 0)}
		if b%2 == 1 {
			evs = append(evs, ev(4*b+2, 9000), ev(4*b+3, 9000)) // a batch of two frames
		}
		j.Events(evs)
		if err := j.Flush(f.Context()); err != nil {
			f.Fatal(err)
		}
		ends = append(ends, uidLog(f, j, 0).newest().size)
	}
	j.Close()
	m := segmentFiles(f, dir)
	valid, err := os.ReadFile(m[0])
	if err != nil || int64(len(valid)) != ends[len(ends)-1] {
		f.Fatalf("the written segment: %d bytes, %v; batches end at %v", len(valid), err, ends)
	}
	f.Add(uint32(len(valid)), []byte{})
	f.Add(uint32(len(valid)-5), []byte{})
	f.Add(uint32(ends[1]-100), []byte{})
	f.Add(uint32(len(segmentMagic)+frameHeadLen+3), []byte("\x00\x00\x00\x08\x00\x00\x00\x00"))
	f.Add(uint32(len(valid)), []byte("\x80\x00\x00\x09\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x01\xff"))
	f.Fuzz(func(t *testing.T, cut uint32, tail []byte) {
		cut = min(cut, uint32(len(valid)))
		b := append(bytes.Clone(valid[:cut]), tail...)
		_ = eachInChunk(tail, func(_, _ []byte) bool { return true })
		s, good := scanSegment(b)
		if good < 0 {
			if bytes.HasPrefix(b, []byte(segmentMagic)) {
				t.Fatal("a segment with its magic was refused")
			}
			return
		}
		if good > int64(len(b)) || s.size != good {
			t.Fatalf("kept %d bytes (size %d) of %d", good, s.size, len(b))
		}
		again, good2 := scanSegment(b[:good])
		if good2 != good || again != s {
			t.Fatalf("what was kept scans differently: %+v %d, then %+v %d", s, good, again, good2)
		}
		whole := int64(len(segmentMagic)) // where the last batch before the cut ends
		for _, e := range ends {
			if e <= int64(cut) {
				whole = e
			}
		}
		if good < whole {
			t.Fatalf("cut at %d: kept %d bytes, but the batches before the cut end at %d", cut, good, whole)
		}
		if len(tail) == 0 && good != whole {
			t.Fatalf("cut at %d, nothing after: kept %d bytes, want the whole batches' %d (no frame of an unfinished one)", cut, good, whole)
		}
	})
}
