package sensor

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/features"
	"github.com/cilium/ebpf/ringbuf"
	"github.com/cilium/ebpf/rlimit"

	"github.com/mcptrace/mcptrace/internal/testenv"
)

// The records in these tests come from real BPF programs writing to a
// real ring buffer map: raw tracepoint programs that are never attached
// and run through BPF_PROG_TEST_RUN, their context args chosen by the test.

// ringMaxRecord is the largest record ringWriter.write makes.
const ringMaxRecord = 256

// ringWriter is a ring buffer map with the programs that write to it.
type ringWriter struct {
	m *ebpf.Map
	// output: args (size, seed). Writes a record of size bytes (up to
	// ringMaxRecord) with bpf_ringbuf_output: little-endian u64s seed,
	// seed+1, … cut to size. Returns the helper's result.
	output *ebpf.Program
	// reserve: args (seed, discard). Reserves 16 bytes, writes seed and
	// seed+1, then submits or (discard != 0) discards. Returns 0, or
	// -EAGAIN when nothing could be reserved.
	reserve *ebpf.Program
	// burst: args (count, seed). Writes count (up to ringBurst) 8-byte
	// records seed, seed+1, … with bpf_ringbuf_output; returns how many
	// the kernel took.
	burst *ebpf.Program
}

// ringBurst is the most records one run of the burst program writes.
const ringBurst = 256

// newRingWriter creates a ring buffer map of size bytes and loads the
// programs, or skips naming the missing feature.
func newRingWriter(tb testing.TB, size int) *ringWriter {
	tb.Helper()
	testenv.Root(tb)
	if err := rlimit.RemoveMemlock(); err != nil {
		tb.Fatalf("remove memlock rlimit: %v", err)
	}
	if err := features.HaveMapType(ebpf.RingBuf); err != nil {
		testenv.Missing(tb, "BPF ring buffer", fmt.Sprintf("needs Linux 5.8 or newer: %v", err))
	}
	m, err := ebpf.NewMap(&ebpf.MapSpec{Name: "ring_test", Type: ebpf.RingBuf, MaxEntries: uint32(size)})
	if err != nil {
		tb.Fatalf("create ring buffer map: %v", err)
	}
	tb.Cleanup(func() { m.Close() })
	w := &ringWriter{m: m}
	for _, p := range []struct {
		prog  **ebpf.Program
		name  string
		insns asm.Instructions
	}{
		{&w.output, "ring_output", ringOutputInsns(m)},
		{&w.reserve, "ring_reserve", ringReserveInsns(m)},
		{&w.burst, "ring_burst", ringBurstInsns(m)},
	} {
		prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
			Name: p.name, Type: ebpf.RawTracepoint, License: "GPL", Instructions: p.insns,
		})
		if errors.Is(err, ebpf.ErrNotSupported) {
			testenv.Missing(tb, "raw tracepoint programs with ring buffer helpers", err.Error())
		}
		if err != nil {
			tb.Fatalf("load %s: %v", p.name, err)
		}
		tb.Cleanup(func() { prog.Close() })
		*p.prog = prog
	}
	return w
}

func ringOutputInsns(m *ebpf.Map) asm.Instructions {
	insns := asm.Instructions{
		asm.Mov.Reg(asm.R6, asm.R1),
		asm.LoadMem(asm.R3, asm.R6, 8, asm.DWord), // seed
	}
	for off := -ringMaxRecord; off < 0; off += 8 {
		insns = append(insns,
			asm.StoreMem(asm.RFP, int16(off), asm.R3, asm.DWord),
			asm.Add.Imm(asm.R3, 1))
	}
	return append(insns,
		asm.LoadMem(asm.R3, asm.R6, 0, asm.DWord), // size
		asm.JGT.Imm(asm.R3, ringMaxRecord, "too_big"),
		asm.LoadMapPtr(asm.R1, m.FD()),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -ringMaxRecord),
		asm.Mov.Imm(asm.R4, 0),
		asm.FnRingbufOutput.Call(),
		asm.Return(),
		asm.Mov.Imm(asm.R0, -int32(syscall.EINVAL)).WithSymbol("too_big"),
		asm.Return(),
	)
}

func ringReserveInsns(m *ebpf.Map) asm.Instructions {
	return asm.Instructions{
		asm.Mov.Reg(asm.R6, asm.R1),
		asm.LoadMapPtr(asm.R1, m.FD()),
		asm.Mov.Imm(asm.R2, 16),
		asm.Mov.Imm(asm.R3, 0),
		asm.FnRingbufReserve.Call(),
		asm.JEq.Imm(asm.R0, 0, "full"),
		asm.LoadMem(asm.R3, asm.R6, 0, asm.DWord), // seed
		asm.StoreMem(asm.R0, 0, asm.R3, asm.DWord),
		asm.Add.Imm(asm.R3, 1),
		asm.StoreMem(asm.R0, 8, asm.R3, asm.DWord),
		asm.LoadMem(asm.R7, asm.R6, 8, asm.DWord), // discard
		asm.Mov.Reg(asm.R1, asm.R0),
		asm.Mov.Imm(asm.R2, 0),
		asm.JNE.Imm(asm.R7, 0, "discard"),
		asm.FnRingbufSubmit.Call(),
		asm.Mov.Imm(asm.R0, 0),
		asm.Return(),
		asm.FnRingbufDiscard.Call().WithSymbol("discard"),
		asm.Mov.Imm(asm.R0, 0),
		asm.Return(),
		asm.Mov.Imm(asm.R0, -int32(syscall.EAGAIN)).WithSymbol("full"),
		asm.Return(),
	}
}

func ringBurstInsns(m *ebpf.Map) asm.Instructions {
	insns := asm.Instructions{
		asm.LoadMem(asm.R7, asm.R1, 0, asm.DWord), // count
		asm.LoadMem(asm.R8, asm.R1, 8, asm.DWord), // seed
		asm.Mov.Imm(asm.R9, 0),                    // written
	}
	for range ringBurst {
		insns = append(insns,
			asm.JEq.Imm(asm.R7, 0, "done"),
			asm.Sub.Imm(asm.R7, 1),
			asm.StoreMem(asm.RFP, -8, asm.R8, asm.DWord),
			asm.Add.Imm(asm.R8, 1),
			asm.LoadMapPtr(asm.R1, m.FD()),
			asm.Mov.Reg(asm.R2, asm.RFP),
			asm.Add.Imm(asm.R2, -8),
			asm.Mov.Imm(asm.R3, 8),
			asm.Mov.Imm(asm.R4, 0),
			asm.FnRingbufOutput.Call(),
			asm.JNE.Imm(asm.R0, 0, "done"),
			asm.Add.Imm(asm.R9, 1),
		)
	}
	return append(insns,
		asm.Mov.Reg(asm.R0, asm.R9).WithSymbol("done"),
		asm.Return(),
	)
}

// ringRun runs p with the context args and returns its r0 as a signed int.
func ringRun(tb testing.TB, p *ebpf.Program, args ...uint64) int32 {
	tb.Helper()
	ret, err := p.Run(&ebpf.RunOptions{Context: args})
	if errors.Is(err, ebpf.ErrNotSupported) {
		testenv.Missing(tb, "BPF_PROG_TEST_RUN of raw tracepoint programs", fmt.Sprintf("needs Linux 5.10 or newer: %v", err))
	}
	if err != nil {
		tb.Fatalf("run %v: %v", p, err)
	}
	return int32(ret)
}

// tryWrite writes a record of size bytes from seed and returns the
// helper's result: 0, or -EAGAIN when the buffer has no room.
func (w *ringWriter) tryWrite(tb testing.TB, size int, seed uint64) int32 {
	tb.Helper()
	return ringRun(tb, w.output, uint64(size), seed)
}

// write writes a record of size bytes from seed and fails the test if
// the kernel refused it.
func (w *ringWriter) write(tb testing.TB, size int, seed uint64) {
	tb.Helper()
	if ret := w.tryWrite(tb, size, seed); ret != 0 {
		tb.Fatalf("bpf_ringbuf_output of %d bytes: %d", size, ret)
	}
}

// discard reserves a 16-byte record from seed and discards it.
func (w *ringWriter) discard(tb testing.TB, seed uint64) {
	tb.Helper()
	if ret := ringRun(tb, w.reserve, seed, 1); ret != 0 {
		tb.Fatalf("reserve and discard: %d", ret)
	}
}

// submit reserves a 16-byte record from seed and submits it.
func (w *ringWriter) submit(tb testing.TB, seed uint64) {
	tb.Helper()
	if ret := ringRun(tb, w.reserve, seed, 0); ret != 0 {
		tb.Fatalf("reserve and submit: %d", ret)
	}
}

// submitEvery submits records 16-byte records, seeds 0, 1, …, one every
// gap, from another goroutine; the channel closes when it is done.
func (w *ringWriter) submitEvery(tb testing.TB, records int, gap time.Duration) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range records {
			w.submit(tb, uint64(i))
			time.Sleep(gap)
		}
	}()
	return done
}

// ringRecord is the content the programs write: size bytes of the
// little-endian u64s seed, seed+1, ….
func ringRecord(size int, seed uint64) []byte {
	b := make([]byte, 0, size+8)
	for len(b) < size {
		b = binary.LittleEndian.AppendUint64(b, seed)
		seed++
	}
	return b[:size]
}

// ringSpace is what a record of n data bytes takes in the buffer.
func ringSpace(n int) int { return ringHeaderSize + (n+7)&^7 }

func openRing(tb testing.TB, m *ebpf.Map) *ring {
	tb.Helper()
	r, err := newRing(m)
	if err != nil {
		tb.Fatalf("new ring: %v", err)
	}
	tb.Cleanup(func() { r.Close() })
	return r
}

// ringPast is a deadline that has passed: Next returns what is there or
// os.ErrDeadlineExceeded, never waits.
var ringPast = time.Unix(1, 0)

// ringWant reads one record that must be there already and be want.
func ringWant(tb testing.TB, r *ring, want []byte) {
	tb.Helper()
	got, err := r.Next(ringPast)
	if err != nil {
		tb.Fatalf("next: %v, want record %x", err, want)
	}
	if !bytes.Equal(got, want) {
		tb.Fatalf("next: record\n%x, want\n%x", got, want)
	}
	if cap(got) != len(got) {
		tb.Fatalf("next: a record of %d bytes with capacity %d: appending would reach into the buffer", len(got), cap(got))
	}
}

// ringEmpty checks that the ring has nothing more to return.
func ringEmpty(tb testing.TB, r *ring) {
	tb.Helper()
	if got, err := r.Next(ringPast); !errors.Is(err, os.ErrDeadlineExceeded) {
		tb.Fatalf("next on a drained ring: %x, %v; want os.ErrDeadlineExceeded", got, err)
	}
}

func TestRingReturnsRecordsInOrderWithTheirBytes(t *testing.T) {
	page := os.Getpagesize()
	sizes := func(n int, pattern ...int) []int {
		var out []int
		for i := 0; len(out) < n; i++ {
			out = append(out, pattern[i%len(pattern)])
		}
		return out
	}
	tests := []struct {
		name string
		size int   // of the buffer
		recs []int // record sizes, written in this order
		// batch records are written before they are read and committed.
		batch int
		// wraps: some records must straddle the end of the buffer.
		wraps bool
	}{
		{"every size from 0 to 64 bytes", page, sizes(65, ringSeq(0, 65)...), 8, false},
		{"records of 255 and 256 bytes fill a page", page, sizes(15, 255, 256), 15, false},
		{"records that wrap around the end of a one-page buffer", page, sizes(3*page/80, 200, 56, 255, 8, 0, 129, 33), 5, true},
		{"batches as large as the buffer holds, many times over", page, sizes(3*page/100, 100), page/ringSpace(100) - 1, true},
		{"a large buffer read in large batches", 64 * page, sizes(2*64*page/100, 1, 100, 256, 17), 500, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newRingWriter(t, tt.size)
			r := openRing(t, w.m)
			wrapped := 0
			for i := 0; i < len(tt.recs); i += tt.batch {
				batch := tt.recs[i:min(i+tt.batch, len(tt.recs))]
				for j, n := range batch {
					w.write(t, n, uint64(i+j)<<16)
				}
				for j, n := range batch {
					off := int(r.read & r.mask)
					ringWant(t, r, ringRecord(n, uint64(i+j)<<16))
					if off+ringHeaderSize+n > tt.size {
						wrapped++
					}
				}
				ringEmpty(t, r)
				r.Commit()
			}
			t.Logf("%d records, %d wrapped around the end of the buffer", len(tt.recs), wrapped)
			if tt.wraps && wrapped == 0 {
				t.Error("no record wrapped around the end of the buffer")
			}
		})
	}
}

// ringSeq returns from, from+1, …, to-1.
func ringSeq(from, to int) []int {
	var out []int
	for i := from; i < to; i++ {
		out = append(out, i)
	}
	return out
}

func TestRingKeepsUncommittedRecordsForTheNextReader(t *testing.T) {
	tests := []struct {
		name string
		// commitAfter: the first reader commits after reading this many of
		// the three records, then stops (a crash: no more commits).
		commitAfter int
	}{
		{"nothing committed: the next reader reads all three again", 0},
		{"one committed: the next reader reads the other two", 1},
		{"all committed: the next reader reads only later records", 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newRingWriter(t, os.Getpagesize())
			for i := range 3 {
				w.write(t, 24, uint64(i))
			}
			first := openRing(t, w.m)
			for i := range 3 {
				ringWant(t, first, ringRecord(24, uint64(i)))
				if i+1 == tt.commitAfter {
					first.Commit()
				}
			}
			if err := first.Close(); err != nil {
				t.Fatal(err)
			}
			w.write(t, 24, 3)

			second := openRing(t, w.m)
			for i := tt.commitAfter; i < 4; i++ {
				ringWant(t, second, ringRecord(24, uint64(i)))
			}
			ringEmpty(t, second)
		})
	}
}

func TestRingProducerCannotOverwriteUncommittedRecords(t *testing.T) {
	page := os.Getpagesize()
	w := newRingWriter(t, page)
	r := openRing(t, w.m)
	// Fill the buffer: the kernel refuses a record once it would need the
	// space of the consumer position or beyond.
	n := 0
	for ; w.tryWrite(t, 8, uint64(n)) == 0; n++ {
		if n > page {
			t.Fatal("the kernel took more records than fit in the buffer")
		}
	}
	t.Logf("a %d-byte buffer took %d records of %d bytes", page, n, ringSpace(8))
	if n == 0 || n*ringSpace(8) > page {
		t.Fatalf("the buffer took %d records", n)
	}
	for i := range n {
		ringWant(t, r, ringRecord(8, uint64(i)))
	}
	ringEmpty(t, r)
	// Read is not consumed: still no room.
	if ret := w.tryWrite(t, 8, 1000); ret != -int32(syscall.EAGAIN) {
		t.Fatalf("write to a buffer read but not committed: %d, want -EAGAIN", ret)
	}
	// And nothing was overwritten: a new reader gets every record intact.
	again := openRing(t, w.m)
	for i := range n {
		ringWant(t, again, ringRecord(8, uint64(i)))
	}
	again.Close()
	r.Commit()
	w.write(t, 8, 1000)
	ringWant(t, r, ringRecord(8, 1000))
}

func TestRingSkipsDiscardedRecords(t *testing.T) {
	// ops: 'w' submits a record, 'd' discards one; the seed is the index.
	tests := []struct{ name, ops string }{
		{"discarded between two records", "wdw"},
		{"discarded first", "dw"},
		{"discarded last", "wd"},
		{"only discarded", "ddd"},
		{"runs of discarded records", "wddwdddw"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newRingWriter(t, os.Getpagesize())
			r := openRing(t, w.m)
			for i, op := range tt.ops {
				if op == 'd' {
					w.discard(t, uint64(i))
				} else {
					w.submit(t, uint64(i))
				}
			}
			for i, op := range tt.ops {
				if op == 'w' {
					ringWant(t, r, ringRecord(16, uint64(i)))
				}
			}
			ringEmpty(t, r)
			if got, want := r.Uncommitted(), len(tt.ops)*ringSpace(16); got != want {
				t.Errorf("uncommitted %d bytes, want %d (discarded records count)", got, want)
			}
		})
	}
}

func TestRingNextWaits(t *testing.T) {
	const (
		delay = 20 * time.Millisecond          // before the other goroutine acts
		slack = 500 * time.Millisecond         // longest acceptable reaction
		long  = 2*slack + 500*time.Millisecond // deadline of waits that must end early
	)
	tests := []struct {
		name string
		// uncommitted: one record is read and not committed before the wait.
		uncommitted bool
		deadline    time.Duration // from now; 0: none
		// act runs in another goroutine delay after Next started.
		act     func(w *ringWriter, r *ring) error
		wantErr error // nil: the record act wrote
		// minWait: Next must not return before.
		minWait time.Duration
	}{
		{name: "a past deadline on an empty ring times out", deadline: -time.Second, wantErr: os.ErrDeadlineExceeded},
		{name: "a short deadline on an empty ring times out", deadline: 30 * time.Millisecond, wantErr: os.ErrDeadlineExceeded, minWait: 30 * time.Millisecond},
		{name: "a short deadline with uncommitted records times out", uncommitted: true, deadline: 30 * time.Millisecond, wantErr: os.ErrDeadlineExceeded, minWait: 30 * time.Millisecond},
		{
			name: "the kernel wakes it for a record written by another goroutine", deadline: long,
			act: writeFromAnotherGoroutine,
		},
		{
			name: "it finds a record written while records are uncommitted", uncommitted: true, deadline: long,
			act: writeFromAnotherGoroutine,
		},
		{
			name: "Close from another goroutine ends it", wantErr: ErrClosed,
			act: func(w *ringWriter, r *ring) error { return r.Close() },
		},
		{
			name: "Close from another goroutine ends it while records are uncommitted", uncommitted: true, wantErr: ErrClosed,
			act: func(w *ringWriter, r *ring) error { return r.Close() },
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newRingWriter(t, os.Getpagesize())
			r := openRing(t, w.m)
			if tt.uncommitted {
				w.write(t, 8, 1)
				ringWant(t, r, ringRecord(8, 1))
			}
			// Waits are measured from the time the deadline is counted
			// from: Next may return as soon as the deadline has passed.
			start := time.Now()
			var deadline time.Time
			if tt.deadline != 0 {
				deadline = start.Add(tt.deadline)
			}
			var wg sync.WaitGroup
			var acted time.Time
			if tt.act != nil {
				wg.Add(1)
				go func() {
					defer wg.Done()
					time.Sleep(delay)
					acted = time.Now()
					if err := tt.act(w, r); err != nil {
						t.Errorf("other goroutine: %v", err)
					}
				}()
			}
			got, err := r.Next(deadline)
			end := time.Now()
			wg.Wait()
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("next: %x, %v; want %v", got, err, tt.wantErr)
				}
			} else {
				if err != nil {
					t.Fatalf("next: %v", err)
				}
				if want := ringRecord(8, 42); !bytes.Equal(got, want) {
					t.Fatalf("next: %x, want %x", got, want)
				}
			}
			if waited := end.Sub(start); waited < tt.minWait {
				t.Errorf("next returned after %v, before %v", waited, tt.minWait)
			}
			if !acted.IsZero() {
				reaction := end.Sub(acted)
				t.Logf("next returned %v after the other goroutine acted", reaction)
				if reaction > slack {
					t.Errorf("next returned %v after the other goroutine acted, want within %v", reaction, slack)
				}
			} else if tt.deadline > 0 && end.Sub(start) > tt.deadline+slack {
				t.Errorf("next returned %v after a %v deadline", end.Sub(start), tt.deadline)
			}
		})
	}
}

func TestRingWaitsForABusyRecord(t *testing.T) {
	tests := []struct {
		name string
		// end ends the wait, from another goroutine: submits the held
		// record or closes the ring.
		end     func(h *heldRecord, r *ring) error
		wantErr error // nil: the held record, then the one after it
	}{
		{"records after it are returned once it is submitted, in order", func(h *heldRecord, _ *ring) error { return h.submit() }, nil},
		{"Close ends the wait", func(_ *heldRecord, r *ring) error { return r.Close() }, ErrClosed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newRingWriter(t, os.Getpagesize())
			r := openRing(t, w.m)
			w.write(t, 8, 1)
			h := holdRecord(t, w)
			w.write(t, 8, 3)

			ringWant(t, r, ringRecord(8, 1))
			if !r.Buffered() {
				t.Error("a busy header is not reported as buffered")
			}
			const wait = 30 * time.Millisecond
			start := time.Now()
			if got, err := r.Next(start.Add(wait)); !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("next with a busy header first: %x, %v; want os.ErrDeadlineExceeded", got, err)
			}
			if waited := time.Since(start); waited < wait {
				t.Errorf("next gave up on the busy header after %v, before its %v deadline", waited, wait)
			}
			if got, want := r.Uncommitted(), ringSpace(8); got != want {
				t.Errorf("uncommitted %d, want %d: only the record before the busy one", got, want)
			}

			errc := make(chan error, 1)
			go func() {
				time.Sleep(20 * time.Millisecond)
				errc <- tt.end(h, r)
			}()
			// A bound, not a measure: the other goroutine ends the wait
			// after 20 ms; an emulated guest stalled past a fixed 2 s
			// once (CI, 5.10) and took the deadline for a lost Close.
			got, err := r.Next(time.Now().Add(testenv.Bound(2 * time.Second)))
			if err := <-errc; err != nil {
				t.Fatal(err)
			}
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("next: %x, %v; want %v", got, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("next after the busy record was submitted: %v", err)
			}
			if !bytes.Equal(got, h.content) {
				t.Fatalf("next: %x, want the held record %x", got, h.content)
			}
			ringWant(t, r, ringRecord(8, 3))
			ringEmpty(t, r)
		})
	}
}

// heldRecord is a record reserved and not yet submitted: its header in the
// ring buffer stays busy until submit.
type heldRecord struct {
	content []byte // what the record holds once submitted
	submit  func() error
}

// The held-record program's control value, an array map element of u64s:
// user space sets release, the program reports what it did.
const (
	holdRelease  = 0 // set by user space: submit the record now
	holdReserved = 1 // set by the program once its reservation is made
	holdCtlWords = 2
)

// Bounds of the held-record program's wait: it checks the release word,
// then burns time in holdBurns calls of bpf_probe_read_kernel (which, on
// an address in user space, zeroes its holdBurn-byte destination: a memset
// the program cannot be denied), until holdMax has passed or holdSpins
// spins are done, whichever comes first. A spin takes about 0.15 ms on a
// 2-core host, so either cap is seconds away, far beyond what the tests
// hold a record for even on a loaded machine; the caps only end a test
// that did not release its record (its process cannot exit while the
// program runs). The verifier walks every iteration of the loop (about 20
// instructions each), which takes seconds in an emulated guest: few spins
// of much work each keep that short.
const (
	holdBurn  = 4 << 20 // the most an array map value may hold (KMALLOC_MAX_SIZE)
	holdBurns = 2
	holdSpins = 20000
	holdMax   = 10 * time.Second
	holdSize  = 64 // bytes the held record holds
	holdSeed  = 2  // its content: ringRecord(holdSize, holdSeed)
)

// Return values of the held-record program.
const (
	holdSubmitted = 0
	holdGaveUp    = 2
)

// holdRecord reserves a record and keeps it busy until submit. A raw
// tracepoint program run through BPF_PROG_TEST_RUN on another goroutine
// reserves holdSize bytes, tells user space, then waits for the release
// word in a bounded loop, its reservation open; on release it fills the
// record and submits it. Programs of that kind run on every kernel of the
// matrix (5.10 too, which has no sleepable programs that could hold a
// reservation by sleeping). The program keeps its CPU busy while it
// waits: the test's other goroutines run on the other one. The test's
// cleanup releases the record should the test stop early.
func holdRecord(t *testing.T, w *ringWriter) *heldRecord {
	t.Helper()
	newArray := func(name string, valueSize uint32) *ebpf.Map {
		m, err := ebpf.NewMap(&ebpf.MapSpec{Name: name, Type: ebpf.Array, KeySize: 4, ValueSize: valueSize, MaxEntries: 1})
		if err != nil {
			t.Fatalf("create %s map: %v", name, err)
		}
		t.Cleanup(func() { m.Close() })
		return m
	}
	ctl, burn := newArray("hold_ctl", 8*holdCtlWords), newArray("hold_burn", holdBurn)

	// Every conditional jump goes on with the loop and falls through to
	// its way out: the verifier finishes the fall-through before it takes
	// the jump, so its stack of pending branches stays short. The counter
	// (R9) and the start time (R6) are dead on the ways out, so the
	// verifier walks each of them once, not once per iteration.
	insns := asm.Instructions{
		asm.LoadMapValue(asm.R8, ctl.FD(), 0),
		asm.LoadMapPtr(asm.R1, w.m.FD()),
		asm.Mov.Imm(asm.R2, holdSize),
		asm.Mov.Imm(asm.R3, 0),
		asm.FnRingbufReserve.Call(),
		asm.JNE.Imm(asm.R0, 0, "reserved"),
		asm.Mov.Imm(asm.R0, -int32(syscall.EAGAIN)),
		asm.Return(),
		asm.Mov.Reg(asm.R7, asm.R0).WithSymbol("reserved"),
		asm.Mov.Imm(asm.R1, 1),
		asm.StoreMem(asm.R8, 8*holdReserved, asm.R1, asm.DWord),
		asm.FnKtimeGetNs.Call(),
		asm.Mov.Reg(asm.R6, asm.R0),
		asm.Mov.Imm(asm.R9, 0),
		asm.LoadMem(asm.R1, asm.R8, 8*holdRelease, asm.DWord).WithSymbol("loop"),
		asm.JEq.Imm(asm.R1, 0, "spin"),
		asm.Ja.Label("release"),
	}
	for i := range holdBurns {
		insns = append(insns,
			asm.LoadMapValue(asm.R1, burn.FD(), 0),
			asm.Mov.Imm(asm.R2, holdBurn),
			asm.Mov.Imm(asm.R3, 4096), // an address in user space: refused, the destination zeroed
			asm.FnProbeReadKernel.Call(),
		)
		if i == 0 {
			insns[len(insns)-4] = insns[len(insns)-4].WithSymbol("spin")
		}
	}
	insns = append(insns,
		asm.FnKtimeGetNs.Call(),
		asm.Sub.Reg(asm.R0, asm.R6),
		asm.LoadImm(asm.R1, int64(holdMax), asm.DWord),
		asm.JLE.Reg(asm.R0, asm.R1, "more"),
		asm.Ja.Label("giveup"),
		asm.Add.Imm(asm.R9, 1).WithSymbol("more"),
		asm.JLT.Imm(asm.R9, holdSpins, "loop"),
		// Nobody released the record: throw it away.
		asm.Mov.Reg(asm.R1, asm.R7).WithSymbol("giveup"),
		asm.Mov.Imm(asm.R2, 0),
		asm.FnRingbufDiscard.Call(),
		asm.Mov.Imm(asm.R0, holdGaveUp),
		asm.Return(),
	)
	fill := asm.Instructions{}
	for i := range holdSize / 8 {
		fill = append(fill,
			asm.LoadImm(asm.R1, int64(holdSeed+i), asm.DWord),
			asm.StoreMem(asm.R7, int16(8*i), asm.R1, asm.DWord),
		)
	}
	fill[0] = fill[0].WithSymbol("release")
	fill = append(fill,
		asm.Mov.Reg(asm.R1, asm.R7),
		asm.Mov.Imm(asm.R2, 0),
		asm.FnRingbufSubmit.Call(),
		asm.Mov.Imm(asm.R0, holdSubmitted),
		asm.Return(),
	)
	insns = append(insns, fill...)
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name: "ring_held", Type: ebpf.RawTracepoint, License: "GPL", Instructions: insns,
	})
	if err != nil {
		t.Fatalf("load the held-record program: %v", err)
	}
	t.Cleanup(func() { prog.Close() })

	ran := make(chan error, 1)
	go func() {
		ret, err := prog.Run(&ebpf.RunOptions{})
		switch {
		case err != nil:
		case ret == holdGaveUp:
			err = fmt.Errorf("the held record was discarded after %v or %d spins: nobody released it", holdMax, holdSpins)
		case ret != holdSubmitted:
			err = fmt.Errorf("held record program: %d", int32(ret))
		}
		ran <- err
	}()
	setWord := func(word int, v uint64) error {
		var val [holdCtlWords]uint64
		if err := ctl.Lookup(uint32(0), &val); err != nil {
			return fmt.Errorf("read hold_ctl: %w", err)
		}
		val[word] = v
		return ctl.Update(uint32(0), &val, ebpf.UpdateExist)
	}
	var once sync.Once
	release := func() error {
		var err error
		once.Do(func() {
			if err = setWord(holdRelease, 1); err == nil {
				err = <-ran
			}
		})
		return err
	}
	t.Cleanup(func() {
		if err := release(); err != nil {
			t.Error(err)
		}
	})
	// Wait for the reservation: from then on the header is busy.
	deadline := time.Now().Add(testenv.Bound(5 * time.Second))
	for {
		var val [holdCtlWords]uint64
		if err := ctl.Lookup(uint32(0), &val); err != nil {
			t.Fatalf("read hold_ctl: %v", err)
		}
		if val[holdReserved] != 0 {
			break
		}
		select {
		case err := <-ran:
			t.Fatalf("the held-record program returned before it reserved: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the held-record program did not reserve its record")
		}
		runtime.Gosched()
	}
	return &heldRecord{content: ringRecord(holdSize, holdSeed), submit: release}
}

// writeFromAnotherGoroutine writes the 8-byte record of seed 42; it is
// safe to call off the test's goroutine.
func writeFromAnotherGoroutine(w *ringWriter, _ *ring) error {
	ret, err := w.output.Run(&ebpf.RunOptions{Context: []uint64{8, 42}})
	if err == nil && ret != 0 {
		err = fmt.Errorf("bpf_ringbuf_output: %d", int32(ret))
	}
	return err
}

func TestRingCloseTwice(t *testing.T) {
	w := newRingWriter(t, os.Getpagesize())
	r := openRing(t, w.m)
	w.write(t, 8, 1)
	ringWant(t, r, ringRecord(8, 1))
	for i := range 2 {
		if err := r.Close(); err != nil {
			t.Fatalf("close %d: %v", i+1, err)
		}
	}
	if _, err := r.Next(time.Time{}); !errors.Is(err, ErrClosed) {
		t.Errorf("next after close: %v, want ErrClosed", err)
	}
	if r.Buffered() {
		t.Error("buffered after close")
	}
	r.Commit() // must not touch the unmapped page
	// The record was not committed: it is still in the map.
	ringWant(t, openRing(t, w.m), ringRecord(8, 1))
}

func TestRingReportsBufferedAndUncommitted(t *testing.T) {
	w := newRingWriter(t, os.Getpagesize())
	r := openRing(t, w.m)
	check := func(step string, buffered bool, uncommitted int) {
		t.Helper()
		if got := r.Buffered(); got != buffered {
			t.Errorf("%s: buffered %v, want %v", step, got, buffered)
		}
		if got := r.Uncommitted(); got != uncommitted {
			t.Errorf("%s: uncommitted %d, want %d", step, got, uncommitted)
		}
	}
	check("empty", false, 0)
	w.write(t, 5, 1)
	w.write(t, 16, 2)
	check("two written", true, 0)
	ringWant(t, r, ringRecord(5, 1))
	check("one read", true, ringSpace(5))
	ringWant(t, r, ringRecord(16, 2))
	check("both read", false, ringSpace(5)+ringSpace(16))
	r.Commit()
	check("committed", false, 0)
	w.discard(t, 3)
	check("a discarded record written", true, 0)
	ringEmpty(t, r)
	check("the discarded record skipped", false, ringSpace(16))
	r.Commit()
	check("committed again", false, 0)
}

func TestRingConcurrentProducersLoseNothing(t *testing.T) {
	const (
		producers = 3
		each      = 2000
	)
	w := newRingWriter(t, os.Getpagesize())
	r := openRing(t, w.m)
	var wg sync.WaitGroup
	for p := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; {
				// Record sizes vary so the records wrap at varying offsets.
				ret, err := w.output.Run(&ebpf.RunOptions{Context: []uint64{uint64(8 + 8*(i%5)), uint64(p)<<32 | uint64(i)}})
				switch {
				case err != nil:
					t.Errorf("producer %d: %v", p, err)
					return
				case ret == 0:
					i++
				case int32(ret) == -int32(syscall.EAGAIN): // full: let the reader catch up
					runtime.Gosched()
				default:
					t.Errorf("producer %d: bpf_ringbuf_output: %d", p, int32(ret))
					return
				}
			}
		}()
	}
	nextSeq := make([]int, producers)
	deadline := time.Now().Add(10 * time.Second)
	for n := 0; n < producers*each; n++ {
		rec, err := r.Next(deadline)
		if err != nil {
			t.Fatalf("after %d records: %v (per producer: %v)", n, err, nextSeq)
		}
		v := binary.LittleEndian.Uint64(rec)
		p, i := int(v>>32), int(uint32(v))
		if p >= producers || i != nextSeq[p] || len(rec) != 8+8*(i%5) {
			t.Fatalf("record %d: producer %d seq %d of %d bytes, want seq %d", n, p, i, len(rec), nextSeq[p])
		}
		if !bytes.Equal(rec, ringRecord(len(rec), v)) {
			t.Fatalf("record %d: %x, want %x", n, rec, ringRecord(len(rec), v))
		}
		nextSeq[p]++
		if n%3 == 0 {
			r.Commit()
		}
	}
	wg.Wait()
	ringEmpty(t, r)
}

// BenchmarkRingNext reads and commits 8-byte records, one at a time, with
// this package's ring and with cilium/ebpf's ringbuf.Reader (which copies
// each record and advances the consumer position as it reads). The
// records are written while the timer is stopped. Compare with
//
//	go test -run '^$' -bench RingNext -count 10 ./sensor/ | benchstat -col /reader -
func BenchmarkRingNext(b *testing.B) {
	const size = 1 << 20
	fill := func(b *testing.B, w *ringWriter, n int) {
		for n > 0 {
			k := min(n, ringBurst)
			if got := ringRun(b, w.burst, uint64(k), 0); int(got) != k {
				b.Fatalf("burst wrote %d of %d records", got, k)
			}
			n -= k
		}
	}
	// The buffer holds size/16 - 1 records of 8 bytes; fill it at most
	// half each time.
	batch := size / ringSpace(8) / 2
	b.Run("reader=ring", func(b *testing.B) {
		w := newRingWriter(b, size)
		r := openRing(b, w.m)
		b.SetBytes(8)
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; {
			b.StopTimer()
			n := min(batch, b.N-i)
			fill(b, w, n)
			b.StartTimer()
			for range n {
				if _, err := r.Next(time.Time{}); err != nil {
					b.Fatal(err)
				}
				r.Commit()
			}
			i += n
		}
	})
	b.Run("reader=cilium", func(b *testing.B) {
		w := newRingWriter(b, size)
		rd, err := ringbuf.NewReader(w.m)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { rd.Close() })
		var rec ringbuf.Record
		b.SetBytes(8)
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; {
			b.StopTimer()
			n := min(batch, b.N-i)
			fill(b, w, n)
			b.StartTimer()
			for range n {
				if err := rd.ReadInto(&rec); err != nil {
					b.Fatal(err)
				}
			}
			i += n
		}
	})
}

// TestRingCoalescesWakeups proves what ringCoalesce is for: a reader that
// reads each record at once and commits it is woken by the kernel for
// every record (an interrupt the writer pays), one that lets records
// gather for ringCoalesce after a wakeup is woken at most once per
// ringCoalesce. The writer writes one record every 200 µs or so.
func TestRingCoalescesWakeups(t *testing.T) {
	const records = 500
	run := func(coalesce time.Duration) (wakeups uint64, took time.Duration) {
		w := newRingWriter(t, 1<<16)
		r := openRing(t, w.m)
		r.coalesce = coalesce
		done := w.submitEvery(t, records, 200*time.Microsecond)
		start := time.Now()
		for n := 0; n < records; n++ {
			if _, err := r.Next(time.Now().Add(testenv.Bound(5 * time.Second))); err != nil {
				t.Fatalf("coalesce %v: record %d: %v", coalesce, n, err)
			}
			r.Commit()
		}
		<-done
		return r.wakeups, time.Since(start)
	}
	prompt, _ := run(0)
	coalesced, took := run(ringCoalesce)
	t.Logf("%d records: %d wakeups read at once, %d with %v coalescing over %v", records, prompt, coalesced, ringCoalesce, took)
	if prompt < records/2 {
		t.Errorf("a prompt reader was woken %d times for %d records: the kernel should wake it for most", prompt, records)
	}
	if most := uint64(took/ringCoalesce) + 2; coalesced > most {
		t.Errorf("a coalescing reader was woken %d times in %v, want at most %d (one per %v)", coalesced, took, most, ringCoalesce)
	}
}

// TestRingHoldsTheLastRecordBackWhileBusy proves what holdBack is for and
// that it keeps nothing longer than it should: while records keep coming,
// every Commit leaves the kernel's consumer position at the start of the
// last record read, so the kernel (which wakes the reader only for a
// record submitted at the consumer position) raises no interrupt for the
// records that follow; once a whole coalesce passes with nothing new,
// Next releases the record and waits for the kernel again.
func TestRingHoldsTheLastRecordBackWhileBusy(t *testing.T) {
	const records = 1000
	run := func(holdBack bool) (wakeups uint64) {
		w := newRingWriter(t, 1<<16)
		r := openRing(t, w.m)
		r.coalesce, r.holdBack = ringCoalesce, holdBack
		done := w.submitEvery(t, records, 200*time.Microsecond)
		for n := range records {
			got, err := r.Next(time.Now().Add(testenv.Bound(5 * time.Second)))
			if err != nil {
				t.Fatalf("holdBack %v: record %d: %v", holdBack, n, err)
			}
			if want := ringRecord(16, uint64(n)); !bytes.Equal(got, want) {
				t.Fatalf("holdBack %v: record %x, want %x", holdBack, got, want)
			}
			r.Commit()
			cons := atomic.LoadUintptr(r.consPos)
			if want := map[bool]uintptr{true: r.last, false: r.read}[holdBack]; cons != want {
				t.Fatalf("holdBack %v: record %d committed: consumer position %d, want %d (last record at %d, read %d)", holdBack, n, cons, want, r.last, r.read)
			}
		}
		<-done
		if holdBack {
			// Quiet now: the next Next releases the record, then waits.
			if _, err := r.Next(time.Now().Add(20 * time.Millisecond)); !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("Next on a quiet ring: %v, want os.ErrDeadlineExceeded", err)
			}
			if cons := atomic.LoadUintptr(r.consPos); cons != r.read {
				t.Fatalf("quiet for %v: consumer position %d, want the read position %d: the last record is still held", ringCoalesce, cons, r.read)
			}
			// A Commit with nothing new read never moves it back.
			r.Commit()
			if cons := atomic.LoadUintptr(r.consPos); cons != r.read {
				t.Fatalf("a second Commit moved the consumer position from %d to %d", r.read, cons)
			}
		}
		return r.wakeups
	}
	coalesced, held := run(false), run(true)
	t.Logf("%d records one every 200 µs: %d wakeups coalescing, %d holding the last record back", records, coalesced, held)
	if held > coalesced {
		t.Errorf("a reader holding back was woken %d times, more than a coalescing one (%d)", held, coalesced)
	}
}

// TestRingReleasesTheHeldRecordAtCloseAndOnlyACrashReadsItAgain: Close
// commits the record the ring held back, so the next reader starts after
// it; a reader that died without Close leaves exactly that one record to
// be read again (a duplicate, which the graph applies once).
func TestRingReleasesTheHeldRecordAtCloseAndOnlyACrashReadsItAgain(t *testing.T) {
	for _, closed := range []bool{true, false} {
		t.Run(map[bool]string{true: "closed", false: "crashed"}[closed], func(t *testing.T) {
			w := newRingWriter(t, os.Getpagesize())
			for i := range 3 {
				w.write(t, 24, uint64(i))
			}
			first, err := newRing(w.m)
			if err != nil {
				t.Fatal(err)
			}
			first.coalesce, first.holdBack = ringCoalesce, true
			for i := range 3 {
				ringWant(t, first, ringRecord(24, uint64(i)))
			}
			first.Commit()
			if closed {
				if err := first.Close(); err != nil {
					t.Fatal(err)
				}
			} else {
				t.Cleanup(func() { first.Close() })
			}
			second := openRing(t, w.m)
			if !closed {
				ringWant(t, second, ringRecord(24, 2))
			}
			ringEmpty(t, second)
		})
	}
}

// The sensor's own ring lets records gather longer only while they come
// at ringStormRate a second or faster, judged over each coalesce, and
// not at all once hurried (a barrier).
func TestRingGathersLongerOnlyUnderAStorm(t *testing.T) {
	r := &ring{coalesce: ringCoalesce, storm: ringStormCoalesce, hurryfd: -1}
	now := time.Now()
	if d := r.gather(now); d != ringCoalesce {
		t.Fatalf("first wait %v, want %v", d, ringCoalesce)
	}
	// The clock is the test's: a guest that stalls between two lines
	// (CI's 6.1 guest once took the +1 case for a calm one) judges the
	// same records over the same time.
	el := 2 * ringCoalesce
	for _, c := range []struct {
		records int
		want    time.Duration
	}{
		{int(ringStormRate*el.Seconds()) + 1, ringStormCoalesce},
		{int(ringStormRate*el.Seconds()) - 1, ringCoalesce},
		{0, ringCoalesce},
		{10 * int(ringStormRate*el.Seconds()), ringStormCoalesce},
	} {
		r.paceFrom, r.paceRecords = now, c.records
		now = now.Add(el)
		if d := r.gather(now); d != c.want {
			t.Errorf("%d records in %v: wait %v, want %v", c.records, el, d, c.want)
		}
		if r.paceRecords != 0 || !r.paceFrom.Equal(now) {
			t.Errorf("%d records in %v: the count was not started again", c.records, el)
		}
	}
	// Within one coalesce the pace holds: too short a time to judge.
	r.paceFrom, r.paceRecords = now, 0
	if d := r.gather(now.Add(ringCoalesce / 2)); d != ringStormCoalesce {
		t.Errorf("judged within one coalesce: wait %v, want the storm's %v kept", d, ringStormCoalesce)
	}
	r.hurried.Store(true)
	if d := r.gather(now); d != 0 {
		t.Errorf("hurried: wait %v, want none", d)
	}
	if d := r.gather(now); d == 0 {
		t.Errorf("a hurry ended more than one wait")
	}
}

// hurry ends a wait for records to gather at once: a barrier's caller
// does not wait out the coalescing.
func TestRingHurryEndsTheGatheringAtOnce(t *testing.T) {
	w := newRingWriter(t, 1<<16)
	r := openRing(t, w.m)
	const long = 5 * time.Second
	r.coalesce, r.holdBack = long, true
	w.submit(t, 1)
	go func() {
		time.Sleep(50 * time.Millisecond)
		r.hurry()
	}()
	start := time.Now()
	if _, err := r.Next(time.Now().Add(2 * long)); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took >= long {
		t.Errorf("Next took %v: the hurry did not end the %v wait", took, long)
	}
}
