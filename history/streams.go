package history

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// Events are kept apart per uid, so that one user's churn removes only
// their own (retention.go): the events of the processes of uid N are a
// stream of segments (segments.go) of their own,
//
//	DIR/events/uid-N/SEQ.seg
//
// The events of uids above maxStreamUID (subordinate uids, which
// rootless containers of any user run under: shadow's SUB_UID_MIN is
// 100000), of uids past maxStreams, and those a store written before
// streams holds (their uid unknown) are the shared stream, in
// DIR/events/ itself: a user who spreads their processes over many
// subordinate uids fills that one stream, not one per uid. A stream's
// directory is created with its first batch and stays.
const (
	streamPrefix = "uid-"
	// maxStreams bounds the streams, and the files the writer holds open
	// (one per stream): a node's processes run under a few dozen uids.
	maxStreams = 64
	// maxStreamUID is the highest uid with a stream of its own: the
	// highest a login uid takes (shadow's UID_MAX is 60000, systemd's
	// dynamic users end at 65519).
	maxStreamUID = 65535
	// sharedStream is the shared stream's key.
	sharedStream = math.MaxUint32
)

// streams are the events' segments, a log per uid.
type streams struct {
	root    string
	maxSize int64 // of a segment, the same in every stream
	stamp   string

	mu   sync.Mutex // guards logs; each log guards its own segments
	logs map[uint32]*segmentLog
}

// stream is a uid's log, for iterating.
type stream struct {
	uid uint32
	log *segmentLog
}

// openStreams opens the shared stream in root and every uid's stream
// below it, each as openSegments does (its notes say what was cut, and
// name the stream). It fails only on root itself.
func openStreams(root string, maxBytes int64, stamp string) (*streams, []string, error) {
	shared, notes, err := openSegments(root, maxBytes, stamp)
	if err != nil {
		return nil, nil, err
	}
	s := &streams{root: root, maxSize: shared.maxSize, stamp: stamp, logs: map[uint32]*segmentLog{sharedStream: shared}}
	ents, err := os.ReadDir(root)
	if err != nil {
		return nil, nil, fmt.Errorf("history: listing %s: %w", root, err)
	}
	for _, e := range ents {
		n, ok := strings.CutPrefix(e.Name(), streamPrefix)
		uid, perr := strconv.ParseUint(n, 10, 32)
		if !ok || perr != nil || !e.IsDir() || uid == sharedStream || strconv.FormatUint(uid, 10) != n {
			continue
		}
		l, cut, err := openSegments(filepath.Join(root, e.Name()), maxBytes, stamp)
		if err != nil {
			notes = append(notes, fmt.Sprintf("the events of uid %d could not be opened (%v): they are not read", uid, err))
			continue
		}
		for _, c := range cut {
			notes = append(notes, e.Name()+"/"+c)
		}
		s.logs[uint32(uid)] = l
	}
	return s, notes, nil
}

// log is uid's stream, created with its directory when it has none: the
// shared one past maxStreams, or when the directory cannot be made (the
// error says why). Writer only.
func (s *streams) log(uid uint32) (*segmentLog, error) {
	s.mu.Lock()
	l := s.logs[uid]
	full := len(s.logs) > maxStreams // the shared one besides
	shared := s.logs[sharedStream]
	s.mu.Unlock()
	if l != nil {
		return l, nil
	}
	if full || uid > maxStreamUID {
		return shared, nil
	}
	l, _, err := openSegments(filepath.Join(s.root, streamPrefix+strconv.FormatUint(uint64(uid), 10)), s.maxSize*32, s.stamp)
	if err != nil {
		return shared, err
	}
	l.maxSize = s.maxSize
	s.mu.Lock()
	s.logs[uid] = l
	s.mu.Unlock()
	return l, nil
}

// all is every stream, the shared one last and the others by uid.
func (s *streams) all() []stream {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]stream, 0, len(s.logs))
	for uid, l := range s.logs {
		out = append(out, stream{uid, l})
	}
	slices.SortFunc(out, func(a, b stream) int { return cmp.Compare(a.uid, b.uid) })
	return out
}

// bytes is what every stream's segments take on disk.
func (s *streams) bytes() int64 {
	var n int64
	for _, st := range s.all() {
		n += st.log.bytes()
	}
	return n
}

// oldest is the wall time (ns) of the oldest event kept in any stream;
// 0 when none is.
func (s *streams) oldest() uint64 {
	var o uint64
	for _, st := range s.all() {
		if t := st.log.oldest(); t != 0 && (o == 0 || t < o) {
			o = t
		}
	}
	return o
}

// close closes every stream's newest segment.
func (s *streams) close() error {
	var errs []error
	for _, st := range s.all() {
		errs = append(errs, st.log.close())
	}
	return errors.Join(errs...)
}
