package history

import (
	"bytes"
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

	"golang.org/x/sys/unix"
)

// Events are kept apart from the bbolt store, in segment files appended
// to in the order written:
//
//	DIR/events/SEQ.seg    SEQ: 16 hex digits, 1 up
//
// A segment is segmentMagic, then a frame per chunk (records.go):
//
//	length u32 (top bit: the batch ends here) | crc32c of the chunk u32 |
//	wall ns u64 of the chunk's oldest event | the chunk
//
// A batch is one writev and one fdatasync, done before it is
// acknowledged; it never spans two segments. A B+tree insert and a page
// write per chunk cost the writer more CPU than the event it stored
// (docs/benchmarks.md, "The history's price"); an append costs a
// system call per batch. Open reads every segment, checks every frame,
// and cuts each after its last whole batch: the torn batch of a crash
// (the tail of the newest segment) goes, and so does whatever follows
// a damaged frame; a note says how many bytes were cut. Retention
// removes whole segments, the oldest written first.
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
// its last whole batch; notes say what was cut or moved aside.
func openSegments(dir string, maxBytes int64, stamp string) (*segmentLog, []string, error) {
	l := &segmentLog{dir: dir, maxSize: min(max(maxBytes/32, minSegment), maxSegment)}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, nil, fmt.Errorf("history: creating %s: %w", dir, err)
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
		s, note, err := l.check(seq, stamp)
		if err != nil {
			return nil, nil, err
		}
		if note != "" {
			notes = append(notes, note)
		}
		if s != nil {
			l.segs = append(l.segs, *s)
		}
	}
	slices.SortFunc(l.segs, func(a, b segment) int { return cmpUint(a.seq, b.seq) })
	if len(l.segs) > 0 {
		l.lastSeq = l.segs[len(l.segs)-1].seq
	}
	return l, notes, nil
}

func cmpUint(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// check reads segment seq and cuts it after its last whole batch. A file
// that is not a segment is moved aside (nil segment); one cut short
// before its magic was written by a crash is removed.
func (l *segmentLog) check(seq uint64, stamp string) (*segment, string, error) {
	path := l.path(seq)
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, "", fmt.Errorf("history: reading %s: %w", path, err)
	}
	if len(b) < len(segmentMagic) && strings.HasPrefix(segmentMagic, string(b)) {
		// Created, and the crash came before its magic was durable.
		if err := os.Remove(path); err != nil {
			return nil, "", fmt.Errorf("history: removing the empty segment %s: %w", path, err)
		}
		return nil, "", nil
	}
	s, good := scanSegment(b)
	s.seq = seq
	if good < 0 {
		aside := path + ".corrupt-" + stamp
		if err := os.Rename(path, aside); err != nil {
			return nil, "", fmt.Errorf("history: %s is not an events segment, and cannot be moved aside: %w", path, err)
		}
		return nil, fmt.Sprintf("%s is not an events segment (another format?): moved to %s", segmentName(seq), filepath.Base(aside)), nil
	}
	if good == int64(len(b)) {
		return &s, "", nil
	}
	if err := os.Truncate(path, good); err != nil {
		return nil, "", fmt.Errorf("history: cutting the torn tail of %s: %w", path, err)
	}
	s.size = good
	return &s, fmt.Sprintf("%d bytes after the last whole batch of %s were cut: a batch a crash left half-written, or damage", int64(len(b))-good, segmentName(seq)), nil
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
	if crc32.Checksum(payload, castagnoli) != binary.BigEndian.Uint32(h[4:]) {
		return nil, 0, false, 0, false
	}
	return payload, binary.BigEndian.Uint64(h[8:]), word&frameBatchEnd != 0, off + frameHeadLen + n, true
}

// putFrameHead fills the frame head every chunk's buffer starts with.
func putFrameHead(c chunk, end bool) {
	payload := c.buf[frameHeadLen:]
	word := uint32(len(payload))
	if end {
		word |= frameBatchEnd
	}
	binary.BigEndian.PutUint32(c.buf, word)
	binary.BigEndian.PutUint32(c.buf[4:], crc32.Checksum(payload, castagnoli))
	binary.BigEndian.PutUint64(c.buf[8:], c.oldest)
}

// append writes chunks as one batch to the newest segment, starting a
// new one when it is full, and returns once the batch is durable. On
// failure nothing of the batch is kept.
func (l *segmentLog) append(chunks []chunk) error {
	if len(chunks) == 0 {
		return nil
	}
	if l.f == nil || l.newestSize() >= l.maxSize {
		if err := l.rotate(); err != nil {
			return err
		}
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
	l.mu.Lock()
	last := &l.segs[len(l.segs)-1]
	size := last.size
	l.mu.Unlock()
	err := writev(l.f, l.iovs)
	if err == nil {
		err = unix.Fdatasync(int(l.f.Fd()))
	}
	clear(l.iovs)
	if err != nil {
		// Whatever of the batch reached the file goes; if it cannot be
		// cut, the next batch starts a new segment and Open cuts it.
		name := l.f.Name()
		if terr := l.f.Truncate(size); terr != nil {
			l.f.Close()
			l.f = nil
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

func (l *segmentLog) newestSize() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.segs) == 0 {
		return 0
	}
	return l.segs[len(l.segs)-1].size
}

// rotate opens the newest segment for appending, or starts a new one
// when there is none, it is full, or its file was given up.
func (l *segmentLog) rotate() error {
	l.mu.Lock()
	var last segment
	if len(l.segs) > 0 {
		last = l.segs[len(l.segs)-1]
	}
	l.mu.Unlock()
	if l.f == nil && last.seq != 0 && last.seq == l.lastSeq && last.size < l.maxSize {
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
	if _, err := f.WriteString(segmentMagic); err != nil {
		f.Close()
		os.Remove(f.Name())
		return fmt.Errorf("history: starting an events segment: %w", err)
	}
	// The new name must survive a crash, as the batches in it will.
	if err := syncDir(l.dir); err != nil {
		f.Close()
		os.Remove(f.Name())
		return err
	}
	l.f, l.lastSeq = f, seq
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

// writev writes bufs whole, IOV_MAX at a time.
func writev(f *os.File, bufs [][]byte) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	for len(bufs) > 0 {
		var n int
		var werr error
		if err := rc.Write(func(fd uintptr) bool {
			n, werr = unix.Writev(int(fd), bufs[:min(len(bufs), 1024)])
			return true
		}); err != nil {
			return err
		}
		if errors.Is(werr, unix.EINTR) {
			continue
		}
		if werr != nil {
			return werr
		}
		if n == 0 {
			return io.ErrShortWrite
		}
		for n > 0 {
			if n >= len(bufs[0]) {
				n -= len(bufs[0])
				bufs = bufs[1:]
			} else {
				bufs[0] = bufs[0][n:]
				n = 0
			}
		}
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

// remove removes the segments drop selects and returns how many events
// they held. Writer only.
func (l *segmentLog) remove(drop func(i int, s segment) bool) (int, error) {
	l.mu.Lock()
	var gone []segment
	kept := l.segs[:0]
	for i, s := range l.segs {
		if drop(i, s) {
			gone = append(gone, s)
		} else {
			kept = append(kept, s)
		}
	}
	clear(l.segs[len(kept):])
	l.segs = kept
	l.mu.Unlock()
	n := 0
	var errs []error
	for _, s := range gone {
		if l.f != nil && s.seq == l.lastSeq {
			// The segment being appended to: the next batch starts a
			// new one.
			l.f.Close()
			l.f = nil
		}
		if err := os.Remove(l.path(s.seq)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("history: removing %s: %w", l.path(s.seq), err))
		}
		n += s.events
	}
	return n, errors.Join(errs...)
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
