package sensor

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/mcptrace/mcptrace/lineage"
)

// reader reads the rings of the sets in order, each to its end, the
// sensor's own last. Only the goroutine that calls ReadBatch uses it.
type reader struct {
	rings    []*set
	cur      int
	log      *slog.Logger
	onRetire func(*set)
	// last is the set the last batch came from, for Commit.
	last *set
	dec  decoder
	// pending holds decoded events Read has not returned yet.
	pending []lineage.Event
	pendErr error
}

// settleDelay is how long a drained ring of a taken-over set is watched
// for records from program runs that were already under way when their
// programs were detached, after an RCU grace period (see retireIfDone).
const settleDelay = 50 * time.Millisecond

// membarrierCmdGlobal is MEMBARRIER_CMD_GLOBAL (include/uapi/linux/membarrier.h),
// which the kernel implements with synchronize_rcu().
const membarrierCmdGlobal = 1

// ReadBatch blocks until at least one record is readable, then returns the
// records readable now from one ring buffer, at most max events, decoded.
// The kernel keeps the records until Commit: a reader that dies before
// Commit leaves them for the next agent (which then reads them again).
// The rings of taken-over sets come first; each is drained, watched for
// late records, then released with its pins. Returns ErrClosed after Close.
func (s *Sensor) ReadBatch(max int) (Batch, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return Batch{}, ErrClosed
	}
	s.reading = true
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.reading = false
		closed := s.closed
		s.mu.Unlock()
		if closed {
			s.closeRings()
		}
	}()
	return s.readBatch(max)
}

func (s *Sensor) readBatch(max int) (Batch, error) {
	rd := &s.rd
	var b Batch
	for {
		if s.isClosed() {
			return Batch{}, ErrClosed
		}
		st := rd.rings[rd.cur]
		if st.ring == nil {
			// A set whose creation was cut short: nothing to read.
			rd.onRetire(st)
			rd.cur++
			continue
		}
		var deadline time.Time // own ring: wait
		if st != s.own {
			deadline = time.Now() // old ring: never wait
		}
		raw, err := st.ring.Next(deadline)
		switch {
		case errors.Is(err, os.ErrDeadlineExceeded):
			s.retireIfDone(st)
			continue
		case errors.Is(err, ErrClosed):
			return b, ErrClosed
		case err != nil:
			return b, fmt.Errorf("read ring buffer of %s: %w", st.nameOrOwn(), err)
		}
		rd.last = st
		for {
			if st.readable || st == s.own {
				s.decodeInto(&b, raw)
				st.read.Add(1)
			} else {
				st.skipped.Add(1)
			}
			if len(b.Events) >= max || !st.ring.Buffered() {
				break
			}
			if raw, err = st.ring.Next(time.Now()); err != nil {
				break
			}
		}
		if !st.readable && st != s.own {
			// Another build's records: nothing to return, nothing to keep.
			st.ring.Commit()
			continue
		}
		if len(b.Events) == 0 && b.Barrier == 0 && b.Undecodable == 0 {
			continue // only discarded records
		}
		return b, nil
	}
}

func (s *Sensor) decodeInto(b *Batch, raw []byte) {
	rec, err := s.rd.dec.decodeRecord(raw)
	switch {
	case err != nil:
		b.Undecodable++
		if b.Err == nil {
			b.Err = err
		}
	case rec.isBarrier:
		b.Barrier = max(b.Barrier, rec.barrier)
	case rec.dropped:
		s.requestsDropped.Add(1)
	default:
		b.Events = append(b.Events, rec.ev)
	}
}

// Commit releases the records of the last batch in the kernel's buffer.
// Call it once they are applied and durable.
func (s *Sensor) Commit() {
	if st := s.rd.last; st != nil && st.ring != nil {
		st.ring.Commit()
	}
}

// Read returns the next event, committing as it goes: for callers that
// keep nothing durable (tests, benchmarks). A record that cannot be decoded
// is returned as an error; the caller may go on reading.
func (s *Sensor) Read() (lineage.Event, error) {
	rd := &s.rd
	for len(rd.pending) == 0 {
		if err := rd.pendErr; err != nil {
			rd.pendErr = nil
			return lineage.Event{}, fmt.Errorf("decode: %w", err)
		}
		b, err := s.ReadBatch(64)
		if err != nil {
			return lineage.Event{}, err
		}
		s.Commit()
		rd.pending, rd.pendErr = b.Events, b.Err
	}
	ev := rd.pending[0]
	rd.pending = rd.pending[1:]
	return ev, nil
}

// retireIfDone releases a taken-over set whose ring is empty. Its programs
// were detached at Open, but a run already under way then may still write:
// an RCU grace period (membarrier) and a short wait later the ring is read
// to its end once more before the set goes. The own ring is never retired.
func (s *Sensor) retireIfDone(st *set) {
	if st == s.own {
		return
	}
	rd := &s.rd
	if st.ring != nil && st.ring.Uncommitted() > 0 {
		st.ring.Commit() // unreachable: a batch is committed before the next read
	}
	if !st.settled {
		st.settled = true
		// MEMBARRIER_CMD_GLOBAL waits for an RCU grace period, which
		// covers program runs in progress when the links went.
		unix.Syscall(unix.SYS_MEMBARRIER, membarrierCmdGlobal, 0, 0)
		time.Sleep(settleDelay)
		return
	}
	rd.onRetire(st)
	rd.cur++
}

// retire keeps a drained set's final counters, carries its doomed
// processes over once more, and removes it from the kernel.
func (s *Sensor) retire(st *set) {
	s.copyDoomFrom(st)
	c, err := st.counters()
	if err != nil {
		s.log.Warn("could not read the final counters of a taken-over set", "set", st.name, "err", err)
	}
	if n := st.skipped.Load(); n > 0 {
		s.log.Warn("discarded the unread records of another build's programs (different record layout); the graph is repaired from /proc",
			"set", st.name, "records", n)
	}
	s.mu.Lock()
	s.retired = append(s.retired, c)
	for i, o := range s.old {
		if o == st {
			s.old = append(s.old[:i:i], s.old[i+1:]...)
			break
		}
	}
	s.mu.Unlock()
	st.close()
	if err := os.RemoveAll(st.dir); err != nil {
		s.log.Warn("could not remove a drained pin set", "set", st.name, "err", err)
	}
	s.log.Info("drained and released a previous agent's programs", "set", st.name)
}

func (s *Sensor) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

func (st *set) nameOrOwn() string {
	if st.name == "" {
		return "this sensor"
	}
	return st.name
}

// Barrier puts a barrier record with seq into the sensor's ring buffer.
// ReadBatch reports it (Batch.Barrier) after every record the kernel
// reserved before it: once a reader has seen barrier seq, it has seen
// every event of processes that had forked, exec'd or exited when Barrier
// was called (their tracepoints ran before they could return to user
// space), or those events were counted lost.
func (s *Sensor) Barrier(seq uint64) error {
	ret, err := s.objs.RingBarrier.Run(&ebpf.RunOptions{Context: []uint64{seq}})
	if err != nil {
		return fmt.Errorf("run the barrier program: %w", err)
	}
	if ret != 0 {
		return ErrRingFull
	}
	// Someone waits for it: the reader reads it without letting more
	// records gather first.
	if s.own != nil && s.own.ring != nil {
		s.own.ring.hurry()
	}
	return nil
}
