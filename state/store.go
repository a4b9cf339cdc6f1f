package state

import (
	"bufio"
	"cmp"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/mcptrace/mcptrace/procfs"
	"github.com/mcptrace/mcptrace/safefile"
)

// Options configure Open.
type Options struct {
	// Dir holds the checkpoint and the WAL segments. It is created 0700
	// when missing; an existing one must be a directory (not a symlink)
	// owned by the effective uid and not writable by group or others.
	Dir string
	// Logger receives every Problem (warn, "state file moved aside"), torn
	// tails (info) and a summary of what Open loaded (info), as it is: the
	// caller adds the component attribute. Nil discards.
	Logger *slog.Logger
	// BootID identifies this boot; a checkpoint written under another boot
	// id is moved aside. Empty reads /proc/sys/kernel/random/boot_id.
	// At most MaxBootID bytes.
	BootID string
	// Now names moved-aside files. Nil is time.Now.
	Now func() time.Time
}

// Kind is the kind of a WAL record. What each kind means is the caller's
// business; 0 is invalid and Append refuses it.
type Kind uint8

// Record is one WAL entry.
type Record struct {
	Kind Kind
	// Data is at most MaxRecord bytes. In Loaded.Records it shares a
	// buffer with the other records of its segment: read it, do not append
	// to it.
	Data []byte
}

// Loaded is what Open found.
type Loaded struct {
	// Checkpoint is the payload of the valid checkpoint; nil when there is
	// none (first start, or it was moved aside).
	Checkpoint []byte
	// Records are the WAL records appended after that checkpoint, in the
	// order they were appended. Always empty when Checkpoint is nil.
	Records []Record
	// Problems lists everything that was torn beyond repair, corrupt, from
	// another boot or in another format, and what was done with it. Open
	// has already logged each at warn.
	Problems []Problem
	// Torn counts incomplete records cut from the end of the last segment:
	// the expected trace of a crash during Append, not a Problem.
	Torn int
}

// Problem is one file, or part of one, that Open or Discard could not use.
type Problem struct {
	// File is the path of the file in Dir.
	File string
	// What says what was wrong with it, for a person.
	What string
	// MovedTo is where its unusable content now is: the file itself
	// renamed, or for a split segment the bad part copied out (the good
	// part stays in File). Moved-aside files are kept as evidence; only
	// the newest few generations are kept.
	MovedTo string
}

// Cut marks the point in the WAL a checkpoint covers: every record appended
// before Cut returned it. The zero Cut is invalid.
type Cut struct{ seq uint64 }

var (
	// ErrUnsafeDir: Options.Dir is a symlink, not a directory, not owned by
	// the effective uid, or writable by group or others. Open refuses it.
	ErrUnsafeDir = safefile.ErrUnsafeDir
	// ErrLocked: another Store (in this or another process) has the
	// directory open.
	ErrLocked = errors.New("state: directory in use by another store")
	// ErrClosed: the Store was closed.
	ErrClosed = errors.New("state: store closed")
	// ErrStaleCut: WriteCheckpoint was given a Cut older than the
	// checkpoint already on disk (or taken before Discard).
	ErrStaleCut = errors.New("state: cut is older than the checkpoint on disk")
)

// Store appends to the WAL and writes checkpoints. Its methods are safe for
// concurrent use.
type Store struct {
	dir    *dir
	log    *slog.Logger
	bootID string
	now    func() time.Time

	// ckMu serializes WriteCheckpoint, Discard and Close, so a slow
	// checkpoint write never holds mu.
	ckMu sync.Mutex

	mu     sync.Mutex
	closed bool
	seq    uint64 // the segment Append writes to
	seg    *file  // segment seq; nil until the first Append into it
	off    int64  // size of seg
	ckSeq  uint64 // first segment the checkpoint on disk does not cover
	buf    []byte // Append's framing buffer
}

// Remove deletes the state directory path and everything in it (for
// `mcptrace uninstall`). It takes the directory's lock first, so it
// refuses with ErrLocked while an agent has the state open, a starting
// agent that does not serve yet included, and it refuses a directory Open
// would refuse. It reports whether there was anything to remove.
func Remove(path string) (bool, error) {
	if _, err := os.Lstat(path); errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	d, err := openDir(path)
	if err != nil {
		return false, err
	}
	defer d.close()
	if err := os.RemoveAll(path); err != nil {
		return true, fmt.Errorf("state: removing %s: %w", path, err)
	}
	return true, nil
}

// InUse reports whether another Store (an agent, running or starting)
// holds the state directory path now: a start that would fail on it.
// It creates nothing.
func InUse(path string) bool {
	if _, err := os.Lstat(path); err != nil {
		return false
	}
	d, err := openDir(path)
	if err != nil {
		return errors.Is(err, ErrLocked)
	}
	d.close()
	return false
}

// Open opens (creating when missing) the state directory, validates and
// repairs what it holds, and returns what a restarted agent must replay.
//
// An error means nothing was loaded and nothing is open: the directory is
// unsafe (ErrUnsafeDir), in use (ErrLocked), or could not be read or
// written. Bad content is never an error: it is moved aside and reported
// in Loaded.Problems.
func Open(opts Options) (*Store, *Loaded, error) {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	now := opts.Now
	if now == nil {
		now = time.Now
	}
	boot := opts.BootID
	if boot == "" {
		var err error
		if boot, err = procfs.BootID(""); err != nil {
			return nil, nil, err
		}
	}
	if len(boot) == 0 || len(boot) > MaxBootID {
		return nil, nil, fmt.Errorf("state: boot id of %d bytes (1..%d)", len(boot), MaxBootID)
	}
	d, err := openDir(opts.Dir)
	if err != nil {
		return nil, nil, err
	}
	s := &Store{dir: d, log: log, bootID: boot, now: now}
	ld, err := s.load()
	if err != nil {
		d.close()
		return nil, nil, err
	}
	log.Info("state loaded", "dir", d.path, "checkpoint_bytes", len(ld.Checkpoint), "records", len(ld.Records),
		"torn", ld.Torn, "problems", len(ld.Problems), "next_segment", s.seq)
	return s, ld, nil
}

// segEntry is a segment file found in the directory.
type segEntry struct {
	seq     uint64
	name    string
	regular bool
}

// load reads and repairs the directory; it runs before s is shared.
//
// Every repair is ordered so that a crash halfway leaves a directory the
// next Open repairs the same way: files after a bad one are moved aside
// before the bad one is moved or cut, and a bad tail is copied aside before
// the segment is truncated.
func (s *Store) load() (*Loaded, error) {
	ld := &Loaded{}
	ents, err := s.dir.list()
	if err != nil {
		return nil, err
	}
	var (
		haveCk, ckRegular bool
		segs              []segEntry
	)
	for _, e := range ents {
		if base, ok := strings.CutSuffix(e.name, tmpSuffix); ok {
			if _, isSeg := parseSegmentName(base); isSeg || base == checkpointName {
				// An interrupted WriteCheckpoint or segment start: the
				// rename never happened, so nothing refers to it.
				s.log.Debug("removing interrupted write", "file", e.name)
				s.removeQuietly(e.name)
			}
			continue
		}
		if e.name == checkpointName {
			haveCk, ckRegular = true, e.regular
		} else if seq, ok := parseSegmentName(e.name); ok {
			segs = append(segs, segEntry{seq, e.name, e.regular})
		}
	}
	slices.SortFunc(segs, cmpSeq)
	next := uint64(1)
	if len(segs) > 0 {
		next = segs[len(segs)-1].seq + 1
	}
	m := &mover{s: s, problems: &ld.Problems}
	defer s.logProblems(&ld.Problems)

	if !haveCk {
		if err := m.moveAll(segs, reasonNoCheckpoint, "WAL without a checkpoint: changes to a state that was never saved"); err != nil {
			return nil, err
		}
		s.seq, s.ckSeq = next, next
		s.prune()
		return ld, nil
	}

	var (
		first   uint64
		payload []byte
		f       *fault
	)
	if !ckRegular {
		f = corrupt("checkpoint corrupt: not a regular file")
	} else {
		b, err := s.dir.readFile(checkpointName)
		if err != nil {
			return nil, err
		}
		first, payload, f = parseCheckpoint(b, s.bootID)
	}
	if f != nil {
		// Segments first: if this is interrupted, the checkpoint is still
		// there to be found bad again.
		if err := m.moveAll(segs, f.reason, "WAL segment moved aside with its checkpoint: "+f.what); err != nil {
			return nil, err
		}
		if err := m.moveAside(checkpointName, f.reason, f.what); err != nil {
			return nil, err
		}
		s.seq, s.ckSeq = next, next
		s.prune()
		return ld, nil
	}
	ld.Checkpoint = payload

	expect := first // the next segment replay needs
replay:
	for i, sg := range segs {
		if sg.seq < first {
			// Covered by the checkpoint: a crash between its rename and
			// the deletion of the segments it covers left this.
			s.log.Debug("removing segment covered by the checkpoint", "file", sg.name)
			s.removeQuietly(sg.name)
			continue
		}
		if sg.seq != expect {
			what := fmt.Sprintf("WAL segment after a gap in numbering: %s is missing; not replayed", segmentName(expect))
			if err := m.moveAll(segs[i:], reasonUnreplayed, what); err != nil {
				return nil, err
			}
			break
		}
		later := segs[i+1:]
		var (
			b   []byte
			hl  int
			err error
		)
		if !sg.regular {
			f = corrupt("WAL segment corrupt: not a regular file")
		} else {
			if b, err = s.dir.readFile(sg.name); err != nil {
				return nil, err
			}
			hl, f = parseSegmentHeader(b, s.bootID, sg.seq)
		}
		if f != nil {
			if err := m.moveAll(later, reasonUnreplayed, fmt.Sprintf("WAL segment after %s, which could not be read (%s); not replayed", sg.name, f.what)); err != nil {
				return nil, err
			}
			if err := m.moveAside(sg.name, f.reason, f.what); err != nil {
				return nil, err
			}
			break
		}
		before := len(ld.Records)
		var t tail
		ld.Records, t = parseRecords(b[hl:], hl, len(later) == 0, ld.Records)
		expect++
		switch {
		case t.torn:
			s.log.Info("cutting torn record at the end of the WAL", "file", sg.name, "offset", hl+t.good, "bytes", len(b)-hl-t.good)
			if err := s.dir.truncate(sg.name, int64(hl+t.good)); err != nil {
				return nil, err
			}
			ld.Torn++
		case t.bad != "":
			if err := m.moveAll(later, reasonUnreplayed, fmt.Sprintf("WAL segment after corruption in %s; not replayed", sg.name)); err != nil {
				return nil, err
			}
			rest := b[hl+t.good:]
			what := fmt.Sprintf("corrupt WAL record at %s; the %d records before it were replayed, the %d bytes from it on were moved aside", t.bad, len(ld.Records)-before, len(rest))
			if err := m.writeAside(sg.name, reasonCorrupt, what, rest); err != nil {
				return nil, err
			}
			if err := s.dir.truncate(sg.name, int64(hl+t.good)); err != nil {
				return nil, err
			}
			break replay
		}
	}
	// Never append into a segment that was kept: its tail may have been
	// cut, and the next Open must see it exactly as replayed now.
	s.seq, s.ckSeq = expect, first
	s.prune()
	return ld, nil
}

// removeQuietly removes a file whose presence does no harm (an interrupted
// write, a segment a checkpoint covers, old evidence), logging a failure.
func (s *Store) removeQuietly(name string) {
	if err := s.dir.remove(name); err != nil {
		s.log.Warn("removing state file", "file", name, "err", err)
	}
}

func cmpSeq(a, b segEntry) int { return cmp.Compare(a.seq, b.seq) }

// logProblems logs Problems at warn; it is deferred, so a failed repair
// still logs what it moved before failing.
func (s *Store) logProblems(ps *[]Problem) {
	for _, p := range *ps {
		s.log.Warn("state file moved aside", "file", p.File, "what", p.What, "moved_to", p.MovedTo)
	}
}

// mover moves files aside; every move by one mover shares one timestamp
// (one generation).
type mover struct {
	s        *Store
	at       time.Time
	problems *[]Problem
}

func (m *mover) stamp() time.Time {
	if m.at.IsZero() {
		m.at = m.s.now()
	}
	return m.at
}

// freeName returns the moved-aside name for name that is not taken yet.
func (m *mover) freeName(name, reason string) (string, error) {
	base := asideName(name, reason, m.stamp())
	for i := 1; ; i++ {
		cand := base
		if i > 1 {
			cand = fmt.Sprintf("%s-%d", base, i)
		}
		taken, err := m.s.dir.exists(cand)
		if err != nil {
			return "", err
		}
		if !taken {
			return cand, nil
		}
	}
}

func (m *mover) path(name string) string { return filepath.Join(m.s.dir.path, name) }

// moveAside renames name to its moved-aside name and records a Problem.
func (m *mover) moveAside(name, reason, what string) error {
	to, err := m.freeName(name, reason)
	if err != nil {
		return err
	}
	if err := m.s.dir.rename(name, to); err != nil {
		return err
	}
	*m.problems = append(*m.problems, Problem{File: m.path(name), What: what, MovedTo: m.path(to)})
	return nil
}

// moveAll moves segs aside, last first.
func (m *mover) moveAll(segs []segEntry, reason, what string) error {
	for i := len(segs) - 1; i >= 0; i-- {
		if err := m.moveAside(segs[i].name, reason, what); err != nil {
			return err
		}
	}
	return nil
}

// writeAside copies data (the bad part of name) to a moved-aside file and
// records a Problem.
func (m *mover) writeAside(name, reason, what string, data []byte) error {
	to, err := m.freeName(name, reason)
	if err != nil {
		return err
	}
	f, err := m.s.dir.create(to, true)
	if err != nil {
		return err
	}
	err = f.writeAt(data, 0)
	if cerr := f.close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	*m.problems = append(*m.problems, Problem{File: m.path(name), What: what, MovedTo: m.path(to)})
	return nil
}

// prune deletes moved-aside files beyond the newest keepGenerations
// generations, so repeated corruption cannot fill the file system.
// Failures are logged: old evidence left in place harms nothing else.
func (s *Store) prune() {
	ents, err := s.dir.list()
	if err != nil {
		s.log.Warn("listing moved-aside files", "err", err)
		return
	}
	gens := map[string][]string{}
	for _, e := range ents {
		if stamp, ok := parseAsideName(e.name); ok {
			gens[stamp] = append(gens[stamp], e.name)
		}
	}
	if len(gens) <= keepGenerations {
		return
	}
	stamps := make([]string, 0, len(gens))
	for st := range gens {
		stamps = append(stamps, st)
	}
	slices.Sort(stamps)
	for _, st := range stamps[:len(stamps)-keepGenerations] {
		for _, name := range gens[st] {
			s.log.Debug("removing old moved-aside file", "file", name)
			s.removeQuietly(name)
		}
	}
}

// Append frames recs and writes them to the current WAL segment with one
// write(2), so a crash loses at most a tail of this call: the next Open
// replays a prefix of recs (possibly none) after everything appended before.
// If recs must be replayed all or none, make them one Record.
//
// Append does not fsync (see the package doc). An error means none of recs
// is in the WAL, unless cutting back a failed write failed too (the error
// says so: write a checkpoint then). A record of kind 0 or with more than
// MaxRecord bytes is refused before anything is written.
func (s *Store) Append(recs ...Record) error {
	if len(recs) == 0 {
		return nil
	}
	for i, r := range recs {
		if r.Kind == 0 {
			return fmt.Errorf("state: record %d of %d has kind 0", i, len(recs))
		}
		if len(r.Data) > MaxRecord {
			return fmt.Errorf("state: record %d of %d has %d bytes, more than %d", i, len(recs), len(r.Data), MaxRecord)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	if s.seg == nil {
		if err := s.startSegment(); err != nil {
			return err
		}
	}
	b := s.buf[:0]
	for _, r := range recs {
		b = appendRecord(b, r)
	}
	if cap(b) <= 1<<20 {
		s.buf = b
	}
	if err := s.seg.writeAt(b, s.off); err != nil {
		// Cut back whatever part of the batch reached the file, so the
		// next Append does not follow a torn record.
		if terr := s.seg.truncate(s.off); terr != nil {
			// The segment ends in a torn record now. Go on in a new one;
			// the next Open will report the torn one as corruption and
			// not replay what follows, unless a checkpoint covers it first.
			s.seg.close()
			s.seg = nil
			s.seq++
			return fmt.Errorf("%w (cutting it back: %v; write a checkpoint)", err, terr)
		}
		return err
	}
	s.off += int64(len(b))
	return nil
}

// startSegment creates segment s.seq: its header is written to a temporary
// file that is renamed into place, so a segment never lacks its header.
func (s *Store) startSegment() error {
	if s.seq > maxSeq {
		return fmt.Errorf("state: WAL segment numbers exhausted")
	}
	name := segmentName(s.seq)
	if taken, err := s.dir.exists(name); err != nil {
		return err
	} else if taken {
		return fmt.Errorf("state: %s already exists", name)
	}
	tmp := name + tmpSuffix
	f, err := s.dir.create(tmp, false)
	if err != nil {
		return err
	}
	hdr := appendSegmentHeader(nil, s.bootID, s.seq)
	err = f.writeAt(hdr, 0)
	if err == nil {
		err = s.dir.rename(tmp, name)
	}
	if err != nil {
		f.close()
		s.dir.remove(tmp)
		return err
	}
	s.seg, s.off = f, int64(len(hdr))
	return nil
}

// Cut ends the current WAL segment: every record appended before Cut is
// covered by a checkpoint written with the returned Cut, every record
// appended after it is not. Call it under the same lock as the Appends, at
// the moment the state to checkpoint is captured. Cut does no I/O beyond
// closing a file: the next segment is created by the next Append, and a Cut
// with nothing appended since the previous one returns the same Cut.
func (s *Store) Cut() Cut {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.seg != nil {
		if err := s.seg.close(); err != nil {
			s.log.Warn("closing WAL segment", "err", err)
		}
		s.seg = nil
		s.seq++
	}
	return Cut{seq: s.seq}
}

// WriteCheckpoint replaces the checkpoint with payload, the state as of c,
// and deletes the WAL segments c covers. The payload is written to a
// temporary file, fsynced, renamed over the checkpoint and the directory is
// fsynced: a crash at any point leaves either the old checkpoint with its
// WAL or the new one. Appends may go on meanwhile.
//
// A Cut older than the checkpoint on disk is refused (ErrStaleCut).
func (s *Store) WriteCheckpoint(c Cut, payload []byte) error {
	return s.WriteCheckpointFrom(c, func(w io.Writer) error {
		_, err := w.Write(payload)
		return err
	})
}

// checkpointBuffer is how much of a payload WriteCheckpointFrom holds
// before it writes: one pwrite(2) each.
const checkpointBuffer = 256 << 10

// WriteCheckpointFrom is WriteCheckpoint with the payload written by
// write as it is made, never held whole: write's bytes go to the file
// checkpointBuffer at a time, their length and checksum are counted as
// they go, and the header is written last, at its place before them. An
// error from write leaves the checkpoint on disk as it was and is
// returned as it is.
func (s *Store) WriteCheckpointFrom(c Cut, write func(io.Writer) error) error {
	s.ckMu.Lock()
	defer s.ckMu.Unlock()
	s.mu.Lock()
	closed, cur, ck := s.closed, s.seq, s.ckSeq
	s.mu.Unlock()
	switch {
	case closed:
		return ErrClosed
	case c.seq == 0 || c.seq > cur:
		return fmt.Errorf("state: cut %d was not returned by this store's Cut", c.seq)
	case c.seq < ck:
		return fmt.Errorf("%w (cut %d, checkpoint %d)", ErrStaleCut, c.seq, ck)
	}
	tmp := checkpointName + tmpSuffix
	f, err := s.dir.create(tmp, false)
	if err != nil {
		return err
	}
	pw := &payloadWriter{f: f, off: int64(len(appendCheckpointHeader(nil, s.bootID, c.seq, 0, 0)))}
	bw := bufio.NewWriterSize(pw, checkpointBuffer)
	werr := write(bw)
	if werr == nil {
		err = bw.Flush()
	}
	if werr == nil && err == nil {
		err = f.writeAt(appendCheckpointHeader(nil, s.bootID, c.seq, pw.n, pw.sum), 0)
	}
	if werr == nil && err == nil {
		err = f.sync()
	}
	if cerr := f.close(); err == nil {
		err = cerr
	}
	if werr == nil && err == nil {
		err = s.dir.rename(tmp, checkpointName)
	}
	if werr != nil || err != nil {
		s.dir.remove(tmp)
		if werr != nil {
			return werr
		}
		return fmt.Errorf("writing checkpoint: %w", err)
	}
	s.mu.Lock()
	s.ckSeq = c.seq
	s.mu.Unlock()
	if err := s.dir.sync(); err != nil {
		return fmt.Errorf("writing checkpoint: %w", err)
	}
	// The checkpoint is in place; what follows only frees space, and the
	// next Open removes whatever a crash leaves of it.
	ents, err := s.dir.list()
	if err != nil {
		return err
	}
	for _, e := range ents {
		if seq, ok := parseSegmentName(e.name); ok && seq < c.seq {
			if err := s.dir.remove(e.name); err != nil {
				return err
			}
		}
	}
	return nil
}

// Discard moves the checkpoint and every WAL segment aside (a Problem,
// logged at warn with why) and leaves the store empty, as at a first
// start. Call it when what Open loaded cannot be used, for example when the
// checkpoint payload does not decode. Write a checkpoint before relying on
// new Appends: WAL without a checkpoint is not replayed.
func (s *Store) Discard(why string) error {
	defer s.lockAll()()
	if s.closed {
		return ErrClosed
	}
	if s.seg != nil {
		if err := s.seg.close(); err != nil {
			s.log.Warn("closing WAL segment", "err", err)
		}
		s.seg = nil
	}
	ents, err := s.dir.list()
	if err != nil {
		return err
	}
	var (
		segs     []segEntry
		haveCk   bool
		problems []Problem
	)
	for _, e := range ents {
		if e.name == checkpointName {
			haveCk = true
		} else if seq, ok := parseSegmentName(e.name); ok {
			segs = append(segs, segEntry{seq: seq, name: e.name})
			s.seq = max(s.seq, seq)
		}
	}
	s.seq++
	s.ckSeq = s.seq
	slices.SortFunc(segs, cmpSeq)
	m := &mover{s: s, problems: &problems}
	defer s.logProblems(&problems)
	what := "discarded by the caller: " + why
	if err := m.moveAll(segs, reasonDiscarded, what); err != nil {
		return err
	}
	if haveCk {
		if err := m.moveAside(checkpointName, reasonDiscarded, what); err != nil {
			return err
		}
	}
	s.prune()
	return nil
}

// Size returns the bytes the checkpoint and the WAL segments take on disk
// (moved-aside files not included).
func (s *Store) Size() (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return 0, ErrClosed
	}
	ents, err := s.dir.list()
	if err != nil {
		return 0, err
	}
	var total int64
	for _, e := range ents {
		if _, isSeg := parseSegmentName(e.name); isSeg || e.name == checkpointName {
			n, err := s.dir.size(e.name)
			if err != nil {
				return 0, err
			}
			total += n
		}
	}
	return total, nil
}

// Close closes the current segment and releases the directory. Records
// already appended stay in the WAL. Close waits for a WriteCheckpoint in
// progress; later calls return ErrClosed (Close itself returns nil).
func (s *Store) Close() error {
	defer s.lockAll()()
	if s.closed {
		return nil
	}
	s.closed = true
	var errs []error
	if s.seg != nil {
		errs = append(errs, s.seg.close())
		s.seg = nil
	}
	errs = append(errs, s.dir.close())
	return errors.Join(errs...)
}

// lockAll takes the checkpoint lock, then the store's, in the order every
// caller keeps, and returns what releases both.
func (s *Store) lockAll() (unlock func()) {
	s.ckMu.Lock()
	s.mu.Lock()
	return func() {
		s.mu.Unlock()
		s.ckMu.Unlock()
	}
}

// payloadWriter writes a checkpoint's payload to f from off on, counting
// its length and checksum.
type payloadWriter struct {
	f   *file
	off int64
	n   uint64
	sum uint32
}

func (w *payloadWriter) Write(b []byte) (int, error) {
	if err := w.f.writeAt(b, w.off); err != nil {
		return 0, err
	}
	w.off += int64(len(b))
	w.n += uint64(len(b))
	w.sum = crc32.Update(w.sum, castagnoli, b)
	return len(b), nil
}
