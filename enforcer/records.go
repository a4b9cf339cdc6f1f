package enforcer

import (
	"slices"

	"github.com/mcptrace/mcptrace/redact"
)

// Bounds of the kill records the enforcer keeps. Each session owner (uid)
// has its own quota, so one user who ends sessions in a loop evicts only
// its own oldest records, never another user's; the total bound keeps the
// table finite whatever the number of uids, evicting from the owner with
// the most records first.
const (
	// RecordLimit is each owner's quota of kill records.
	RecordLimit = 10000
	// TotalRecordLimit bounds the records of all owners together.
	TotalRecordLimit = 8 * RecordLimit
)

// sessionKey names a session's records: session IDs are scoped by owner
// (two users may both have "work").
type sessionKey struct {
	owner   uint32
	session string
}

// recordStore keeps kill records by session, with per-owner quotas.
// Reading one session's records costs O(its records), not O(all).
type recordStore struct {
	seq       uint64
	total     int
	bySession map[sessionKey]*sessionRecords
	byOwner   map[uint32]*ownerRecords
}

type sessionRecords struct {
	recs []storedRecord
}

type storedRecord struct {
	seq uint64 // global order of storing, for Records
	rec KillRecord
}

type ownerRecords struct {
	n int
	// sessions in the order their first record was stored: eviction
	// takes the oldest record of the first.
	order []sessionKey
}

// add stores rec (argv redacted again: records from saved state or an
// earlier agent are not trusted to be) and evicts beyond the bounds.
func (s *recordStore) add(rec KillRecord) {
	if s.bySession == nil {
		s.bySession, s.byOwner = map[sessionKey]*sessionRecords{}, map[uint32]*ownerRecords{}
	}
	rec.Argv = redact.Argv(rec.Argv)
	k := sessionKey{rec.Owner, rec.Session}
	sr := s.bySession[k]
	if sr == nil {
		sr = &sessionRecords{}
		s.bySession[k] = sr
		o := s.byOwner[rec.Owner]
		if o == nil {
			o = &ownerRecords{}
			s.byOwner[rec.Owner] = o
		}
		o.order = append(o.order, k)
	}
	s.seq++
	sr.recs = append(sr.recs, storedRecord{seq: s.seq, rec: rec})
	s.byOwner[rec.Owner].n++
	s.total++
	for s.byOwner[rec.Owner].n > RecordLimit {
		s.evictOldest(rec.Owner)
	}
	for s.total > TotalRecordLimit {
		s.evictOldest(s.largestOwner())
	}
}

// evictOldest drops owner's oldest record.
func (s *recordStore) evictOldest(owner uint32) {
	o := s.byOwner[owner]
	k := o.order[0]
	sr := s.bySession[k]
	sr.recs[0] = storedRecord{}
	sr.recs = sr.recs[1:]
	o.n--
	s.total--
	if len(sr.recs) == 0 {
		delete(s.bySession, k)
		o.order = o.order[1:]
	}
	if o.n == 0 {
		delete(s.byOwner, owner)
	}
}

// largestOwner is the owner with the most records (the lowest uid among
// equals, so eviction is deterministic). O(owners).
func (s *recordStore) largestOwner() uint32 {
	var best uint32
	n := -1
	for uid, o := range s.byOwner {
		if o.n > n || o.n == n && uid < best {
			best, n = uid, o.n
		}
	}
	return best
}

// of returns a copy of one session's records, oldest first.
func (s *recordStore) of(owner uint32, session string) []KillRecord {
	sr := s.bySession[sessionKey{owner, session}]
	if sr == nil {
		return nil
	}
	out := make([]KillRecord, len(sr.recs))
	for i, r := range sr.recs {
		out[i] = r.rec
		out[i].Argv = slices.Clone(r.rec.Argv)
	}
	return out
}

// all returns a copy of every record in the order they were stored.
func (s *recordStore) all() []KillRecord {
	stored := make([]storedRecord, 0, s.total)
	for _, sr := range s.bySession {
		stored = append(stored, sr.recs...)
	}
	slices.SortFunc(stored, func(a, b storedRecord) int {
		switch {
		case a.seq < b.seq:
			return -1
		case a.seq > b.seq:
			return 1
		}
		return 0
	})
	out := make([]KillRecord, len(stored))
	for i, r := range stored {
		out[i] = r.rec
		out[i].Argv = slices.Clone(r.rec.Argv)
	}
	return out
}
