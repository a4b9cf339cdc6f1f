package sensor

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// Record header of a BPF ring buffer (include/uapi/linux/bpf.h,
// kernel/bpf/ringbuf.c): u32 len carrying the two flag bits, u32 pg_off;
// the data follows, the whole record padded to 8 bytes.
const (
	ringBusyBit    = 1 << 31 // BPF_RINGBUF_BUSY_BIT: reserved, not yet submitted or discarded
	ringDiscardBit = 1 << 30 // BPF_RINGBUF_DISCARD_BIT: the producer threw the record away
	ringHeaderSize = 8       // BPF_RINGBUF_HDR_SZ
)

// ringOverwrite is BPF_F_RB_OVERWRITE (include/uapi/linux/bpf.h; kernels
// after 6.18, which refuses it): a ring buffer map created with it lets the
// producer overwrite records the consumer has not consumed, which is what
// ring exists to prevent.
const ringOverwrite = 1 << 19

// How Next waits where the kernel will not wake it (a busy header, or
// records read but not committed): it yields ringSpins times, then sleeps
// ringMinPause, doubling up to ringMaxPause, on the eventfd Close signals.
const (
	ringSpins    = 16
	ringMinPause = 20 * time.Microsecond
	ringMaxPause = time.Millisecond
)

// ringCoalesce is how long Next lets records gather after the kernel woke
// it, before it reads them. The kernel wakes a reader for a record
// submitted at the consumer position, that is for the first record after
// every Commit that caught up; the wakeup is an interrupt raised from the
// program (irq_work), paid by the process that forked, exec'd or exited:
// on this project's virtual machines 10–13 µs, thirty times the program's
// own work. A reader that reads at once and commits each record makes
// every event pay it. Waiting ringCoalesce after a wakeup holds the
// consumer position still meanwhile, so the records that arrive during
// the wait raise no interrupt: at most one wakeup per ringCoalesce
// however fast processes come, and each event waits at most that much
// longer to be seen (a session's end is noticed that much later).
const ringCoalesce = 2 * time.Millisecond

// Under a storm the sensor's own ring coalesces longer: from
// ringStormRate records a second on (measured over each coalesce), Next
// waits ringStormCoalesce instead. What a batch costs the agent besides
// its events (waking, the Go scheduler's handoffs and its monitor
// thread, a journal write) was most of its CPU in an unpinned fork
// storm: about 100 µs a batch on this project's virtual machines,
// 500 batches a second at 2 ms. An exec storm of 400 execs a second
// (1,200 records) is a storm too: at 4,000 records a second it was not,
// and the agent spent 28% more CPU on it (docs/benchmarks.md, "The
// storm's pace from 1,000 records a second"). Below the rate the wait
// stays ringCoalesce, so a session's end on a node that is not storming
// is noticed as soon as before; a Barrier (Sensor.Sync's, the
// enforcer's sweep) cuts any wait short.
const (
	ringStormCoalesce = 8 * time.Millisecond
	ringStormRate     = 1000
)

// ring reads one BPF ring buffer map. Records are returned in the order the
// kernel reserved them; the kernel's consumer position moves only on Commit,
// so records read but not committed are still in the buffer for the next
// reader of the same map (e.g. after a crash), and the producer cannot
// overwrite them.
//
// One goroutine calls Next, Commit, Buffered and Uncommitted; Close may be
// called from any goroutine at any time. A ring must be the only reader of
// its map while it is open.
//
// The kernel wakes a waiting reader only when a record is submitted at the
// consumer position (bpf_ringbuf_commit), that is when everything before it
// was committed. A Next that blocks with uncommitted records therefore
// polls, every ringMaxPause at the latest; Commit before blocking for a
// wait that costs nothing.
type ring struct {
	// mu is held by Next, Commit and Buffered while they touch the mapped
	// pages, and by Close while it unmaps them.
	mu sync.Mutex
	// closing is set by Close before it signals evfd: a Next that sees it
	// returns ErrClosed and releases mu.
	closing atomic.Bool
	// unmapped is set under mu once Close has released the mappings.
	unmapped bool

	cons, prod []byte   // the mappings: consumer page (rw); producer page and data (ro)
	consPos    *uintptr // the kernel's consumer_pos (unsigned long), first word of cons
	prodPos    *uintptr // the kernel's producer_pos, first word of prod
	data       []byte   // the data area, size bytes
	mask       uintptr  // size - 1

	// read is the private read position: the end of the last record Next
	// returned or skipped, and last its start. want is the position the
	// caller last committed; committed is the consumer position this ring
	// last stored, or found at newRing: want, or last while the ring
	// holds the last record back (holdBack). Only the reading goroutine
	// touches them.
	read, last, want, committed uintptr
	// holdBack: Commit keeps the consumer position at the start of the
	// last record returned, so that the kernel, which wakes the reader
	// only for a record submitted at the consumer position, raises no
	// interrupt for the records that follow while the reader is busy;
	// Next polls every coalesce instead, and releases the record and waits
	// for the kernel once a whole coalesce brought nothing. The sensor's
	// own ring holds back; a held record is read again by the next reader
	// of the map only after a crash (a duplicate, which the graph applies
	// once).
	holdBack bool

	epfd, evfd int                // epoll on the map fd and evfd; evfd is signalled by Close and never read
	events     [2]unix.EpollEvent // epoll_wait's buffer
	// coalesce is how long Next waits after a wakeup before reading
	// (ringCoalesce for the sensor's own ring; 0: read at once), and
	// storm how long while records come at ringStormRate or faster (0:
	// coalesce). pace is the wait in force, judged from records counted
	// since paceFrom. Only the reading goroutine touches them.
	coalesce, storm time.Duration
	pace            time.Duration
	paceFrom        time.Time
	paceRecords     int
	// hurryfd is signalled (and hurried set) by hurry: the next wait for
	// records to gather ends at once. Drained by the reading goroutine.
	hurryfd int
	hurried atomic.Bool
	hurryMu sync.Mutex // hurry's write against release's close of hurryfd
	// wakeups counts the waits the kernel ended by a record. Only the
	// reading goroutine touches it.
	wakeups uint64
	pollfd  [2]unix.PollFd // evfd and hurryfd, for the pauses

	closeOnce sync.Once
	closeErr  error
}

// newRing maps the ring buffer map m: its consumer page read-write, its
// producer page and data pages read-only (the kernel maps the data twice,
// back to back, so a record that wraps is contiguous). Reading starts at
// the consumer position the kernel holds, so records a previous reader
// read but did not commit are read again. The map must outlive the ring.
func newRing(m *ebpf.Map) (*ring, error) {
	if m.Type() != ebpf.RingBuf {
		return nil, fmt.Errorf("new ring: map is a %v, not a ring buffer", m.Type())
	}
	if m.Flags()&ringOverwrite != 0 {
		return nil, errors.New("new ring: the map is in overwrite mode (BPF_F_RB_OVERWRITE): its producer does not wait for Commit")
	}
	page := os.Getpagesize()
	size := int(m.MaxEntries())
	if size <= 0 || size&(size-1) != 0 || size%page != 0 {
		return nil, fmt.Errorf("new ring: size %d is not a power of two and a multiple of the page size", size)
	}
	fd := m.FD()
	r := &ring{epfd: -1, evfd: -1, hurryfd: -1, mask: uintptr(size - 1)}
	fail := func(err error) (*ring, error) {
		r.release()
		return nil, err
	}
	var err error
	if r.cons, err = unix.Mmap(fd, 0, page, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED); err != nil {
		return fail(fmt.Errorf("mmap ring consumer page: %w", err))
	}
	if r.prod, err = unix.Mmap(fd, int64(page), page+size, unix.PROT_READ, unix.MAP_SHARED); err != nil {
		return fail(fmt.Errorf("mmap ring producer page and data: %w", err))
	}
	r.consPos = (*uintptr)(unsafe.Pointer(&r.cons[0]))
	r.prodPos = (*uintptr)(unsafe.Pointer(&r.prod[0]))
	r.data = r.prod[page:]

	if r.evfd, err = unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK); err != nil {
		return fail(fmt.Errorf("ring eventfd: %w", err))
	}
	if r.hurryfd, err = unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK); err != nil {
		return fail(fmt.Errorf("ring eventfd: %w", err))
	}
	if r.epfd, err = unix.EpollCreate1(unix.EPOLL_CLOEXEC); err != nil {
		return fail(fmt.Errorf("ring epoll: %w", err))
	}
	for _, f := range []int{fd, r.evfd} {
		ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(f)}
		if err := unix.EpollCtl(r.epfd, unix.EPOLL_CTL_ADD, f, &ev); err != nil {
			return fail(fmt.Errorf("ring epoll add fd %d: %w", f, err))
		}
	}
	r.pollfd[0] = unix.PollFd{Fd: int32(r.evfd), Events: unix.POLLIN}
	r.pollfd[1] = unix.PollFd{Fd: int32(r.hurryfd), Events: unix.POLLIN}

	r.read = atomic.LoadUintptr(r.consPos)
	r.last, r.want, r.committed = r.read, r.read, r.read
	return r, nil
}

// Next returns the next record after the last one returned. It moves a
// private read position only; the kernel's consumer position is untouched
// until Commit. The slice aliases the mapped buffer and stays valid until
// Commit or Close; a record of length zero is an empty, non-nil slice.
//
// Records the kernel discarded are skipped. A record whose header is still
// busy (reserved, not yet submitted) is waited for, never skipped, so
// records come back in the order they were reserved.
//
// Next blocks until a record is available, the deadline passes
// (os.ErrDeadlineExceeded; a zero deadline means none) or Close is called
// (ErrClosed). A deadline in the past still returns a record that is
// already there: Next(time.Now()) is a read that never waits, and that
// reports os.ErrDeadlineExceeded for a busy header too.
func (r *ring) Next(deadline time.Time) ([]byte, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for idle := 0; ; {
		if r.closing.Load() {
			return nil, ErrClosed
		}
		// Pairs with the kernel's smp_store_release of producer_pos after
		// it wrote a reserved record's (busy) header.
		prod := atomic.LoadUintptr(r.prodPos)
		busy := false
		if r.read != prod {
			off := r.read & r.mask
			// Pairs with the xchg in bpf_ringbuf_commit: once the busy bit
			// is seen clear, the record's data is visible too.
			hdr := atomic.LoadUint32((*uint32)(unsafe.Pointer(&r.data[off])))
			busy = hdr&ringBusyBit != 0
			if !busy {
				n := uintptr(hdr &^ (ringBusyBit | ringDiscardBit))
				size := ringHeaderSize + (n+7)&^7
				if size > prod-r.read {
					return nil, fmt.Errorf("ring record at %d of %d bytes runs past the producer position %d", r.read, n, prod)
				}
				r.last = r.read
				r.read += size
				if hdr&ringDiscardBit != 0 {
					idle = 0
					continue
				}
				r.paceRecords++
				start := (off + ringHeaderSize) & r.mask
				if end := start + n; end <= uintptr(len(r.data)) {
					return r.data[start:end:end], nil
				}
				// The record wraps: a copy of its two parts.
				rec := make([]byte, n)
				k := copy(rec, r.data[start:])
				copy(rec[k:], r.data)
				return rec, nil
			}
		}
		if !deadline.IsZero() && !time.Now().Before(deadline) {
			return nil, os.ErrDeadlineExceeded
		}
		if !busy && r.read == r.want && r.committed != r.want {
			// Caught up, with the last record held back (Commit): the
			// kernel wakes nobody for what comes next, so look again after
			// coalesce; when nothing came meanwhile, release the record and
			// wait for the kernel below.
			if err := r.sleep(r.gather(time.Now()), deadline, true); err != nil {
				return nil, err
			}
			if atomic.LoadUintptr(r.prodPos) == r.read {
				atomic.StoreUintptr(r.consPos, r.want)
				r.committed = r.want
			}
			continue
		}
		if !busy && r.read == r.committed {
			// Caught up and committed: the kernel wakes the epoll when the
			// next record is submitted. Our consumer_pos store (Commit) and
			// the load of producer_pos above are ordered like the kernel's
			// header xchg and its consumer_pos load, so either we saw the
			// record or the kernel sees us waiting at it.
			woken, err := r.wait(deadline)
			if err != nil {
				return nil, err
			}
			if woken {
				r.wakeups++
			}
			if woken && r.coalesce > 0 {
				if err := r.sleep(r.gather(time.Now()), deadline, true); err != nil {
					return nil, err
				}
			}
			continue
		}
		// A busy header, or caught up with uncommitted records: the
		// kernel will not wake us (and its poll reports the uncommitted
		// bytes as readable, so epoll would not sleep either).
		if err := r.pause(idle, deadline); err != nil {
			return nil, err
		}
		idle++
	}
}

// gather returns how long to let records gather: coalesce, storm while
// records come at ringStormRate a second or faster, nothing once hurried.
// now is the caller's clock (the pace is judged at it, so a test can
// give it exact times).
func (r *ring) gather(now time.Time) time.Duration {
	if r.hurried.Swap(false) {
		var b [8]byte
		unix.Read(r.hurryfd, b[:]) // drained: the next sleep waits again
		return 0
	}
	if r.storm == 0 {
		return r.coalesce
	}
	if r.paceFrom.IsZero() {
		r.paceFrom, r.pace = now, r.coalesce
	}
	if el := now.Sub(r.paceFrom); el >= r.coalesce {
		if float64(r.paceRecords) >= ringStormRate*el.Seconds() {
			r.pace = r.storm
		} else {
			r.pace = r.coalesce
		}
		r.paceFrom, r.paceRecords = now, 0
	}
	return r.pace
}

// hurry ends the wait for records to gather now or, when none is under
// way, the next one: a caller waits for a record just written (a
// barrier). Safe from any goroutine.
func (r *ring) hurry() {
	r.hurried.Store(true)
	var one [8]byte
	binary.NativeEndian.PutUint64(one[:], 1)
	r.hurryMu.Lock()
	defer r.hurryMu.Unlock()
	if r.hurryfd >= 0 {
		unix.Write(r.hurryfd, one[:])
	}
}

// wait blocks in epoll until the map fd or the eventfd is readable, or the
// deadline passes; woken says the map fd was. The caller re-checks
// everything after it returns.
func (r *ring) wait(deadline time.Time) (woken bool, err error) {
	msec := -1
	if !deadline.IsZero() {
		d := time.Until(deadline)
		if d <= 0 {
			return false, nil
		}
		msec = int((d + time.Millisecond - 1) / time.Millisecond)
	}
	n, err := unix.EpollWait(r.epfd, r.events[:], msec)
	if err != nil && err != unix.EINTR {
		return false, fmt.Errorf("ring epoll wait: %w", err)
	}
	for _, ev := range r.events[:max(n, 0)] {
		if ev.Fd != int32(r.evfd) {
			woken = true
		}
	}
	return woken && !r.closing.Load(), nil
}

// pause waits a little before the idle-th re-check of a ring the kernel
// will not wake us for: first by yielding, then by sleeping on the eventfd
// so Close still ends the wait at once.
func (r *ring) pause(idle int, deadline time.Time) error {
	if idle < ringSpins {
		runtime.Gosched()
		return nil
	}
	d := ringMaxPause
	if shift := idle - ringSpins; shift < 8 {
		d = min(ringMinPause<<shift, ringMaxPause)
	}
	return r.sleep(d, deadline, false)
}

// sleep waits d, or until the deadline or Close, whichever comes first,
// or, when hurryable, until hurry.
func (r *ring) sleep(d time.Duration, deadline time.Time, hurryable bool) error {
	if !deadline.IsZero() {
		d = min(d, time.Until(deadline))
		if d <= 0 {
			return nil
		}
	}
	ts := unix.NsecToTimespec(int64(d))
	fds := r.pollfd[:1]
	if hurryable {
		fds = r.pollfd[:]
	}
	if _, err := unix.Ppoll(fds, &ts, nil); err != nil && err != unix.EINTR {
		return fmt.Errorf("ring ppoll: %w", err)
	}
	return nil
}

// Buffered reports whether Next can return without waiting for the
// kernel: something was reserved past the read position. That is a record,
// a discarded record (which Next skips) or a busy header (which Next
// waits for). After Close it reports false.
func (r *ring) Buffered() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return !r.unmapped && atomic.LoadUintptr(r.prodPos) != r.read
}

// Commit stores the read position into the kernel's consumer position:
// the records Next returned so far leave the buffer (but the last one, on
// a ring that holds it back, until Next finds the ring quiet or Close),
// the producer may reuse their space, and the slices Next returned become
// invalid. After Close it does nothing.
func (r *ring) Commit() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.unmapped {
		return
	}
	r.want = r.read
	pos := r.read
	if r.holdBack && r.last != r.read && r.last >= r.committed {
		pos = r.last
	}
	if pos <= r.committed {
		// Nothing new, or the held record was released already: the
		// consumer position never moves back (the producer may have
		// reused what lies behind it).
		return
	}
	// Release: the reads of the records happen before the kernel may
	// reuse their space (pairs with smp_load_acquire of consumer_pos in
	// __bpf_ringbuf_reserve). Go's atomics are sequentially consistent.
	atomic.StoreUintptr(r.consPos, pos)
	r.committed = pos
}

// Uncommitted returns how many bytes of the buffer Next has read past the
// position last committed (headers, padding and discarded records
// included): what Commit would release.
func (r *ring) Uncommitted() int {
	return int(r.read - r.want)
}

// wake makes a Next blocked in another goroutine, and every later Next,
// return ErrClosed, without unmapping anything: the reader may still hold
// a record Next returned, and closes the ring when it is done. It takes
// no lock (a blocked Next holds mu); the caller makes sure Close does not
// run at the same time.
func (r *ring) wake() error {
	r.closing.Store(true)
	var one [8]byte
	binary.NativeEndian.PutUint64(one[:], 1)
	if _, err := unix.Write(r.evfd, one[:]); err != nil {
		return fmt.Errorf("signal ring eventfd: %w", err)
	}
	return nil
}

// Close wakes a Next blocked in another goroutine, which returns ErrClosed,
// waits for it to return, then unmaps the buffer and closes the ring's
// descriptors (not the map's). Records read but not committed stay in the
// kernel's buffer. Close may be called more than once and from any
// goroutine; later calls return the first call's result.
func (r *ring) Close() error {
	r.closeOnce.Do(func() {
		r.closing.Store(true)
		// The counter is never read: evfd stays readable, so every later
		// wait ends at once too.
		var one [8]byte
		binary.NativeEndian.PutUint64(one[:], 1)
		_, werr := unix.Write(r.evfd, one[:])
		if werr != nil {
			werr = fmt.Errorf("signal ring eventfd: %w", werr)
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		if !r.unmapped && r.committed != r.want {
			// The record held back was committed by the caller.
			atomic.StoreUintptr(r.consPos, r.want)
			r.committed = r.want
		}
		r.closeErr = errors.Join(werr, r.release())
	})
	return r.closeErr
}

// release unmaps the pages and closes the descriptors newRing made.
func (r *ring) release() error {
	var errs []error
	r.unmapped = true
	for _, b := range [][]byte{r.prod, r.cons} {
		if b != nil {
			if err := unix.Munmap(b); err != nil {
				errs = append(errs, fmt.Errorf("munmap ring: %w", err))
			}
		}
	}
	r.prod, r.cons, r.data, r.consPos, r.prodPos = nil, nil, nil, nil, nil
	r.hurryMu.Lock()
	defer r.hurryMu.Unlock()
	for _, fd := range []int{r.epfd, r.evfd, r.hurryfd} {
		if fd >= 0 {
			if err := unix.Close(fd); err != nil {
				errs = append(errs, fmt.Errorf("close ring fd: %w", err))
			}
		}
	}
	r.epfd, r.evfd, r.hurryfd = -1, -1, -1
	return errors.Join(errs...)
}
