package history

import (
	"encoding/json"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Retention. Events older than MaxAge are not read (EventsBetween) and
// go with their segment once its newest event is older than MaxAge;
// notes and sessions older than MaxAge go at once, sessions by the last
// time the agent wrote them (a session still running keeps its record
// however long ago it began). While the records use more than 3/4 of
// MaxBytes, the oldest segments (the first written) go until they use
// 5/8 of it, and the notes and sessions older than the oldest event kept
// go with them. Before each batch of events is written, room is made for
// it: a batch is at most a segment, MaxBytes/32 (segments.go), so the
// files stay within MaxBytes.

// maxDeletesPerTx bounds one retention transaction.
const maxDeletesPerTx = 100_000

// ageCutoff is the wall time (ns) before which records are past MaxAge.
func (j *Journal) ageCutoff() uint64 { return wallNS(j.opts.Now().Add(-j.opts.MaxAge)) }

// prune removes what is past MaxAge, and the oldest records while they
// and room more bytes would take more than 3/4 of MaxBytes.
func (j *Journal) prune(room int64) {
	cutoff := j.ageCutoff()
	newest := j.segs.lastSeq
	j.dropSegments(func(_ int, s segment) bool { return s.empty() && s.seq != newest || !s.empty() && s.newest < cutoff })
	j.trim(func(*bolt.Tx) uint64 { return cutoff })
	for range 16 {
		in := j.inUse() + room
		if in <= j.opts.MaxBytes*3/4 {
			return
		}
		over := in - j.opts.MaxBytes*5/8
		var sum int64
		var past uint64 // past the newest event of those that go
		segs := j.segs.snapshot()
		n := 0
		for ; n < len(segs) && sum < over; n++ {
			sum += segs[n].size
			past = max(past, segs[n].newest+1)
		}
		dropped := j.dropSegments(func(i int, _ segment) bool { return i < n })
		trimmed := j.trim(func(tx *bolt.Tx) uint64 {
			if t := j.segs.oldest(); t != 0 {
				return t
			}
			// No event is kept: the oldest session goes, at least.
			if k, _ := tx.Bucket(bucketSessions).Cursor().First(); k != nil {
				past = max(past, keyTime(k)+1)
			}
			return past
		})
		if !dropped && !trimmed {
			return
		}
	}
}

// dropSegments removes the segments drop selects; it reports whether it
// removed any.
func (j *Journal) dropSegments(drop func(i int, s segment) bool) bool {
	segs, events, err := j.segs.remove(drop)
	if err != nil {
		j.log.Error("history: retention could not remove an events segment", "err", err)
	}
	j.stats.pruned.Add(uint64(events))
	return segs > 0
}

// trim removes, in one transaction, the notes and sessions older than
// the time before(tx) gives; it reports whether it removed any.
func (j *Journal) trim(before func(*bolt.Tx) uint64) bool {
	removed := 0
	err := j.update("removing old records", func(tx *bolt.Tx) error {
		t := before(tx)
		c := tx.Bucket(bucketNotes).Cursor()
		for k, _ := c.First(); k != nil && keyTime(k) < t && removed < maxDeletesPerTx; k, _ = c.First() {
			if err := c.Delete(); err != nil {
				return err
			}
			removed++
		}
		sb := tx.Bucket(bucketSessions)
		var gone [][]byte
		err := sb.ForEach(func(k, v []byte) error {
			if keyTime(k) >= t {
				return nil
			}
			var w struct {
				Written time.Time `json:"written"`
			}
			if json.Unmarshal(v, &w) != nil || wallNS(w.Written) < t {
				gone = append(gone, k)
			}
			return nil
		})
		if err != nil {
			return err
		}
		db := tx.Bucket(bucketDetails)
		for _, k := range gone {
			if err := sb.Delete(k); err != nil {
				return err
			}
			if err := db.Delete(k); err != nil {
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
