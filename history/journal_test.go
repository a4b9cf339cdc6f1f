package history

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	bolt "go.etcd.io/bbolt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// clock is an injectable wall and boot clock: the boot clock starts at
// 0 at t0 and both move together.
type clock struct{ now time.Time }

var t0 = time.Date(2026, 11, 26, 9, 0, 0, 0, time.UTC)

func (c *clock) wall() time.Time { return c.now }
func (c *clock) boot() uint64    { return uint64(c.now.Sub(t0)) }

func open(t *testing.T, dir string, c *clock, change func(*Options)) *Journal {
	t.Helper()
	o := Options{Dir: dir, BootID: "boot-1", Now: c.wall, BootNow: c.boot, FlushInterval: 10 * time.Millisecond}
	if change != nil {
		change(&o)
	}
	j, err := Open(o)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return j
}

func flush(t *testing.T, j *Journal) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := j.Flush(ctx); err != nil {
		t.Fatal(err)
	}
}

// ev is event i: its time is i ms after boot and its data names it.
func ev(i int, size int) Event {
	d := binary.BigEndian.AppendUint64(nil, uint64(i))
	d = append(d, strings.Repeat("x", max(0, size-8))...)
	return Event{Time: uint64(i) * uint64(time.Millisecond), PID: uint32(1000 + i%7), Kind: uint8(1 + i%3), Data: d}
}

func events(t *testing.T, j *Journal) []uint64 {
	t.Helper()
	var ids []uint64
	err := j.EventsBetween(time.Time{}, time.Unix(1<<33, 0), func(_ time.Time, d []byte) bool {
		ids = append(ids, binary.BigEndian.Uint64(d))
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

func TestJournalKeepsEventsSessionsAndNotesAcrossReopen(t *testing.T) {
	dir := t.TempDir()
	c := &clock{now: t0.Add(time.Hour)}
	j := open(t, dir, c, nil)
	for i := range 100 {
		j.Events([]Event{ev(i, 40)})
	}
	detail := json.RawMessage(`{"processes":[{"comm":"node"}]}`)
	j.PutSession(Session{Owner: 1000, ID: "work", Began: t0.Add(time.Minute), Ended: t0.Add(50 * time.Minute), Written: c.now, Killed: 3, Detail: detail})
	j.AddNote(Note{At: c.now, What: "test note"})
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}

	j = open(t, dir, c, nil)
	defer j.Close()
	if got := events(t, j); len(got) != 100 || got[0] != 0 || got[99] != 99 {
		t.Fatalf("events after reopen: %d (%v…)", len(got), got[:min(len(got), 3)])
	}
	owner := uint32(1000)
	s, ok, err := j.Session(Filter{Owner: &owner, ID: "work"})
	if err != nil || !ok {
		t.Fatalf("Session: %v %v", ok, err)
	}
	if s.Killed != 3 || string(s.Detail) != string(detail) || !s.Ended.Equal(t0.Add(50*time.Minute)) {
		t.Fatalf("session came back as %+v", s)
	}
	other := uint32(1001)
	if _, ok, _ := j.Session(Filter{Owner: &other, ID: "work"}); ok {
		t.Fatal("another owner's filter found the session")
	}
	notes, err := j.Notes()
	if err != nil || len(notes) != 1 || notes[0].What != "test note" {
		t.Fatalf("notes: %v %v", notes, err)
	}
}

// TestEventWrittenTwiceIsOneRecord: the agent hands the events of its
// state journal in again after a restart; they must not double.
func TestEventWrittenTwiceIsOneRecord(t *testing.T) {
	dir := t.TempDir()
	c := &clock{now: t0.Add(time.Hour)}
	j := open(t, dir, c, nil)
	batch := []Event{ev(1, 30), ev(2, 30), ev(3, 30)}
	j.Events(batch)
	flush(t, j)
	j.Close()
	c.now = c.now.Add(time.Minute) // a later agent of the same boot
	j = open(t, dir, c, nil)
	defer j.Close()
	j.Events(batch)
	flush(t, j)
	if got := events(t, j); len(got) != 3 {
		t.Fatalf("events after writing them twice: %v", got)
	}
}

// TestEventsOfAnotherBootKeepTheirOwnTimes: the boot clock restarts at
// every boot; times map to the wall clock per boot.
func TestEventsOfAnotherBootKeepTheirOwnTimes(t *testing.T) {
	dir := t.TempDir()
	c := &clock{now: t0.Add(time.Hour)}
	j := open(t, dir, c, nil)
	j.Events([]Event{ev(5, 20)})
	flush(t, j)
	first := j.Wall(ev(5, 20).Time)
	j.Close()
	later := t0.Add(48 * time.Hour) // a reboot: the boot clock is at 1h again
	c2 := &clock{now: later.Add(time.Hour)}
	j = open(t, dir, c2, func(o *Options) {
		o.BootID = "boot-2"
		o.BootNow = func() uint64 { return uint64(c2.now.Sub(later)) }
	})
	defer j.Close()
	j.Events([]Event{ev(5, 20)})
	flush(t, j)
	if got := events(t, j); len(got) != 2 {
		t.Fatalf("the same boot time in two boots: %d records, want 2", len(got))
	}
	if !first.Equal(t0.Add(5*time.Millisecond)) || !j.Wall(ev(5, 20).Time).Equal(later.Add(5*time.Millisecond)) {
		t.Fatalf("wall times %v and %v", first, j.Wall(ev(5, 20).Time))
	}
}

// TestRetentionRemovesWhatIsOlderThanMaxAge uses the injected clock: an
// hour passes without a sleep.
func TestRetentionRemovesWhatIsOlderThanMaxAge(t *testing.T) {
	dir := t.TempDir()
	c := &clock{now: t0.Add(time.Hour)}
	j := open(t, dir, c, func(o *Options) { o.MaxAge = 2 * time.Hour })
	for i := range 10 {
		j.Events([]Event{ev(i*int(time.Hour/time.Millisecond)/4, 20)}) // every 15 minutes after boot
	}
	j.PutSession(Session{Owner: 1, ID: "old", Began: t0, Ended: t0.Add(time.Minute), Written: t0.Add(time.Minute)})
	j.PutSession(Session{Owner: 1, ID: "long", Began: t0, Written: t0.Add(3 * time.Hour)})
	flush(t, j)
	j.Close()
	c.now = t0.Add(3 * time.Hour) // cutoff: 1h after boot
	j = open(t, dir, c, func(o *Options) { o.MaxAge = 2 * time.Hour })
	defer j.Close()
	got := events(t, j)
	if len(got) != 6 || got[0] != uint64(4*int(time.Hour/time.Millisecond)/4) {
		t.Fatalf("after retention: %d events from %v, want the 6 from 1h on", len(got), got)
	}
	ss, err := j.Sessions(Filter{}, 10)
	if err != nil || len(ss) != 1 || ss[0].ID != "long" {
		t.Fatalf("sessions after retention: %+v %v; want only the one written recently", ss, err)
	}
	// The old events share a segment with newer ones: not read, and
	// removed with it once all its events are past MaxAge.
	if st := j.Stats(); st.Pruned != 1 || st.Oldest.Before(c.now.Add(-2*time.Hour)) {
		t.Fatalf("pruned %d records, want the 1 session; oldest %v", st.Pruned, st.Oldest)
	}
	j.Close()
	c.now = t0.Add(5 * time.Hour)
	j = open(t, dir, c, func(o *Options) { o.MaxAge = 2 * time.Hour })
	if got := events(t, j); len(got) != 0 || j.Stats().Pruned != 10 || len(segmentFiles(t, dir)) != 0 {
		t.Fatalf("every event past MaxAge: %d read, %d pruned, %d segments left", len(got), j.Stats().Pruned, len(segmentFiles(t, dir)))
	}
}

// TestSizeCapHoldsAndTheOldestGoFirst writes five times the cap.
func TestSizeCapHoldsAndTheOldestGoFirst(t *testing.T) {
	const capBytes = 4 << 20
	dir := t.TempDir()
	c := &clock{now: t0.Add(time.Hour)}
	j := open(t, dir, c, func(o *Options) { o.MaxBytes = capBytes })
	defer j.Close()
	const n, size = 100_000, 200 // ~20 MB of records
	var batch []Event
	for i := range n {
		batch = append(batch, ev(i, size))
		if len(batch) == 1000 {
			j.Events(batch)
			batch = nil
			flush(t, j)
			if n := storeBytes(t, dir); n > capBytes {
				t.Fatalf("after %d events the store's files take %d bytes, cap %d", i+1, n, capBytes)
			}
		}
	}
	got := events(t, j)
	if len(got) == 0 || got[len(got)-1] != n-1 {
		t.Fatalf("the newest event is gone: %d kept", len(got))
	}
	for k := 1; k < len(got); k++ {
		if got[k] != got[k-1]+1 {
			t.Fatalf("a hole in what was kept: %d then %d (the oldest must go first)", got[k-1], got[k])
		}
	}
	st := j.Stats()
	t.Logf("kept %d of %d events (%d..%d), file %d bytes, in use %d, pruned %d", len(got), n, got[0], got[len(got)-1], st.FileBytes, st.InUseBytes, st.Pruned)
	if st.Dropped != 0 || st.Failed != 0 {
		t.Fatalf("dropped %d, failed %d", st.Dropped, st.Failed)
	}
}

func TestCorruptStoreIsMovedAsideAndANewOneStarts(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, FileName)
	if err := os.WriteFile(path, []byte(strings.Repeat("not a bbolt file ", 1000)), 0o600); err != nil {
		t.Fatal(err)
	}
	c := &clock{now: t0.Add(time.Hour)}
	j := open(t, dir, c, nil)
	defer j.Close()
	st := j.Stats()
	if st.MovedAside == "" {
		t.Fatal("a corrupt store was not moved aside")
	}
	if b, err := os.ReadFile(st.MovedAside); err != nil || !strings.HasPrefix(string(b), "not a bbolt file") {
		t.Fatalf("the old file is not kept as it was at %s: %v", st.MovedAside, err)
	}
	j.Events([]Event{ev(1, 20)})
	flush(t, j)
	if got := events(t, j); len(got) != 1 {
		t.Fatalf("the new store holds %v", got)
	}
	notes, _ := j.Notes()
	if len(notes) != 1 || !strings.Contains(notes[0].What, "moved to") {
		t.Fatalf("the new store does not say the old one was moved aside: %+v", notes)
	}
}

func TestSecondOpenOfAStoreInUseIsRefused(t *testing.T) {
	dir := t.TempDir()
	c := &clock{now: t0.Add(time.Hour)}
	j := open(t, dir, c, nil)
	defer j.Close()
	_, err := Open(Options{Dir: dir, BootID: "boot-1", Now: c.wall, BootNow: c.boot})
	if !errors.Is(err, errLocked) {
		t.Fatalf("second Open: %v, want it refused as in use", err)
	}
	if st := j.Stats(); st.MovedAside != "" {
		t.Fatal("a store in use was moved aside")
	}
}

// TestFullQueueDropsCountsAndNotes: the writer is never waited for; what
// does not fit is counted and said in the store.
func TestFullQueueDropsCountsAndNotes(t *testing.T) {
	dir := t.TempDir()
	c := &clock{now: t0.Add(time.Hour)}
	j := open(t, dir, c, func(o *Options) { o.MaxQueue = 10_000; o.FlushInterval = time.Hour })
	defer j.Close()
	var batch []Event
	for i := range 200 {
		batch = append(batch, ev(i, 100)) // 113 bytes each: 88 fit
	}
	j.Events(batch)
	flush(t, j)
	st := j.Stats()
	if st.Events+st.Dropped != 200 || st.Dropped != 200-88 {
		t.Fatalf("written %d, dropped %d; want 88 and 112", st.Events, st.Dropped)
	}
	notes, _ := j.Notes()
	if len(notes) != 1 || notes[0].Count != st.Dropped {
		t.Fatalf("notes %+v, want one counting %d dropped", notes, st.Dropped)
	}
}

// TestStoreDamagedInUseIsMarkedAndMovedAsideAtTheNextOpen overwrites
// the pages of the bbolt store's records while it is open: whatever bbolt
// then does (a panic, an error, garbage), nothing escapes as a panic, a
// store found corrupt takes no more session records, and the next Open
// starts a new one.
// The events, in their segments, are not touched and stay.
func TestStoreDamagedInUseIsMarkedAndMovedAsideAtTheNextOpen(t *testing.T) {
	dir := t.TempDir()
	c := &clock{now: t0.Add(time.Hour)}
	j := open(t, dir, c, nil)
	detail := json.RawMessage(`"` + strings.Repeat("d", 1000) + `"`)
	for i := range 20 {
		for k := range 50 {
			j.PutSession(Session{Owner: 1, ID: fmt.Sprintf("s%d-%d", i, k), Began: t0.Add(time.Duration(i*50+k) * time.Second), Detail: detail})
		}
		j.Events([]Event{ev(i, 100)})
		flush(t, j)
	}
	// Every branch and leaf page the records use, damaged while the
	// store is open (bbolt reads its file through a shared mapping, so it
	// sees the junk at once). Where bbolt put the records depends on how
	// the writer batched: junk at a fixed offset once hit only free pages,
	// and junk written before an Open is found by the Open instead. The
	// meta and freelist pages stay.
	var records []int
	pageSize := j.db.Info().PageSize
	j.db.Update(func(tx *bolt.Tx) error {
		for id := 2; ; {
			info, err := tx.Page(id)
			if err != nil || info == nil {
				return err
			}
			if info.Type == "branch" || info.Type == "leaf" {
				records = append(records, id)
			}
			id += 1 + info.OverflowCount
		}
	})
	if len(records) < 4 {
		t.Fatalf("the records take %d pages: too few to damage", len(records))
	}
	f, err := os.OpenFile(filepath.Join(dir, FileName), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	junk := make([]byte, pageSize)
	for i := range junk {
		junk[i] = byte(i*7 + 3)
	}
	for _, id := range records {
		if _, err := f.WriteAt(junk, int64(id)*int64(pageSize)); err != nil {
			t.Fatal(err)
		}
	}
	f.Close()

	_, err = j.Sessions(Filter{}, 10000)
	t.Logf("reading the damaged store: %v; corrupt %v", err, j.Stats().Corrupt)
	// bbolt notices it (a panic in its page checks).
	if !j.Stats().Corrupt || !errors.Is(err, ErrCorrupt) {
		t.Fatalf("junk on the %d record pages went unnoticed: corrupt %v, read %v", len(records), j.Stats().Corrupt, err)
	}
	j.PutSession(Session{Owner: 1, ID: "after", Began: t0})
	flush(t, j)
	if st := j.Stats(); st.Failed == 0 {
		t.Fatal("a store found corrupt took a session record")
	}
	j.Close()
	j = open(t, dir, c, nil)
	defer j.Close()
	if st := j.Stats(); st.MovedAside == "" {
		t.Fatal("a store found corrupt in use was not moved aside at the next Open")
	}
	j.PutSession(Session{Owner: 1, ID: "new", Began: t0})
	j.Events([]Event{ev(100, 20)})
	flush(t, j)
	if st := j.Stats(); st.Failed != 0 || st.Corrupt {
		t.Fatalf("the store after the damage: %+v", st)
	}
	if got := events(t, j); len(got) != 21 {
		t.Fatalf("the events' segments after the store was moved aside: %d events, want 21", len(got))
	}
}

// TestEventsOfEverySizeReadBackExactlyAcrossBatches: events of every
// size (tiny, a chunk's worth, larger than a chunk), handed in over
// several calls and batches, come back byte for byte, each once.
func TestEventsOfEverySizeReadBackExactlyAcrossBatches(t *testing.T) {
	dir := t.TempDir()
	c := &clock{now: t0.Add(time.Hour)}
	j := open(t, dir, c, nil)
	sizes := []int{8, 9, 100, chunkBytes - 40, chunkBytes + 1000, 20000, 8, 300}
	want := map[uint64][]byte{}
	i := 0
	for range 6 {
		var batch []Event
		for _, size := range sizes {
			e := ev(i, size)
			e.Data[len(e.Data)-1] = byte(i) // a byte that differs per event
			want[uint64(i)] = bytes.Clone(e.Data)
			batch = append(batch, e)
			i++
		}
		j.Events(batch[:3])
		j.Events(batch[3:])
		flush(t, j)
	}
	j.Close()
	j = open(t, dir, c, nil)
	defer j.Close()
	got := 0
	err := j.EventsBetween(time.Time{}, time.Unix(1<<33, 0), func(_ time.Time, d []byte) bool {
		id := binary.BigEndian.Uint64(d)
		if !bytes.Equal(d, want[id]) {
			t.Errorf("event %d: %d bytes back, differing from the %d handed in", id, len(d), len(want[id]))
		}
		got++
		return true
	})
	if err != nil || got != len(want) {
		t.Fatalf("read back %d of %d events: %v", got, len(want), err)
	}
}
