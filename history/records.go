package history

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"slices"
	"time"
)

// Event is one kernel event for the journal.
type Event struct {
	// Time is the event's boot-clock time (ns), PID its process and Kind
	// its lineage.EventKind: with the boot's epoch, its key.
	Time uint64
	PID  uint32
	Kind uint8
	// UID is the uid the process ran under: its events are kept in that
	// uid's stream (streams.go), and go with that uid's (retention.go).
	UID uint32
	// Data is the event as state.AppendEvent encodes it, argv redacted.
	// Events copies it.
	Data []byte
}

// Session is what the journal keeps of a session: a summary to list and
// the details the agent last handed in (an api.SessionDetail in JSON, as
// root sees it, argv redacted).
type Session struct {
	Owner  uint32 `json:"owner_uid"`
	ID     string `json:"id"`
	Origin string `json:"origin,omitempty"`
	// Began is when the session began; with Owner and ID it names the
	// session in the journal (IDs are reused over time).
	Began     time.Time `json:"began"`
	Ended     time.Time `json:"ended,omitzero"`
	EndReason string    `json:"end_reason,omitempty"`
	// Host is the root's program; Servers the MCP servers it ran.
	Host    string   `json:"host,omitempty"`
	Servers []string `json:"servers,omitempty"`
	// Members counts the processes the session ever had that the journal
	// saw; Killed those the enforcer killed, Survivors those it could not.
	Members    int `json:"members"`
	Killed     int `json:"killed"`
	Survivors  int `json:"survivors,omitempty"`
	Containers int `json:"containers,omitempty"`
	// PeakRSS is the most resident memory the session's servers (and
	// what ran for them) held together in one sample; KilledRSS what the
	// processes the enforcer killed held, each in its last sample (they
	// need not have lived at once: it can exceed PeakRSS). Both go on
	// across the agent's restarts, as CPUSeconds does.
	PeakRSS   uint64 `json:"peak_rss_bytes,omitempty"`
	KilledRSS uint64 `json:"killed_rss_bytes,omitempty"`
	// LeakedRSS is KilledRSS as records of an older agent named it; read,
	// never written (KilledRSSBytes).
	LeakedRSS uint64 `json:"leaked_rss_bytes,omitempty"`
	// CPUSeconds is the CPU time the servers (and what ran for them)
	// used, as last sampled.
	CPUSeconds float64 `json:"cpu_seconds,omitempty"`
	// Written is when the agent last handed the session in.
	Written time.Time `json:"written"`
	// PIDs are the pids of every process the record holds: the index
	// SessionsWithPID reads, so that a lookup by pid decodes no other
	// session's details. Not part of the summary.
	PIDs []uint32 `json:"-"`
	// Detail is what the agent handed in to show the session; it is
	// stored apart, and Sessions lists without it.
	Detail json.RawMessage `json:"detail,omitempty"`
}

// KilledRSSBytes is KilledRSS, or an older record's LeakedRSS.
func (s Session) KilledRSSBytes() uint64 { return max(s.KilledRSS, s.LeakedRSS) }

// Note is something the journal says about itself: records it dropped
// or lost, a store moved aside.
type Note struct {
	At    time.Time `json:"at"`
	What  string    `json:"what"`
	Count uint64    `json:"count,omitempty"`
}

// Key layouts of the bbolt store (all integers big-endian, so keys sort
// by time):
//
//	sessions  began wall ns u64 | owner u32 | id → Session without Detail
//	details   the same key → the Session's Detail
//	members   the same key → the Session's PIDs, sorted, u32 each (none
//	          for a record written before the index: it is read as
//	          holding every pid)
//	notes     wall ns u64 | sequence u64
//	boots     boot id → epoch (wall ns at boot) u64
//
// Events are not in it: they are stored in chunks, appended to segment
// files (segments.go). A chunk is the wall ns u64 of its newest event,
// then per event its wall ns u64 | pid u32 | kind u8 | uvarint length |
// data. An event handed in twice (a state replay after a crash re-hands
// what the store may already hold) is stored twice and read once:
// EventsBetween drops repeats of a wall time, pid and kind.
const (
	eventKeyLen  = 13 // wall ns u64 | pid u32 | kind u8, before each event in a chunk
	chunkHeadLen = 8
	noteKeyLen   = 16
	// chunkBytes is a chunk's buffer, its frame head (segments.go)
	// included: the queue takes buffers of this size from a pool, and
	// the writer hands the batch's buffers to one writev. A larger event
	// is a chunk of its own.
	chunkBytes = 16 << 10
)

var (
	bucketSessions = []byte("sessions")
	bucketDetails  = []byte("details")
	bucketMembers  = []byte("members")
	bucketNotes    = []byte("notes")
	bucketBoots    = []byte("boots")
	bucketMeta     = []byte("meta")
	keyFormat      = []byte("format")
)

// formatVersion is the layout above; a store of another version is moved
// aside. 3 held events in bbolt.
const formatVersion = 4

// appendEventKey appends the key of an event to b.
func appendEventKey(b []byte, wall uint64, pid uint32, kind uint8) []byte {
	b = binary.BigEndian.AppendUint64(b, wall)
	b = binary.BigEndian.AppendUint32(b, pid)
	return append(b, kind)
}

// chunkNewest is the wall time (ns) of a chunk's newest event.
func chunkNewest(v []byte) uint64 {
	if len(v) < chunkHeadLen {
		return 0
	}
	return binary.BigEndian.Uint64(v)
}

// eachInChunk calls fn with each event of chunk v (its key: wall ns, pid,
// kind; and its data, valid during the call) until fn returns false.
func eachInChunk(v []byte, fn func(key, data []byte) bool) error {
	if len(v) < chunkHeadLen {
		return fmt.Errorf("history: an event chunk of %d bytes", len(v))
	}
	for b := v[chunkHeadLen:]; len(b) > 0; {
		if len(b) < eventKeyLen {
			return fmt.Errorf("history: an event chunk ends within an event's key")
		}
		key := b[:eventKeyLen]
		n, w := binary.Uvarint(b[eventKeyLen:])
		if w <= 0 || n > uint64(len(b)-eventKeyLen-w) {
			return fmt.Errorf("history: an event chunk ends within an event")
		}
		b = b[eventKeyLen+w:]
		if !fn(key, b[:n:n]) {
			return nil
		}
		b = b[n:]
	}
	return nil
}

func sessionKey(began time.Time, owner uint32, id string) []byte {
	k := make([]byte, 12, 12+len(id))
	binary.BigEndian.PutUint64(k, wallNS(began))
	binary.BigEndian.PutUint32(k[8:], owner)
	return append(k, id...)
}

func parseSessionKey(k []byte) (began uint64, owner uint32, id string, ok bool) {
	if len(k) < 12 {
		return 0, 0, "", false
	}
	return binary.BigEndian.Uint64(k), binary.BigEndian.Uint32(k[8:]), string(k[12:]), true
}

// keyTime is the wall time (ns) every key of events, sessions and notes
// starts with; 0 for a key too short to hold one.
func keyTime(k []byte) uint64 {
	if len(k) < 8 {
		return 0
	}
	return binary.BigEndian.Uint64(k)
}

func timeKey(ns uint64) []byte { return binary.BigEndian.AppendUint64(nil, ns) }

func wallNS(t time.Time) uint64 {
	if t.IsZero() || t.UnixNano() < 0 {
		return 0
	}
	return uint64(t.UnixNano())
}

// packPIDs is pids sorted and deduplicated, u32 each.
func packPIDs(pids []uint32) []byte {
	sorted := slices.Compact(slices.Sorted(slices.Values(pids)))
	b := make([]byte, 0, 4*len(sorted))
	for _, p := range sorted {
		b = binary.BigEndian.AppendUint32(b, p)
	}
	return b
}

// holdsPID reports whether a members value (packPIDs) holds pid.
func holdsPID(packed []byte, pid uint32) bool {
	lo, hi := 0, len(packed)/4
	for lo < hi {
		m := (lo + hi) / 2
		switch v := binary.BigEndian.Uint32(packed[4*m:]); {
		case v == pid:
			return true
		case v < pid:
			lo = m + 1
		default:
			hi = m
		}
	}
	return false
}
