package history

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// Events are kept apart from the bbolt store, in segment files appended
// to in the order written:
//
//	DIR/events/SEQ.seg    SEQ: 16 hex digits, 1 up
//
// A segment is segmentMagic, then a frame per chunk (records.go):
//
//	length u32 (top bit: the batch ends here) | crc32c u32 |
//	wall ns u64 of the chunk's oldest event | the chunk
//
// The checksum covers the length word, the time and the chunk. A batch
// is one writev and one fdatasync, done before it is acknowledged; it
// never spans two segments: a new one starts when the batch would not
// fit the room left, or when the newest segment holds an event older
// than MaxAge/8 (so that age retention, which removes whole segments,
// does not wait for a quiet node to fill one). A batch larger than a
// segment is written as several, each whole. A B+tree insert and a page
// write per chunk cost the writer more CPU than the event it stored
// (docs/benchmarks.md, "The history's price"); an append costs a
// system call per batch. Open reads every segment, checks every frame,
// and cuts each after its last whole batch: the torn batch of a crash
// (the tail of the newest segment) goes, and so does whatever follows
// a damaged frame; a note says what was cut. A segment that cannot be
// read, or is not one, is moved aside with a note: the rest of the
// history stays. Retention removes whole segments, the first written
// first.
const (
	segmentsDir   = "events"
	segmentSuffix = ".seg"
	segmentMagic  = "mcptrace events 1\n"
	frameHeadLen  = 16
	frameBatchEnd = 1 << 31
	// minSegment and maxSegment bound a segment's size, which is
	// MaxBytes/32 between them: retention removes a segment at a time,
	// so the store stays within its cap to a segment.
	minSegment = 64 << 10
	maxSegment = 8 << 20
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// errDamagedSegment wraps what a read finds wrong in a segment that Open
// checked: damage since (the disk, a hand), cut at the next Open.
var errDamagedSegment = errors.New("history: an events segment is damaged; what follows the damage is cut at the next start")

// segment is one segment file as the log knows it.
type segment struct {
	seq  uint64
	size int64 // bytes of whole batches, the magic included
	// oldest and newest are the wall times (ns) of its events, events
	// how many it holds (counted again for every copy of a replayed
	// event).
	oldest, newest uint64
	events         int
}

func (s segment) empty() bool { return s.events == 0 }

// segmentLog is the events' segments: the writer appends and removes,
// readers read a snapshot of segs.
type segmentLog struct {
	dir     string
	maxSize int64

	mu   sync.Mutex // guards segs
	segs []segment  // oldest (first written) first

	// Writer only: the newest segment, open for appending (nil until the
	// first batch, and after a failed write or its removal); the highest
	// number a segment had (numbers only grow).
	f       *os.File
	lastSeq uint64
	iovs    [][]byte
}

func segmentName(seq uint64) string { return fmt.Sprintf("%016x%s", seq, segmentSuffix) }

func (l *segmentLog) path(seq uint64) string { return filepath.Join(l.dir, segmentName(seq)) }

// openSegments reads and checks every segment in dir, cutting each after
// its last whole batch; notes say what was cut, removed or moved aside.
// It fails only on the directory itself.
func openSegments(dir string, maxBytes int64, stamp string) (*segmentLog, []string, error) {
	l := &segmentLog{dir: dir, maxSize: min(max(maxBytes/32, minSegment), maxSegment)}
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		if err := os.Mkdir(dir, 0o700); err != nil {
			return nil, nil, fmt.Errorf("history: creating %s: %w", dir, err)
		}
		// Its name must survive a crash, as the batches in it will.
		if err := syncDir(filepath.Dir(dir)); err != nil {
			return nil, nil, err
		}
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("history: listing %s: %w", dir, err)
	}
	var notes []string
	for _, e := range ents {
		hex, ok := strings.CutSuffix(e.Name(), segmentSuffix)
		seq, perr := strconv.ParseUint(hex, 16, 64)
		if !ok || perr != nil || len(hex) != 16 || seq == 0 || !e.Type().IsRegular() {
			continue // moved aside, or not ours
		}
		l.lastSeq = max(l.lastSeq, seq) // never reused, whatever becomes of it
		sg, note := l.check(seq, stamp)
		if note != "" {
			notes = append(notes, note)
		}
		if sg != nil {
			l.segs = append(l.segs, *sg)
		}
	}
	slices.SortFunc(l.segs, func(a, b segment) int { return cmp.Compare(a.seq, b.seq) })
	return l, notes, nil
}

// check reads segment seq and cuts it after its last whole batch. A
// file a crash left before its first batch was durable (shorter than the
// magic, or zeros: its name was, its data not) is removed; one that
// cannot be read, is not a segment, or cannot be cut is moved aside. The
// note says what was done; the segment is nil when it is not kept.
func (l *segmentLog) check(seq uint64, stamp string) (*segment, string) {
	path, name := l.path(seq), segmentName(seq)
	aside := func(why string) (*segment, string) {
		to := path + ".corrupt-" + stamp
		if err := os.Rename(path, to); err != nil {
			return nil, fmt.Sprintf("%s %s, and could not be moved aside (%v): its events are not read", name, why, err)
		}
		return nil, fmt.Sprintf("%s %s: moved to %s, its events are not read", name, why, filepath.Base(to))
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return aside(fmt.Sprintf("could not be read (%v)", err))
	}
	if len(b) < len(segmentMagic) && strings.HasPrefix(segmentMagic, string(b)) || !slices.ContainsFunc(b, func(c byte) bool { return c != 0 }) {
		if err := os.Remove(path); err != nil {
			return aside(fmt.Sprintf("was started and never written (%d bytes), could not be removed (%v)", len(b), err))
		}
		if len(b) == 0 || b[0] != 0 {
			return nil, "" // created, and the crash came before its magic was written
		}
		return nil, fmt.Sprintf("%s was %d bytes of zeros (a crash before its first batch was durable): removed", name, len(b))
	}
	s, good := scanSegment(b)
	s.seq = seq
	if good < 0 {
		return aside("is not an events segment (another format?)")
	}
	if good == int64(len(b)) {
		return &s, ""
	}
	if err := truncateSync(path, good); err != nil {
		return aside(fmt.Sprintf("has %d bytes after its last whole batch, which could not be cut (%v)", int64(len(b))-good, err))
	}
	s.size = good
	frames, events := wholeFrames(b, good)
	return &s, fmt.Sprintf("%d bytes after the last whole batch of %s were cut (%d whole frames, %d events, of a batch a crash left unfinished, then what did not read as a frame): a crash, or damage", int64(len(b))-good, name, frames, events)
}

// truncateSync cuts the file at path to size, durably.
func truncateSync(path string, size int64) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := f.Truncate(size); err != nil {
		return err
	}
	return datasync(f)
}

// wholeFrames counts the whole frames, and their events, from off on.
func wholeFrames(b []byte, off int64) (frames, events int) {
	for {
		payload, _, _, next, ok := frameAt(b, off)
		if !ok {
			return frames, events
		}
		frames++
		_ = eachInChunk(payload, func(_, _ []byte) bool { events++; return true })
		off = next
	}
}

// scanSegment reads a segment's bytes: what the whole batches at its
// start hold, and where they end (-1 when b is not a segment).
func scanSegment(b []byte) (segment, int64) {
	var s segment
	if !bytes.HasPrefix(b, []byte(segmentMagic)) {
		return s, -1
	}
	good := int64(len(segmentMagic))
	var batch segment // the batch being read
	s.size = good
	for off := good; ; {
		payload, oldest, end, next, ok := frameAt(b, off)
		if !ok {
			return s, good
		}
		n := 0
		if eachInChunk(payload, func(_, _ []byte) bool { n++; return true }) != nil {
			return s, good
		}
		batch = merge(batch, oldest, chunkNewest(payload), n)
		off = next
		if end {
			s = merge(s, batch.oldest, batch.newest, batch.events)
			batch = segment{}
			good, s.size = off, off
		}
	}
}

// merge adds n events between oldest and newest to s's counts.
func merge(s segment, oldest, newest uint64, n int) segment {
	if n == 0 {
		return s
	}
	if s.events == 0 {
		s.oldest, s.newest = oldest, newest
	}
	s.oldest, s.newest, s.events = min(s.oldest, oldest), max(s.newest, newest), s.events+n
	return s
}

// frameAt reads the frame at off in b: its chunk, its oldest event's
// time, whether its batch ends with it and where the next frame begins.
// ok is false when no whole frame with a right checksum is there.
func frameAt(b []byte, off int64) (payload []byte, oldest uint64, end bool, next int64, ok bool) {
	if int64(len(b))-off < frameHeadLen {
		return nil, 0, false, 0, false
	}
	h := b[off : off+frameHeadLen]
	word := binary.BigEndian.Uint32(h)
	n := int64(word &^ frameBatchEnd)
	if n < chunkHeadLen || int64(len(b))-off-frameHeadLen < n {
		return nil, 0, false, 0, false
	}
	payload = b[off+frameHeadLen : off+frameHeadLen+n]
	if frameCRC(h, payload) != binary.BigEndian.Uint32(h[4:]) {
		return nil, 0, false, 0, false
	}
	return payload, binary.BigEndian.Uint64(h[8:]), word&frameBatchEnd != 0, off + frameHeadLen + n, true
}

// frameCRC is the checksum of a frame: its length word, its time and
// its chunk.
func frameCRC(head, payload []byte) uint32 {
	crc := crc32.Update(0, castagnoli, head[:4])
	crc = crc32.Update(crc, castagnoli, head[8:frameHeadLen])
	return crc32.Update(crc, castagnoli, payload)
}

// putFrameHead fills the frame head every chunk's buffer starts with.
func putFrameHead(c chunk, end bool) {
	word := uint32(len(c.buf) - frameHeadLen)
	if end {
		word |= frameBatchEnd
	}
	binary.BigEndian.PutUint32(c.buf, word)
	binary.BigEndian.PutUint64(c.buf[8:], c.oldest)
	binary.BigEndian.PutUint32(c.buf[4:], frameCRC(c.buf, c.buf[frameHeadLen:]))
}

// append writes chunks as one batch, and returns once it is durable.
// It starts a new segment first when the batch would not fit the room
// left in the newest (unless that one is empty), or when the newest
// holds an event older than rotateBefore (wall ns). On failure nothing
// of the batch is kept.
func (l *segmentLog) append(chunks []chunk, rotateBefore uint64) error {
	if len(chunks) == 0 {
		return nil
	}
	add := segment{}
	l.iovs = l.iovs[:0]
	var n int64
	for i, c := range chunks {
		if len(c.buf)-frameHeadLen >= frameBatchEnd {
			return fmt.Errorf("history: a chunk of %d bytes", len(c.buf))
		}
		putFrameHead(c, i == len(chunks)-1)
		l.iovs = append(l.iovs, c.buf)
		n += int64(len(c.buf))
		add = merge(add, c.oldest, c.newest, c.events)
	}
	defer clear(l.iovs)
	newest := l.newest()
	full := newest.size > int64(len(segmentMagic)) && newest.size+n > l.maxSize
	fresh := full || !newest.empty() && newest.oldest < rotateBefore
	if l.f == nil || fresh {
		if err := l.rotate(fresh); err != nil {
			return err
		}
		newest = l.newest()
	}
	err := writev(l.f, l.iovs)
	if err == nil {
		err = datasync(l.f)
	}
	if err != nil {
		// Whatever of the batch reached the file goes; if it cannot be
		// cut, the next batch starts a new segment and Open cuts this one.
		name := l.f.Name()
		terr := l.f.Truncate(newest.size)
		if terr == nil {
			terr = datasync(l.f)
		}
		if terr != nil {
			l.f.Close()
			l.f = nil
			return fmt.Errorf("history: appending to %s: %w (and cutting what was written: %v)", name, err, terr)
		}
		return fmt.Errorf("history: appending to %s: %w", name, err)
	}
	l.mu.Lock()
	s := &l.segs[len(l.segs)-1]
	*s = merge(*s, add.oldest, add.newest, add.events)
	s.size += n
	l.mu.Unlock()
	return nil
}

// newest is the segment appended to last (zero when there is none).
func (l *segmentLog) newest() segment {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.segs) == 0 {
		return segment{}
	}
	return l.segs[len(l.segs)-1]
}

// rotate opens the newest segment for appending (after a restart, or a
// file given up), or starts a new one: when fresh, when there is none,
// or when it cannot be appended to.
func (l *segmentLog) rotate(fresh bool) error {
	last := l.newest()
	if !fresh && l.f == nil && last.seq != 0 && last.seq == l.lastSeq && last.size < l.maxSize {
		f, err := os.OpenFile(l.path(last.seq), os.O_WRONLY|os.O_APPEND, 0)
		if err == nil {
			if fi, serr := f.Stat(); serr == nil && fi.Size() == last.size {
				l.f = f
				return nil
			}
			f.Close() // a tail a failed write left: not appended to
		}
	}
	if l.f != nil {
		l.f.Close()
		l.f = nil
	}
	seq := l.lastSeq + 1
	f, err := os.OpenFile(l.path(seq), os.O_WRONLY|os.O_APPEND|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("history: starting an events segment: %w", err)
	}
	l.lastSeq = seq // taken, whatever follows: Open removes it if it stays empty
	if _, err := f.WriteString(segmentMagic); err != nil {
		f.Close()
		return fmt.Errorf("history: starting an events segment: %w", err)
	}
	// The new name must survive a crash, as the batches in it will.
	if err := syncDir(l.dir); err != nil {
		f.Close()
		return err
	}
	l.f = f
	l.mu.Lock()
	l.segs = append(l.segs, segment{seq: seq, size: int64(len(segmentMagic))})
	l.mu.Unlock()
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("history: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("history: syncing %s: %w", dir, err)
	}
	return nil
}

// snapshot is the segments as of now.
func (l *segmentLog) snapshot() []segment {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.segs)
}

// bytes is what the segments take on disk.
func (l *segmentLog) bytes() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	var n int64
	for _, s := range l.segs {
		n += s.size
	}
	return n
}

// oldest is the wall time (ns) of the oldest event kept; 0 when none is.
func (l *segmentLog) oldest() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	var o uint64
	for _, s := range l.segs {
		if !s.empty() && (o == 0 || s.oldest < o) {
			o = s.oldest
		}
	}
	return o
}

// remove removes the segments drop selects and returns how many it
// removed and how many events they held; a segment whose file cannot be
// removed stays, counted. Writer only.
func (l *segmentLog) remove(drop func(i int, s segment) bool) (segs, events int, err error) {
	var gone []segment
	for i, s := range l.snapshot() {
		if drop(i, s) {
			gone = append(gone, s)
		}
	}
	var errs []error
	removed := map[uint64]bool{}
	for _, s := range gone {
		if err := os.Remove(l.path(s.seq)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("history: removing %s: %w", l.path(s.seq), err))
			continue
		}
		if l.f != nil && s.seq == l.lastSeq {
			// The segment being appended to: the next batch starts a
			// new one.
			l.f.Close()
			l.f = nil
		}
		removed[s.seq] = true
		events += s.events
	}
	l.mu.Lock()
	l.segs = slices.DeleteFunc(l.segs, func(s segment) bool { return removed[s.seq] })
	l.mu.Unlock()
	return len(removed), events, errors.Join(errs...)
}

// read calls fn with each chunk of segment s whose events may fall in
// [start, end]. A segment removed meanwhile is read as empty.
func (l *segmentLog) read(s segment, start, end uint64, fn func(chunk []byte) error) error {
	f, err := os.Open(l.path(s.seq))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("history: %w", err)
	}
	defer f.Close()
	b := make([]byte, s.size)
	if _, err := io.ReadFull(f, b); err != nil {
		return fmt.Errorf("%w: %s: %v", errDamagedSegment, segmentName(s.seq), err)
	}
	if !bytes.HasPrefix(b, []byte(segmentMagic)) {
		return fmt.Errorf("%w: %s: no magic", errDamagedSegment, segmentName(s.seq))
	}
	for off := int64(len(segmentMagic)); off < s.size; {
		payload, oldest, _, next, ok := frameAt(b, off)
		if !ok {
			return fmt.Errorf("%w: %s at byte %d", errDamagedSegment, segmentName(s.seq), off)
		}
		off = next
		if oldest > end || chunkNewest(payload) < start {
			continue
		}
		if err := fn(payload); err != nil {
			return err
		}
	}
	return nil
}

// close closes the newest segment's file.
func (l *segmentLog) close() error {
	if l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f = nil
	return err
}
