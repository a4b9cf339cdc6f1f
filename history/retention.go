package history

import (
	"bytes"
	"cmp"
	"encoding/json"
	"slices"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Retention. Events older than MaxAge are not read (EventsBetween) and
// go with their segment once its newest event is older than MaxAge;
// notes and sessions older than MaxAge go at once, sessions by the last
// time the agent wrote them (a session still running keeps its record
// however long ago it began), and notes past maxNotes, the oldest
// first.
//
// Size is shared by uid: each uid holds the events of its processes
// (its stream, streams.go) and the records of the sessions it owns.
// While the records use more than 3/4 of MaxBytes, the uid that holds
// the most loses its oldest records (whole segments, then sessions)
// until it holds no more than the next one, or the records use 5/8 of
// MaxBytes; then the uid that holds the most then. So one user's churn
// removes only their own records while they hold more than any other
// uid: root's and every other user's survive any one user's flood that
// the store has room for. Before each batch of events is written, room
// is made for it: a batch is at most a segment, MaxBytes/32
// (segments.go), so the files stay within MaxBytes.

// maxDeletesPerTx bounds one retention transaction.
const maxDeletesPerTx = 100_000

// maxNotes bounds the journal's notes about itself.
const maxNotes = 10_000

// ageCutoff is the wall time (ns) before which records are past MaxAge.
func (j *Journal) ageCutoff() uint64 { return wallNS(j.opts.Now().Add(-j.opts.MaxAge)) }

// holding is what one uid holds: the bytes of its stream and of the
// records of the sessions it owns.
type holding struct {
	uid              uint32
	events, sessions int64
}

func (h holding) bytes() int64 { return h.events + h.sessions }

// prune removes what is past MaxAge, and the oldest records of the uid
// that holds the most while the records and room more bytes would take
// more than 3/4 of MaxBytes.
func (j *Journal) prune(room int64) {
	cutoff := j.ageCutoff()
	for _, st := range j.segs.all() {
		newest := st.log.lastSeq
		j.dropSegments(st, func(_ int, s segment) bool { return s.empty() && s.seq != newest || !s.empty() && s.newest < cutoff })
	}
	j.trim(func(tx *bolt.Tx) [][]byte { return j.pastAge(tx, cutoff) })
	for range 256 {
		in := j.inUse() + room
		if in <= j.opts.MaxBytes*3/4 {
			return
		}
		held, err := j.holdings()
		if err != nil || len(held) == 0 {
			return
		}
		top := held[0]
		next := int64(0)
		if len(held) > 1 {
			next = held[1].bytes()
		}
		// What goes: down to the next uid's share, or to 5/8 of
		// MaxBytes, whichever is less; at least one record.
		over := max(1, min(in-j.opts.MaxBytes*5/8, top.bytes()-next))
		if !j.crowdOut(top, over) {
			return
		}
	}
}

// holdings is what each uid holds, the most first (ties: the higher
// uid first, so root's records go last).
func (j *Journal) holdings() ([]holding, error) {
	by := map[uint32]*holding{}
	at := func(uid uint32) *holding {
		h := by[uid]
		if h == nil {
			h = &holding{uid: uid}
			by[uid] = h
		}
		return h
	}
	for _, st := range j.segs.all() {
		if b := st.log.bytes(); b > 0 {
			at(st.uid).events += b
		}
	}
	err := j.view("measuring what each uid holds", func(tx *bolt.Tx) error {
		db, mb := tx.Bucket(bucketDetails), tx.Bucket(bucketMembers)
		return tx.Bucket(bucketSessions).ForEach(func(k, v []byte) error {
			if _, owner, _, ok := parseSessionKey(k); ok {
				at(owner).sessions += int64(3*len(k) + len(v) + len(db.Get(k)) + len(mb.Get(k)))
			}
			return nil
		})
	})
	if err != nil {
		return nil, err
	}
	out := make([]holding, 0, len(by))
	for _, h := range by {
		out = append(out, *h)
	}
	slices.SortFunc(out, func(a, b holding) int { return cmp.Or(cmp.Compare(b.bytes(), a.bytes()), cmp.Compare(b.uid, a.uid)) })
	return out, nil
}

// crowdOut removes about want bytes of h's oldest records: its oldest
// segments, or when it has none left, its oldest sessions. It counts
// what went in Stats.Evicted, and reports whether anything did.
func (j *Journal) crowdOut(h holding, want int64) bool {
	if h.events > 0 {
		for _, st := range j.segs.all() {
			if st.uid != h.uid {
				continue
			}
			var sum int64
			before := j.stats.pruned.Load()
			gone := j.dropSegments(st, func(_ int, s segment) bool {
				if sum >= want {
					return false
				}
				sum += s.size
				return true
			})
			j.evicted(h.uid, j.stats.pruned.Load()-before)
			return gone
		}
		return false
	}
	before := j.stats.pruned.Load()
	gone := j.trim(func(tx *bolt.Tx) [][]byte {
		var keys [][]byte
		var sum int64
		db := tx.Bucket(bucketDetails)
		c := tx.Bucket(bucketSessions).Cursor()
		for k, v := c.First(); k != nil && sum < want && len(keys) < maxDeletesPerTx; k, v = c.Next() {
			if _, owner, _, ok := parseSessionKey(k); ok && owner == h.uid {
				keys = append(keys, bytes.Clone(k))
				sum += int64(2*len(k) + len(v) + len(db.Get(k)))
			}
		}
		return keys
	})
	j.evicted(h.uid, j.stats.pruned.Load()-before)
	return gone
}

// evicted counts n records of uid removed to make room, and says so in
// the log at most once a minute.
func (j *Journal) evicted(uid uint32, n uint64) {
	if n == 0 {
		return
	}
	j.evictMu.Lock()
	defer j.evictMu.Unlock()
	if j.evictedBy == nil {
		j.evictedBy = map[uint32]uint64{}
	}
	if _, ok := j.evictedBy[uid]; !ok && len(j.evictedBy) >= maxStreams {
		uid = sharedStream
	}
	j.evictedBy[uid] += n
	if now := time.Now(); now.Sub(j.lastEvict) > time.Minute {
		j.lastEvict = now
		j.log.Warn("history: the store is full; the uid that holds the most loses its oldest records (history.max-bytes)", "uid", uid, "records", n)
	}
}

// pastAge is the keys of the sessions past MaxAge: begun before cutoff
// and last written before it.
func (j *Journal) pastAge(tx *bolt.Tx, cutoff uint64) [][]byte {
	var gone [][]byte
	c := tx.Bucket(bucketSessions).Cursor()
	for k, v := c.First(); k != nil && keyTime(k) < cutoff && len(gone) < maxDeletesPerTx; k, v = c.Next() {
		var w struct {
			Written time.Time `json:"written"`
		}
		if json.Unmarshal(v, &w) != nil || wallNS(w.Written) < cutoff {
			gone = append(gone, bytes.Clone(k))
		}
	}
	return gone
}

// dropSegments removes the segments of st that drop selects; it reports
// whether it removed any.
func (j *Journal) dropSegments(st stream, drop func(i int, s segment) bool) bool {
	segs, events, err := st.log.remove(drop)
	if err != nil {
		j.log.Error("history: retention could not remove an events segment", "err", err)
	}
	j.stats.pruned.Add(uint64(events))
	return segs > 0
}

// trim removes, in one transaction, the notes past MaxAge or past
// maxNotes and the sessions whose keys sessions(tx) gives; it reports
// whether it removed any.
func (j *Journal) trim(sessions func(*bolt.Tx) [][]byte) bool {
	removed := 0
	cutoff := j.ageCutoff()
	err := j.update("removing old records", func(tx *bolt.Tx) error {
		nb := tx.Bucket(bucketNotes)
		extra := nb.Stats().KeyN - maxNotes
		c := nb.Cursor()
		for k, _ := c.First(); k != nil && (keyTime(k) < cutoff || extra > 0) && removed < maxDeletesPerTx; k, _ = c.First() {
			if err := c.Delete(); err != nil {
				return err
			}
			removed++
			extra--
		}
		sb, db := tx.Bucket(bucketSessions), tx.Bucket(bucketDetails)
		for _, k := range sessions(tx) {
			if err := sb.Delete(k); err != nil {
				return err
			}
			if err := db.Delete(k); err != nil {
				return err
			}
			if err := tx.Bucket(bucketMembers).Delete(k); err != nil {
				return err
			}
			removed++
		}
		j.sizes(tx)
		return nil
	})
	if err != nil {
		j.log.Error("history: retention could not remove old records", "err", err)
		return false
	}
	j.stats.pruned.Add(uint64(removed))
	if removed > 0 {
		// The counts of free pages are those of this commit; the next
		// commit sees them as free.
		_ = j.update("measuring", func(tx *bolt.Tx) error { j.sizes(tx); return nil })
	}
	return removed > 0
}
