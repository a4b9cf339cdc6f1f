package history

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Filter selects sessions: those of Owner (every owner when nil) that
// overlap [From, To] (unbounded where zero), and, when ID is not empty,
// with that ID.
type Filter struct {
	Owner    *uint32
	ID       string
	From, To time.Time
}

func (f Filter) match(s Session) bool {
	if f.Owner != nil && s.Owner != *f.Owner || f.ID != "" && s.ID != f.ID {
		return false
	}
	if !f.To.IsZero() && s.Began.After(f.To) {
		return false
	}
	last := s.Ended
	if last.IsZero() {
		last = s.Written
	}
	return f.From.IsZero() || !last.Before(f.From)
}

// Sessions returns up to limit sessions f selects, the newest (by Began)
// first, without their details.
func (j *Journal) Sessions(f Filter, limit int) ([]Session, error) {
	return j.selectSessions(f, limit, nil)
}

// SessionsWithPID returns up to limit sessions f selects whose records
// hold a process pid, the newest first, without their details: the
// index (records.go, members) decides, no detail is read. A record
// written before the index is returned as if it held pid.
func (j *Journal) SessionsWithPID(f Filter, pid uint32, limit int) ([]Session, error) {
	return j.selectSessions(f, limit, func(tx *bolt.Tx, k []byte) bool {
		m := tx.Bucket(bucketMembers).Get(k)
		return m == nil || holdsPID(m, pid)
	})
}

// selectSessions is Sessions of the records hold (when not nil) keeps.
func (j *Journal) selectSessions(f Filter, limit int, hold func(tx *bolt.Tx, k []byte) bool) ([]Session, error) {
	var out []Session
	err := j.view("reading sessions", func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketSessions).Cursor()
		for k, v := c.Last(); k != nil && len(out) < limit; k, v = c.Prev() {
			if _, owner, id, ok := parseSessionKey(k); !ok || f.Owner != nil && owner != *f.Owner || f.ID != "" && id != f.ID {
				continue
			}
			if hold != nil && !hold(tx, k) {
				continue
			}
			var s Session
			if err := json.Unmarshal(v, &s); err != nil {
				return fmt.Errorf("history: session record %x: %w", k, err)
			}
			if f.match(s) {
				out = append(out, s)
			}
		}
		return nil
	})
	return out, err
}

// SessionAt returns the session of owner and id that began at began
// (Session.Began, exactly), with its details.
func (j *Journal) SessionAt(owner uint32, id string, began time.Time) (Session, bool, error) {
	var out Session
	found := false
	err := j.view("reading a session", func(tx *bolt.Tx) error {
		k := sessionKey(began, owner, id)
		v := tx.Bucket(bucketSessions).Get(k)
		if v == nil {
			return nil
		}
		if err := json.Unmarshal(v, &out); err != nil {
			return fmt.Errorf("history: session record %x: %w", k, err)
		}
		out.Detail, found = bytes.Clone(tx.Bucket(bucketDetails).Get(k)), true
		return nil
	})
	return out, found, err
}

// Session returns the newest session f selects, with its details.
func (j *Journal) Session(f Filter) (Session, bool, error) {
	var out Session
	found := false
	err := j.view("reading sessions", func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketSessions).Cursor()
		for k, v := c.Last(); k != nil; k, v = c.Prev() {
			if _, owner, id, ok := parseSessionKey(k); !ok || f.Owner != nil && owner != *f.Owner || f.ID != "" && id != f.ID {
				continue
			}
			var s Session
			if err := json.Unmarshal(v, &s); err != nil {
				return fmt.Errorf("history: session record %x: %w", k, err)
			}
			if f.match(s) {
				s.Detail = bytes.Clone(tx.Bucket(bucketDetails).Get(k))
				out, found = s, true
				return nil
			}
		}
		return nil
	})
	return out, found, err
}

// EventsBetween calls fn with the data of each event from `from` to `to`
// (inclusive), oldest first, until fn returns false; an event stored
// twice (records.go) is called once, and one older than MaxAge, which
// retention removes with the rest of its segment, not at all. The data
// is valid only during the call. It holds the range's events in memory:
// it is for forensics and tests, not for a live path.
func (j *Journal) EventsBetween(from, to time.Time, fn func(at time.Time, data []byte) bool) error {
	type found struct{ key, data []byte }
	var evs []found
	start, end := max(wallNS(from), j.ageCutoff()), wallNS(to)
	for _, st := range j.segs.all() {
		for _, s := range st.log.snapshot() {
			if s.empty() || s.oldest > end || s.newest < start {
				continue
			}
			err := st.log.read(s, start, end, func(chunk []byte) error {
				err := eachInChunk(chunk, func(key, data []byte) bool {
					if t := keyTime(key); t >= start && t <= end {
						evs = append(evs, found{bytes.Clone(key), bytes.Clone(data)})
					}
					return true
				})
				if err != nil {
					// A frame whose checksum holds but whose chunk does
					// not read: written so by a fault of ours.
					return fmt.Errorf("%w: segment %s: %v", errDamagedSegment, st.log.path(s.seq), err)
				}
				return nil
			})
			if err != nil {
				return err
			}
		}
	}
	slices.SortStableFunc(evs, func(a, b found) int { return bytes.Compare(a.key, b.key) })
	for i, e := range evs {
		if i > 0 && bytes.Equal(e.key, evs[i-1].key) {
			continue
		}
		if !fn(time.Unix(0, int64(keyTime(e.key))), e.data) {
			return nil
		}
	}
	return nil
}

// Notes returns the journal's notes about itself, oldest first.
func (j *Journal) Notes() ([]Note, error) {
	var out []Note
	err := j.view("reading sessions", func(tx *bolt.Tx) error {
		return tx.Bucket(bucketNotes).ForEach(func(k, v []byte) error {
			var n Note
			if err := json.Unmarshal(v, &n); err != nil {
				return fmt.Errorf("history: note %x: %w", k, err)
			}
			out = append(out, n)
			return nil
		})
	})
	return out, err
}
