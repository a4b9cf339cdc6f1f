package enforcer

import (
	"slices"

	"github.com/mcptrace/mcptrace/internal/quota"
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

// recordStore keeps kill records by the order they were stored (a FIFO
// with the per-owner bounds) and, per session, the keys of its records,
// oldest first: reading one session's records costs O(its records), not
// O(all).
type recordStore struct {
	seq       uint64
	fifo      *quota.FIFO[uint64, KillRecord]
	bySession map[sessionKey][]uint64
}

// add stores rec (argv redacted again: records from saved state or an
// earlier agent are not trusted to be) and evicts beyond the bounds.
func (s *recordStore) add(rec KillRecord) {
	if s.fifo == nil {
		s.fifo = quota.New[uint64, KillRecord](RecordLimit, TotalRecordLimit)
		s.fifo.OnEvict = s.evicted
		s.bySession = map[sessionKey][]uint64{}
	}
	rec.Argv = redact.Argv(rec.Argv)
	s.seq++
	k := sessionKey{rec.Owner, rec.Session}
	s.bySession[k] = append(s.bySession[k], s.seq)
	s.fifo.Put(rec.Owner, s.seq, rec)
}

// evicted forgets an evicted record in its session's list, where it is the
// oldest: the FIFO evicts an owner's oldest record, and a session's
// records are stored in order.
func (s *recordStore) evicted(seq uint64, rec KillRecord) {
	k := sessionKey{rec.Owner, rec.Session}
	l := s.bySession[k]
	if len(l) > 0 && l[0] == seq {
		l = l[1:]
	} else {
		l = slices.DeleteFunc(l, func(x uint64) bool { return x == seq })
	}
	if len(l) == 0 {
		delete(s.bySession, k)
	} else {
		s.bySession[k] = l
	}
}

// of returns a copy of one session's records, oldest first.
func (s *recordStore) of(owner uint32, session string) []KillRecord {
	seqs := s.bySession[sessionKey{owner, session}]
	if len(seqs) == 0 {
		return nil
	}
	out := make([]KillRecord, 0, len(seqs))
	for _, seq := range seqs {
		r, _ := s.fifo.Get(seq)
		r.Argv = slices.Clone(r.Argv)
		out = append(out, r)
	}
	return out
}

// all returns a copy of every record in the order they were stored.
func (s *recordStore) all() []KillRecord {
	if s.fifo == nil {
		return nil
	}
	keys := s.fifo.Keys()
	out := make([]KillRecord, len(keys))
	for i, k := range keys {
		out[i], _ = s.fifo.Get(k)
		out[i].Argv = slices.Clone(out[i].Argv)
	}
	return out
}
