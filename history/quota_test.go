package history

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"
)

// uidEvents is n events of uid, numbered from first, size bytes each.
func uidEvents(uid uint32, first, n, size int) []Event {
	evs := make([]Event, 0, n)
	for i := range n {
		e := ev(first+i, size)
		e.UID = uid
		evs = append(evs, e)
	}
	return evs
}

// flood has uid write total bytes of events in batches of 256 KiB,
// numbered from first, each flushed; it returns the next number.
func flood(t *testing.T, j *Journal, uid uint32, first int, total int64) int {
	t.Helper()
	const size, per = 4000, 64
	for n := int64(0); n < total; n += size * per {
		j.Events(uidEvents(uid, first, per, size))
		first += per
		flush(t, j)
	}
	return first
}

// TestOneUsersFloodEvictsOnlyTheirOwnRecords: uid 65534 writes ten
// times the store's size in events (issue 31: two exec loops with a
// 4,000-byte argv erased root's history in 70 s). Root's and uid 1000's
// events and sessions all stay; only the flooder's oldest records go,
// counted under its uid; the files stay within MaxBytes. When uid 1000
// floods too, each flooder loses its own, and root's stay.
func TestOneUsersFloodEvictsOnlyTheirOwnRecords(t *testing.T) {
	dir := t.TempDir()
	c := &clock{now: t0.Add(time.Hour)}
	const maxBytes = 4 << 20
	j := open(t, dir, c, func(o *Options) { o.MaxBytes = maxBytes })
	defer j.Close()

	j.Events(uidEvents(0, 0, 300, 300))     // root's: 0..299
	j.Events(uidEvents(1000, 300, 50, 300)) // uid 1000's: 300..349
	detail := json.RawMessage(`{"processes":[{"comm":"node"}]}`)
	for _, owner := range []uint32{0, 1000} {
		j.PutSession(Session{Owner: owner, ID: "work", Began: t0.Add(time.Minute), Ended: t0.Add(50 * time.Minute), Written: c.now, Killed: 3, Detail: detail})
	}
	flush(t, j)

	kept := func(from, to int) bool {
		ids := events(t, j)
		for i := from; i < to; i++ {
			if !slices.Contains(ids, uint64(i)) {
				return false
			}
		}
		return true
	}
	sessionOf := func(owner uint32) bool {
		_, ok, err := j.Session(Filter{Owner: &owner, ID: "work"})
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	within := func(when string) {
		t.Helper()
		st := j.Stats()
		if st.FileBytes > maxBytes || st.InUseBytes > maxBytes {
			t.Fatalf("%s: the store takes %d bytes (%d in use), bound %d", when, st.FileBytes, st.InUseBytes, maxBytes)
		}
	}

	next := flood(t, j, 65534, 1_000_000, 10*maxBytes)
	within("after uid 65534's flood")
	if !kept(0, 350) || !sessionOf(0) || !sessionOf(1000) {
		t.Fatalf("after uid 65534 wrote %d MiB: root's events kept %v, uid 1000's %v; sessions: root's %v, uid 1000's %v",
			10*maxBytes>>20, kept(0, 300), kept(300, 350), sessionOf(0), sessionOf(1000))
	}
	st := j.Stats()
	if st.Evicted[65534] == 0 || len(st.Evicted) != 1 {
		t.Fatalf("evicted for size: %v, want uid 65534's records alone", st.Evicted)
	}
	// The flooder keeps its newest: the store is its to fill, past
	// what the others hold.
	if !kept(next-64, next) {
		t.Fatal("the flooder's newest batch is gone")
	}

	flood(t, j, 1000, 2_000_000, 4*maxBytes)
	within("after uid 1000's flood")
	if !kept(0, 300) || !sessionOf(0) {
		t.Fatalf("after two users' floods: root's events kept %v, root's session %v", kept(0, 300), sessionOf(0))
	}
	st = j.Stats()
	if st.Evicted[65534] == 0 || st.Evicted[1000] == 0 || st.Evicted[0] != 0 {
		t.Fatalf("evicted for size: %v, want both flooders' and none of root's", st.Evicted)
	}
	// Each flooder holds about as much as the other.
	held, err := j.holdings()
	if err != nil {
		t.Fatal(err)
	}
	by := map[uint32]int64{}
	for _, h := range held {
		by[h.uid] = h.bytes()
	}
	if a, b := by[65534], by[1000]; a > 2*b+uidLog(t, j, 0).maxSize || b > 2*a+uidLog(t, j, 0).maxSize {
		t.Fatalf("the flooders hold %d and %d bytes: not shared", a, b)
	}
}

// TestSessionsGoByTheirOwnersShare: a user whose session records are
// what fills the store (no events at all) loses their own oldest
// sessions; root's session stays.
func TestSessionsGoByTheirOwnersShare(t *testing.T) {
	dir := t.TempDir()
	c := &clock{now: t0.Add(time.Hour)}
	const maxBytes = 2 << 20
	j := open(t, dir, c, func(o *Options) { o.MaxBytes = maxBytes })
	defer j.Close()
	j.PutSession(Session{Owner: 0, ID: "root", Began: t0, Ended: t0.Add(time.Minute), Written: c.now, Detail: json.RawMessage(`{}`)})
	big := json.RawMessage(`"` + strings.Repeat("y", 20_000) + `"`)
	for i := range 400 { // 8 MB of records
		j.PutSession(Session{Owner: 65534, ID: "s", Began: t0.Add(time.Duration(i+1) * time.Second), Written: c.now, Detail: big})
		if i%20 == 19 {
			flush(t, j)
		}
	}
	flush(t, j)
	root := uint32(0)
	if _, ok, err := j.Session(Filter{Owner: &root, ID: "root"}); err != nil || !ok {
		t.Fatalf("root's session after uid 65534's 8 MB of sessions: found %v, %v", ok, err)
	}
	if st := j.Stats(); st.Evicted[65534] == 0 || st.InUseBytes > maxBytes {
		t.Fatalf("evicted %v, in use %d", st.Evicted, st.InUseBytes)
	}
	nobody := uint32(65534)
	list, err := j.Sessions(Filter{Owner: &nobody}, 1000)
	if err != nil || len(list) == 0 || len(list) == 400 {
		t.Fatalf("uid 65534 keeps %d of its 400 sessions (%v): want its newest", len(list), err)
	}
	if !list[0].Began.Equal(t0.Add(400 * time.Second)) {
		t.Fatalf("uid 65534's newest kept session began %v, want its last", list[0].Began)
	}
}

// TestSubordinateUIDsShareOneStream: events of a hundred subordinate
// uids (a rootless container's) go to the shared stream, and uids past
// maxStreams too: no more streams than the bound, and a flood spread over
// subordinate uids removes its own records, not root's.
func TestSubordinateUIDsShareOneStream(t *testing.T) {
	dir := t.TempDir()
	c := &clock{now: t0.Add(time.Hour)}
	const maxBytes = 2 << 20
	j := open(t, dir, c, func(o *Options) { o.MaxBytes = maxBytes })
	defer j.Close()
	j.Events(uidEvents(0, 0, 200, 300))
	flush(t, j)
	n := 1_000_000
	for range 8 * maxBytes / (100 * 4000) {
		var evs []Event
		for sub := range 100 {
			evs = append(evs, uidEvents(uint32(100_000+sub), n, 1, 4000)...)
			n++
		}
		j.Events(evs)
		flush(t, j)
	}
	for uid := range uint32(2 * maxStreams) {
		j.Events(uidEvents(1000+uid, n, 1, 10))
		n++
	}
	flush(t, j)
	if got := len(j.segs.all()); got > maxStreams+1 {
		t.Fatalf("%d streams, bound %d and the shared one", got, maxStreams)
	}
	ids := events(t, j)
	for i := range 200 {
		if !slices.Contains(ids, uint64(i)) {
			t.Fatalf("root's event %d is gone after a flood over 100 subordinate uids (evicted: %v)", i, j.Stats().Evicted)
		}
	}
	if st := j.Stats(); st.Evicted[sharedStream] == 0 || st.Evicted[0] != 0 {
		t.Fatalf("evicted %v: want the shared stream's only", st.Evicted)
	}
}

// TestSessionsWithPIDReadTheIndexOnly: a lookup by pid returns the
// sessions whose records hold it (and a record without the index), not
// the others, newest first.
func TestSessionsWithPIDReadTheIndexOnly(t *testing.T) {
	dir := t.TempDir()
	c := &clock{now: t0.Add(time.Hour)}
	j := open(t, dir, c, nil)
	defer j.Close()
	for i := range 200 {
		j.PutSession(Session{Owner: 1000, ID: "s", Began: t0.Add(time.Duration(i) * time.Second), Written: c.now, PIDs: []uint32{uint32(5000 + i), 9, uint32(7000 + i)}, Detail: json.RawMessage(`{}`)})
	}
	j.PutSession(Session{Owner: 1000, ID: "old", Began: t0.Add(time.Millisecond), Written: c.now, Detail: json.RawMessage(`{}`)})
	flush(t, j)
	ids := func(pid uint32, limit int) []string {
		list, err := j.SessionsWithPID(Filter{}, pid, limit)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, s := range list {
			out = append(out, s.ID+"@"+s.Began.Sub(t0).String())
		}
		return out
	}
	if got := ids(7150, 10); !slices.Equal(got, []string{"s@2m30s", "old@1ms"}) {
		t.Errorf("pid 7150: %v, want the session that held it and the record without an index", got)
	}
	if got := ids(9, 3); !slices.Equal(got, []string{"s@3m19s", "s@3m18s", "s@3m17s"}) {
		t.Errorf("pid 9, 3 at most: %v, want the newest three", got)
	}
	if got := ids(6000, 10); !slices.Equal(got, []string{"old@1ms"}) {
		t.Errorf("a pid no record holds: %v, want the record without an index alone", got)
	}
}
