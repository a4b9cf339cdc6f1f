package history

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Retention: records older than MaxAge go, and while the records use
// more than 3/4 of MaxBytes the oldest go until they use 5/8 of it, so
// the file (records, free pages bbolt reuses, and one growth step of
// MaxBytes/16) stays within MaxBytes. Events and notes go by their time,
// sessions by the last time the agent wrote them: a session still
// running keeps its record however long ago it began.

// maxDeletesPerTx bounds one retention transaction.
const maxDeletesPerTx = 100_000

func (j *Journal) prune() {
	cutoff := wallNS(j.opts.Now().Add(-j.opts.MaxAge))
	j.trim(func(_ *bolt.Tx) uint64 { return cutoff })
	for range 16 {
		over := j.stats.inUse.Load() - j.opts.MaxBytes*5/8
		if j.stats.inUse.Load() <= j.opts.MaxBytes*3/4 || over <= 0 {
			return
		}
		// The time before which the oldest records take `over` bytes.
		if !j.trim(func(tx *bolt.Tx) uint64 { return timeOfBytes(tx, over) }) {
			return
		}
	}
}

// trim removes, in one transaction, the records older than the time
// before(tx) gives; it reports whether it removed any.
func (j *Journal) trim(before func(*bolt.Tx) uint64) bool {
	removed := 0
	err := j.update("removing old records", func(tx *bolt.Tx) error {
		t := before(tx)
		// Chunks of events sort by their oldest event: from the first,
		// the events older than t go.
		eb := tx.Bucket(bucketEvents)
		c := eb.Cursor()
		for k, v := c.First(); k != nil && keyTime(k) < t && removed < maxDeletesPerTx; k, v = c.First() {
			n, kept, oldest, err := splitChunk(v, t)
			if err != nil {
				return fmt.Errorf("%w: chunk %x: %v", ErrCorrupt, k, err)
			}
			if err := c.Delete(); err != nil {
				return err
			}
			removed += n
			if kept != nil {
				// The chunk spans t: its newer events stay, under the
				// key of the oldest of them, and what follows waits.
				if err := eb.Put(appendChunkKey(nil, oldest, binary.BigEndian.Uint64(k[8:])), kept); err != nil {
					return err
				}
				break
			}
		}
		c = tx.Bucket(bucketNotes).Cursor()
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

// splitChunk counts the events of chunk v older than t (ns), and returns
// a new chunk of the others (nil when there are none) with its oldest
// time.
func splitChunk(v []byte, t uint64) (older int, kept []byte, oldest uint64, err error) {
	var rest []byte
	err = eachInChunk(v, func(key, data []byte) bool {
		if keyTime(key) < t {
			older++
			return true
		}
		if rest == nil {
			oldest = keyTime(key)
		}
		oldest = min(oldest, keyTime(key))
		if rest == nil {
			rest = make([]byte, chunkHeadLen, len(v))
			copy(rest, v[:chunkHeadLen])
		}
		rest = append(rest, key...)
		rest = binary.AppendUvarint(rest, uint64(len(data)))
		rest = append(rest, data...)
		return true
	})
	return older, rest, oldest, err
}

// perRecord is what bbolt spends on a record besides its key and value
// (its element header in a leaf page, and page slack).
const perRecord = 24

// timeOfBytes is the time before which the oldest chunks of events take
// at least n bytes: the oldest time of the first chunk past them (chunks
// sort by their oldest event; one that spans a long time, a replay's old
// events beside new ones, does not push the cut past the chunks after
// it). When all events take less, it is past the newest event and the
// oldest session.
func timeOfBytes(tx *bolt.Tx, n int64) uint64 {
	var sum int64
	var first, last uint64
	c := tx.Bucket(bucketEvents).Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		if sum == 0 {
			first = keyTime(k)
		}
		if sum >= n {
			// Past the first chunk's oldest event at least, so that a
			// trim always removes something.
			return max(keyTime(k), first+1)
		}
		sum += int64(len(k) + len(v) + perRecord)
		last = max(last, chunkNewest(v)+1)
	}
	if k, _ := tx.Bucket(bucketSessions).Cursor().First(); k != nil {
		last = max(last, keyTime(k)+1)
	}
	return last
}
