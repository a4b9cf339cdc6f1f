package history

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/mcptrace/mcptrace/procfs"
)

// Options configure Open. Zero values take the defaults.
type Options struct {
	// Dir holds history.db and the events' segments (events/); created
	// 0700 when missing.
	Dir string
	// MaxAge and MaxBytes bound the store: older records, and the
	// oldest records while the file would outgrow MaxBytes, are removed.
	MaxAge   time.Duration
	MaxBytes int64
	// MaxQueue bounds the bytes of records waiting for the writer.
	MaxQueue int
	// FlushInterval is the longest a record waits for the writer.
	FlushInterval time.Duration
	// Now is the wall clock, BootNow the boot clock (ns) and BootID this
	// boot's id; tests inject them.
	Now     func() time.Time
	BootNow func() uint64
	BootID  string
	Logger  *slog.Logger
}

func (o *Options) fill() error {
	if o.Dir == "" {
		o.Dir = DefaultDir
	}
	if o.MaxAge <= 0 {
		o.MaxAge = DefaultMaxAge
	}
	if o.MaxBytes <= 0 {
		o.MaxBytes = DefaultMaxBytes
	}
	if o.MaxQueue <= 0 {
		o.MaxQueue = DefaultMaxQueue
	}
	if o.FlushInterval <= 0 {
		o.FlushInterval = DefaultFlushInterval
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.BootNow == nil {
		o.BootNow = procfs.BootTimeNow
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.BootID == "" {
		id, err := procfs.BootID("")
		if err != nil {
			return fmt.Errorf("history: %w", err)
		}
		o.BootID = id
	}
	return nil
}

// MinBytes is the smallest MaxBytes: bbolt's own pages and one batch
// must fit.
const MinBytes = 1 << 20

// Stats are the journal's counters.
type Stats struct {
	Events   uint64 `json:"events"`   // events written
	Sessions uint64 `json:"sessions"` // session records written (each update counts)
	// Dropped counts events that did not fit the queue (Options.MaxQueue)
	// and were never written; Failed those in batches the store refused.
	Dropped uint64 `json:"dropped"`
	Failed  uint64 `json:"failed"`
	Batches uint64 `json:"batches"`
	// Pruned counts records removed by retention (age or size).
	Pruned uint64 `json:"pruned"`
	// Evicted counts, by uid, the records retention removed for size,
	// of the uid that held the most (retention.go); uids past
	// maxStreams are counted under 4294967295.
	Evicted map[uint32]uint64 `json:"evicted,omitempty"`
	// FileBytes is what the store's files take (history.db and the
	// events' segments), InUseBytes what its records take of it.
	FileBytes  int64 `json:"file_bytes"`
	InUseBytes int64 `json:"in_use_bytes"`
	// Oldest is the time of the oldest event kept.
	Oldest time.Time `json:"oldest,omitzero"`
	// MovedAside is the file a store that could not be opened was moved
	// to by Open; "" when none was.
	MovedAside string `json:"moved_aside,omitempty"`
	// Corrupt: a read or write found the store corrupt in use; it takes
	// no more records and is moved aside at the next start.
	Corrupt bool `json:"corrupt,omitempty"`
}

// Journal is an open history store and its writer.
type Journal struct {
	db    *bolt.DB
	segs  *streams
	path  string
	opts  Options
	epoch uint64 // this boot's wall ns at boot time 0
	log   *slog.Logger

	mu       sync.Mutex
	chunks   []chunk           // sealed chunks of events, oldest first
	filling  map[uint32]*chunk // the chunk each uid's events are appended to
	events   int               // events in chunks and filling
	sessions []Session
	notes    []Note
	queued   int    // bytes in the queue
	seq      uint64 // records queued so far
	done     uint64 // records settled (written or failed)
	settled  chan struct{}
	dropped  uint64 // events dropped since the last note about it
	closed   bool
	wake     chan struct{}
	stop     chan struct{}
	finished chan struct{}

	stats      statsCounters
	evictMu    sync.Mutex
	evictedBy  map[uint32]uint64 // records removed of each uid that held the most
	lastEvict  time.Time
	movedAside string
	lastFail   time.Time
	broken     atomic.Bool // a read or write found the store corrupt
}

type statsCounters struct {
	events, sessions, dropped, failed, batches, pruned atomic.Uint64
	// The bbolt file's size and what its records use, as of its last
	// commit; the segments count apart.
	boltFile, boltInUse atomic.Int64
}

// Open opens (or creates) the store in opts.Dir and starts its writer.
// A store bbolt cannot open, or of another format, is moved aside and a
// new one created: the error is then nil, the log says so, and
// Stats.MovedAside names the old file. Open fails only when no store can
// be had at all (the directory is not writable, another agent holds it).
func Open(opts Options) (*Journal, error) {
	if err := opts.fill(); err != nil {
		return nil, err
	}
	if opts.MaxBytes < MinBytes {
		return nil, fmt.Errorf("history: max-bytes %d is below the least a store needs (%d)", opts.MaxBytes, MinBytes)
	}
	if err := os.MkdirAll(opts.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("history: creating %s: %w", opts.Dir, err)
	}
	if err := checkDir(opts.Dir); err != nil {
		return nil, err
	}
	j := &Journal{
		path:     filepath.Join(opts.Dir, FileName),
		opts:     opts,
		log:      opts.Logger,
		settled:  make(chan struct{}),
		wake:     make(chan struct{}, 1),
		stop:     make(chan struct{}),
		finished: make(chan struct{}),
		filling:  map[uint32]*chunk{},
	}
	db, err := j.open()
	if err == nil {
		// A store a reader or the writer found corrupt (brokenFile) is
		// moved aside now that no reader holds it.
		if why, rerr := os.ReadFile(j.path + brokenSuffix); rerr == nil {
			db.Close()
			db, err = nil, fmt.Errorf("history: found corrupt while in use: %s", why)
		}
	}
	if err != nil {
		if errors.Is(err, errLocked) {
			return nil, err
		}
		aside := j.path + ".corrupt-" + stamp(opts.Now())
		if rerr := os.Rename(j.path, aside); rerr != nil {
			return nil, fmt.Errorf("history: %s cannot be opened (%v), nor moved aside: %w", j.path, err, rerr)
		}
		j.log.Error("history store could not be opened; it was moved aside and a new one started: the sessions and notes before this moment are in the old file only (the events' segments are kept)",
			"store", j.path, "moved_to", aside, "err", err)
		j.movedAside = aside
		os.Remove(j.path + brokenSuffix)
		if db, err = j.open(); err != nil {
			return nil, err
		}
	}
	j.db = db
	if j.movedAside != "" {
		j.notes = append(j.notes, Note{At: opts.Now(), What: "the store before this one could not be opened and was moved to " + filepath.Base(j.movedAside)})
		j.seq++
	}
	// The segments are opened once bbolt's lock is held: no other agent
	// appends to them.
	segs, cut, err := openStreams(filepath.Join(opts.Dir, segmentsDir), opts.MaxBytes, stamp(opts.Now()))
	if err != nil {
		db.Close()
		return nil, err
	}
	j.segs = segs
	for _, what := range cut {
		j.log.Warn("history: "+what, "dir", segs.root)
		j.notes = append(j.notes, Note{At: opts.Now(), What: what})
		j.seq++
	}
	if len(cut) > 0 {
		j.write() // the notes of what Open cut, before anything else can
	}
	j.prune(0)
	go j.run()
	return j, nil
}

// stamp is the time in the names of files moved aside.
func stamp(t time.Time) string { return t.UTC().Format("20060102T150405Z") }

var errLocked = errors.New("history: the store is in use by another process (another agent?)")

// open opens the file, checks its format and this boot's epoch. A panic
// of bbolt's on a damaged file is an error here.
func (j *Journal) open() (db *bolt.DB, err error) {
	defer func() {
		if r := recover(); r != nil {
			if db != nil {
				db.Close()
			}
			db, err = nil, fmt.Errorf("history: opening %s: %w: %v", j.path, ErrCorrupt, r)
		}
	}()
	db, err = bolt.Open(j.path, 0o600, &bolt.Options{
		Timeout:      time.Second,
		FreelistType: bolt.FreelistMapType,
		// Map the whole bound at once (address space, not memory): a
		// store that outgrows its map makes bbolt remap, and copy out
		// every node the writing transaction holds (most of the writer's
		// allocations, measured by BenchmarkJournalEvents).
		InitialMmapSize: int(min(j.opts.MaxBytes, 1<<30)),
	})
	if errors.Is(err, bolt.ErrTimeout) {
		return nil, fmt.Errorf("%w: %s", errLocked, j.path)
	}
	if err != nil {
		return nil, fmt.Errorf("history: opening %s: %w", j.path, err)
	}
	db.AllocSize = int(min(16<<20, j.opts.MaxBytes/16))
	err = db.Update(func(tx *bolt.Tx) error {
		meta, err := tx.CreateBucketIfNotExists(bucketMeta)
		if err != nil {
			return err
		}
		switch v := meta.Get(keyFormat); {
		case v == nil:
			if tx.Bucket(bucketSessions) != nil {
				return errors.New("the store has records but no format")
			}
			if err := meta.Put(keyFormat, binary.BigEndian.AppendUint32(nil, formatVersion)); err != nil {
				return err
			}
		case len(v) != 4 || binary.BigEndian.Uint32(v) != formatVersion:
			return fmt.Errorf("the store's format is %x, not %d", v, formatVersion)
		}
		for _, name := range [][]byte{bucketSessions, bucketDetails, bucketMembers, bucketNotes, bucketBoots} {
			if _, err := tx.CreateBucketIfNotExists(name); err != nil {
				return err
			}
		}
		boots := tx.Bucket(bucketBoots)
		if v := boots.Get([]byte(j.opts.BootID)); len(v) == 8 {
			j.epoch = binary.BigEndian.Uint64(v)
			return nil
		}
		j.epoch = wallNS(j.opts.Now()) - j.opts.BootNow()
		return boots.Put([]byte(j.opts.BootID), binary.BigEndian.AppendUint64(nil, j.epoch))
	})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("history: %s: %w", j.path, err)
	}
	return db, nil
}

// Wall is the wall time of a boot-clock time of this boot.
func (j *Journal) Wall(boot uint64) time.Time { return time.Unix(0, int64(j.epoch+boot)) }

// Boot is the boot-clock time of a wall time of this boot; 0 before it.
func (j *Journal) Boot(t time.Time) uint64 {
	w := wallNS(t)
	if w < j.epoch {
		return 0
	}
	return w - j.epoch
}

// Events queues kernel events, encoding each into the chunk it will be
// stored in (its data is copied). Events that do not fit the queue are
// dropped and counted; Events never blocks on the writer.
func (j *Journal) Events(evs []Event) {
	if len(evs) == 0 {
		return
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.closed {
		j.stats.dropped.Add(uint64(len(evs)))
		return
	}
	for _, e := range evs {
		size := len(e.Data) + eventKeyLen
		if j.queued+size > j.opts.MaxQueue {
			j.dropped++
			j.stats.dropped.Add(1)
			continue
		}
		j.appendEvent(e)
		j.queued += size
		j.events++
		j.seq++
	}
	if j.queued >= min(wakeQueue, j.opts.MaxQueue/8) {
		j.kick()
	}
}

// chunk is a chunk of events being queued: its buffer (a frame head,
// segments.go, then the chunk, records.go), the uid whose events it
// holds, the wall time of its oldest and newest event and how many it
// holds.
type chunk struct {
	buf            []byte
	uid            uint32
	oldest, newest uint64
	events         int
}

// chunkPool holds the buffers of chunks written, for the chunks to come:
// under a storm the queue then allocates nothing per event, and the
// agent's heap (and RSS) does not fill with spent chunks between
// collections.
var chunkPool = sync.Pool{New: func() any { b := make([]byte, 0, chunkBytes); return &b }}

// appendEvent encodes e into the chunk of its uid being filled, sealing
// it first when e does not fit. An event too large for a chunk of its
// own size gets one of its own size. j.mu is held.
func (j *Journal) appendEvent(e Event) {
	need := eventKeyLen + binary.MaxVarintLen32 + len(e.Data)
	c := j.filling[e.UID]
	if c != nil && len(c.buf)+need > chunkBytes {
		j.seal(e.UID)
		c = nil
	}
	if c == nil {
		c = &chunk{uid: e.UID, oldest: math.MaxUint64}
		const head = frameHeadLen + chunkHeadLen
		if head+need > chunkBytes {
			c.buf = make([]byte, head, head+need)
		} else {
			c.buf = (*chunkPool.Get().(*[]byte))[:head]
		}
		j.filling[e.UID] = c
	}
	wall := j.epoch + e.Time
	c.oldest, c.newest = min(c.oldest, wall), max(c.newest, wall)
	c.events++
	b := appendEventKey(c.buf, wall, e.PID, e.Kind)
	b = binary.AppendUvarint(b, uint64(len(e.Data)))
	c.buf = append(b, e.Data...)
}

// seal moves uid's chunk being filled, if any, to the chunks to write.
// j.mu is held.
func (j *Journal) seal(uid uint32) {
	c := j.filling[uid]
	if c == nil {
		return
	}
	binary.BigEndian.PutUint64(c.buf[frameHeadLen:], c.newest)
	j.chunks = append(j.chunks, *c)
	delete(j.filling, uid)
}

// sealAll seals every chunk being filled, by uid. j.mu is held.
func (j *Journal) sealAll() {
	for _, uid := range slices.Sorted(maps.Keys(j.filling)) {
		j.seal(uid)
	}
}

// recycle returns the buffers of chunks written (or failed) to
// chunkPool.
func recycle(chunks []chunk) {
	for _, c := range chunks {
		if cap(c.buf) == chunkBytes {
			b := c.buf[:0]
			chunkPool.Put(&b)
		}
	}
}

// PutSession queues a session record; it replaces the one with the same
// Owner, ID and Began. The writer is woken: a session's record is read
// soon after (the agent forgets an ended session, and reads the record
// back to merge the next one into it), and records are few. It returns
// the record's place in the queue, for FlushTo.
func (j *Journal) PutSession(s Session) uint64 {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.closed {
		return 0
	}
	j.sessions = append(j.sessions, s)
	j.queued += len(s.Detail) + 256
	j.seq++
	j.kick()
	return j.seq
}

// AddNote queues a note.
func (j *Journal) AddNote(n Note) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.closed {
		return
	}
	j.notes = append(j.notes, n)
	j.seq++
}

func (j *Journal) kick() {
	select {
	case j.wake <- struct{}{}:
	default:
	}
}

// Flush returns once every record queued before the call is settled:
// written, or counted as failed. It fails only when ctx ends first.
func (j *Journal) Flush(ctx context.Context) error {
	j.mu.Lock()
	want := j.seq
	j.mu.Unlock()
	return j.FlushTo(ctx, want)
}

// FlushTo returns once the records queued up to place want (what
// PutSession returned) are settled; it wakes the writer only if they are
// not. It fails only when ctx ends first.
func (j *Journal) FlushTo(ctx context.Context, want uint64) error {
	for {
		j.mu.Lock()
		done, ch := j.done, j.settled
		j.mu.Unlock()
		if done >= want {
			return nil
		}
		j.kick()
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("history: flushing: %w", ctx.Err())
		}
	}
}

// Close writes what is queued and closes the store.
func (j *Journal) Close() error {
	j.mu.Lock()
	if j.closed {
		j.mu.Unlock()
		return nil
	}
	j.closed = true
	j.mu.Unlock()
	close(j.stop)
	<-j.finished
	return errors.Join(j.segs.close(), j.db.Close())
}

// Path is the store's file.
func (j *Journal) Path() string { return j.path }

// Stats returns the journal's counters.
func (j *Journal) Stats() Stats {
	s := Stats{
		Events:     j.stats.events.Load(),
		Sessions:   j.stats.sessions.Load(),
		Dropped:    j.stats.dropped.Load(),
		Failed:     j.stats.failed.Load(),
		Batches:    j.stats.batches.Load(),
		Pruned:     j.stats.pruned.Load(),
		FileBytes:  j.stats.boltFile.Load() + j.segs.bytes(),
		InUseBytes: j.inUse(),
		MovedAside: j.movedAside,
		Corrupt:    j.broken.Load(),
	}
	j.evictMu.Lock()
	if len(j.evictedBy) > 0 {
		s.Evicted = maps.Clone(j.evictedBy)
	}
	j.evictMu.Unlock()
	if o := j.segs.oldest(); o != 0 {
		// Events past MaxAge in a segment kept for newer ones are not
		// read.
		s.Oldest = time.Unix(0, int64(max(o, j.ageCutoff())))
	}
	return s
}

// pruneEvery is how often retention runs besides at Open and when the
// store grows past its bound.
const pruneEvery = time.Minute

func (j *Journal) run() {
	defer close(j.finished)
	tick := time.NewTicker(j.opts.FlushInterval)
	defer tick.Stop()
	lastPrune := time.Now()
	for {
		stopping := false
		select {
		case <-j.wake:
		case <-tick.C:
		case <-j.stop:
			stopping = true
		}
		j.write()
		if j.inUse() > j.opts.MaxBytes*3/4 || time.Since(lastPrune) >= pruneEvery {
			j.prune(0)
			lastPrune = time.Now()
		}
		if stopping {
			return
		}
	}
}

// write writes what is queued: the events as one batch appended to the
// segments, sessions and notes in one bbolt transaction.
func (j *Journal) write() {
	j.mu.Lock()
	j.sealAll()
	chunks, events, sess, notes, upto := j.chunks, j.events, j.sessions, j.notes, j.seq
	j.chunks, j.events, j.sessions, j.notes, j.queued = nil, 0, nil, nil, 0
	if j.dropped > 0 {
		notes = append(notes, Note{At: j.opts.Now(), What: "events dropped: the queue to the writer was full", Count: j.dropped})
		j.dropped = 0
	}
	j.mu.Unlock()
	wrote := events > 0 && j.appendEvents(chunks)
	if len(sess)+len(notes) > 0 {
		err := j.update("writing a batch", func(tx *bolt.Tx) error {
			sb, db := tx.Bucket(bucketSessions), tx.Bucket(bucketDetails)
			for _, s := range sess {
				detail := s.Detail
				s.Detail = nil
				b, err := json.Marshal(s)
				if err != nil {
					return err
				}
				k := sessionKey(s.Began, s.Owner, s.ID)
				if err := sb.Put(k, b); err != nil {
					return err
				}
				if err := db.Put(k, detail); err != nil {
					return err
				}
				// A record without pids is read as holding every pid
				// (SessionsWithPID), as one written before the index.
				mb := tx.Bucket(bucketMembers)
				if len(s.PIDs) == 0 {
					err = mb.Delete(k)
				} else {
					err = mb.Put(k, packPIDs(s.PIDs))
				}
				if err != nil {
					return err
				}
			}
			nb := tx.Bucket(bucketNotes)
			for _, n := range notes {
				seq, err := nb.NextSequence()
				if err != nil {
					return err
				}
				b, err := json.Marshal(n)
				if err != nil {
					return err
				}
				if err := nb.Put(binary.BigEndian.AppendUint64(timeKey(wallNS(n.At)), seq), b); err != nil {
					return err
				}
			}
			j.sizes(tx)
			return nil
		})
		if err != nil {
			j.stats.failed.Add(uint64(len(sess) + len(notes)))
			j.failed("a batch of session records could not be written; they are lost to the history (counted in failed)", "sessions", len(sess), "notes", len(notes), "err", err)
		} else {
			j.stats.sessions.Add(uint64(len(sess)))
			wrote = true
		}
	}
	if wrote {
		j.stats.batches.Add(1)
	}
	recycle(chunks)
	j.mu.Lock()
	j.done = upto
	close(j.settled)
	j.settled = make(chan struct{})
	j.mu.Unlock()
}

// appendEvents appends chunks to the streams of their uids: each uid's
// as one batch when they fit a segment, else as several, each whole.
// Before each, retention makes room for it when it would take the
// records past 3/4 of MaxBytes. It reports whether any was written;
// what was not is counted failed.
func (j *Journal) appendEvents(chunks []chunk) bool {
	rotateBefore := wallNS(j.opts.Now().Add(-j.opts.MaxAge / 8))
	wrote := false
	byUID := map[uint32][]chunk{}
	for _, c := range chunks {
		byUID[c.uid] = append(byUID[c.uid], c)
	}
	for _, uid := range slices.Sorted(maps.Keys(byUID)) {
		chunks := byUID[uid]
		l, err := j.segs.log(uid)
		if err != nil {
			j.failed("the events of a uid could not have a stream of their own; they are kept in the shared one", "uid", uid, "err", err)
		}
		for len(chunks) > 0 {
			n, bytes, events := 0, int64(0), 0
			for ; n < len(chunks) && (n == 0 || bytes+int64(len(chunks[n].buf)) <= j.segs.maxSize); n++ {
				bytes += int64(len(chunks[n].buf))
				events += chunks[n].events
			}
			if j.inUse()+bytes > j.opts.MaxBytes*3/4 {
				j.prune(bytes)
			}
			if err := l.append(chunks[:n], rotateBefore); err != nil {
				j.stats.failed.Add(uint64(events))
				j.failed("a batch of events could not be written; its events are lost to the history (counted in failed)", "events", events, "uid", uid, "err", err)
			} else {
				j.stats.events.Add(uint64(events))
				wrote = true
			}
			chunks = chunks[n:]
		}
	}
	return wrote
}

// failed logs a write that failed, at most once a minute.
func (j *Journal) failed(msg string, args ...any) {
	if now := time.Now(); now.Sub(j.lastFail) > time.Minute {
		j.lastFail = now
		j.log.Error("history: "+msg, args...)
	}
}

// sizes records the bbolt file's size and what its records use, as of
// the last commit (bbolt counts free pages at commit).
func (j *Journal) sizes(tx *bolt.Tx) {
	size := tx.Size()
	if fi, err := os.Stat(j.path); err == nil {
		j.stats.boltFile.Store(fi.Size())
	}
	j.stats.boltInUse.Store(max(0, size-int64(j.db.Stats().FreeAlloc)))
}

// inUse is what the records take: bbolt's and the segments.
func (j *Journal) inUse() int64 { return j.stats.boltInUse.Load() + j.segs.bytes() }

// ErrCorrupt is wrapped by the errors of a store found corrupt in use:
// it takes nothing more and is moved aside at the next Open.
var ErrCorrupt = errors.New("history: the store is corrupt")

// brokenSuffix names the file that marks a store found corrupt in use.
const brokenSuffix = ".corrupt"

// update and view run f in a transaction. bbolt panics on some damage
// to its pages; that panic ends here, the store is marked corrupt (said
// once in the log, moved aside at the next Open) and takes nothing more.
func (j *Journal) update(what string, f func(*bolt.Tx) error) error {
	return j.guard(what, func() error { return j.db.Update(f) })
}

func (j *Journal) view(what string, f func(*bolt.Tx) error) error {
	return j.guard(what, func() error { return j.db.View(f) })
}

func (j *Journal) guard(what string, f func() error) (err error) {
	if j.broken.Load() {
		return fmt.Errorf("%w (%s)", ErrCorrupt, what)
	}
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: %s: %v", ErrCorrupt, what, r)
		}
		// A panic of bbolt's, or a record of ours it cannot be (a chunk
		// of events that does not decode).
		if errors.Is(err, ErrCorrupt) && j.broken.CompareAndSwap(false, true) {
			os.WriteFile(j.path+brokenSuffix, []byte(err.Error()), 0o600)
			j.log.Error("history store is corrupt; it takes no more records and is moved aside at the next start", "store", j.path, "err", err)
		}
	}()
	return f()
}
