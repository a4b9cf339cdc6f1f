package sensor

import (
	"errors"
	"testing"
	"time"

	"github.com/mcptrace/mcptrace/lineage"
)

// The Windows sensor's queue, on every system.

func qEvent(kind lineage.EventKind, pid uint32) lineage.Event {
	return lineage.Event{Kind: kind, Proc: lineage.ID{PID: pid, Start: uint64(pid) * 1000}}
}

func qStart(pid uint32) []lineage.Event {
	return []lineage.Event{qEvent(lineage.KindFork, pid), qEvent(lineage.KindExec, pid)}
}

func qPIDs(evs []lineage.Event) []uint32 {
	var out []uint32
	for _, e := range evs {
		out = append(out, e.Proc.PID)
	}
	return out
}

// popWithin pops in the background and fails the test if nothing comes.
func popWithin(t *testing.T, q *eventQueue, limit int, d time.Duration) (Batch, error) {
	t.Helper()
	type res struct {
		b   Batch
		err error
	}
	ch := make(chan res, 1)
	go func() { b, err := q.pop(limit); ch <- res{b, err} }()
	select {
	case r := <-ch:
		return r.b, r.err
	case <-time.After(d):
		t.Fatalf("pop returned nothing within %v", d)
		return Batch{}, nil
	}
}

// Events come out in order, at most the limit at a time; a barrier comes
// with the batch that returns the last event before it, never earlier.
func TestQueueReturnsEventsInOrderAndABarrierOnlyAfterThem(t *testing.T) {
	q := newEventQueue(100)
	q.handle(func() []lineage.Event { return qStart(1) })
	q.handle(func() []lineage.Event { return []lineage.Event{qEvent(lineage.KindExit, 2)} })
	q.barrier(7)
	q.handle(func() []lineage.Event { return qStart(3) })

	b, err := q.pop(2)
	if err != nil || len(b.Events) != 2 || b.Barrier != 0 || b.Events[0].Kind != lineage.KindFork || b.Events[1].Kind != lineage.KindExec {
		t.Fatalf("first batch %+v, %v: want the fork and exec of 1, no barrier", b, err)
	}
	b, err = q.pop(2)
	if err != nil || len(b.Events) != 2 || b.Barrier != 7 || qPIDs(b.Events)[0] != 2 || qPIDs(b.Events)[1] != 3 {
		t.Fatalf("second batch %+v, %v: want the exit of 2, barrier 7, the fork of 3", b, err)
	}
	b, err = q.pop(2)
	if err != nil || len(b.Events) != 1 || b.Barrier != 0 || b.Events[0].Kind != lineage.KindExec {
		t.Fatalf("third batch %+v, %v: want the exec of 3", b, err)
	}
	if _, _, read := q.counts(); read != 5 {
		t.Errorf("read %d events, want 5", read)
	}
}

// A start that does not fit is dropped whole and counted per kind; the
// producer never waits, and room made by a read is used again.
func TestQueueDropsWhatDoesNotFitAndCountsItPerKind(t *testing.T) {
	q := newEventQueue(3)
	q.handle(func() []lineage.Event { return qStart(1) })
	q.handle(func() []lineage.Event { return qStart(2) }) // 4 > 3: dropped whole
	q.handle(func() []lineage.Event { return []lineage.Event{qEvent(lineage.KindExit, 1)} })
	q.handle(func() []lineage.Event { return []lineage.Event{qEvent(lineage.KindExit, 3)} }) // full
	dropped, _, _ := q.counts()
	if dropped[lineage.KindFork] != 1 || dropped[lineage.KindExec] != 1 || dropped[lineage.KindExit] != 1 {
		t.Errorf("dropped %v, want one fork, one exec, one exit", dropped)
	}
	b, err := q.pop(10)
	if err != nil || len(b.Events) != 3 || b.Events[2].Kind != lineage.KindExit || b.Events[2].Proc.PID != 1 {
		t.Fatalf("batch %+v, %v: want 1's fork, exec and exit", b, err)
	}
	q.handle(func() []lineage.Event { return qStart(4) })
	if b, err := q.pop(10); err != nil || len(b.Events) != 2 {
		t.Fatalf("after a read the queue has room again: %+v, %v", b, err)
	}
	if dropped, _, _ := q.counts(); dropped[lineage.KindFork] != 1 {
		t.Errorf("dropped %v after room was made", dropped)
	}
}

// A barrier asked while a producer has an event in hand (reading the
// started process) is placed behind that event, even when its delay is
// over first.
func TestQueueBarrierWaitsForTheEventInHand(t *testing.T) {
	q := newEventQueue(100)
	inHand, release := make(chan struct{}), make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		q.handle(func() []lineage.Event {
			close(inHand)
			<-release
			return qStart(5)
		})
	}()
	<-inHand
	q.barrierAfter(1, time.Millisecond)
	time.Sleep(20 * time.Millisecond) // the barrier's delay is long over
	close(release)
	<-done
	b, err := popWithin(t, q, 10, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if len(b.Events) == 2 && b.Barrier == 1 {
		return
	}
	if b.Barrier != 0 {
		t.Fatalf("batch %+v: the barrier came before the event that was in hand", b)
	}
	if b2, err := popWithin(t, q, 10, 5*time.Second); err != nil || b2.Barrier != 1 {
		t.Fatalf("then %+v, %v: want barrier 1", b2, err)
	}
}

// A barrier is not placed before its delay: events queued meanwhile come
// before it, and consecutive barriers merge into the highest.
func TestQueueBarrierAfterItsDelayFollowsWhatCameMeanwhile(t *testing.T) {
	q := newEventQueue(100)
	q.barrierAfter(1, 50*time.Millisecond)
	q.barrierAfter(2, 50*time.Millisecond)
	q.handle(func() []lineage.Event { return qStart(1) })
	b, err := popWithin(t, q, 10, 5*time.Second)
	if err != nil || len(b.Events) != 2 || b.Barrier != 0 {
		t.Fatalf("batch %+v, %v: want the start before any barrier", b, err)
	}
	got := uint64(0)
	for got < 2 {
		b, err := popWithin(t, q, 10, 5*time.Second)
		if err != nil || len(b.Events) != 0 || b.Barrier <= got {
			t.Fatalf("batch %+v, %v: want barriers only, rising to 2", b, err)
		}
		got = b.Barrier
	}
}

// An undecodable payload is reported in its place and its kinds counted
// lost; a producer's failure is returned once the queue is read; after
// close every pop, blocked or not, returns ErrClosed.
func TestQueueReportsUndecodablesFailureAndClose(t *testing.T) {
	q := newEventQueue(100)
	q.handle(func() []lineage.Event { return qStart(1) })
	bad := errors.New("bad payload")
	q.undecodable(bad, lineage.KindFork, lineage.KindExec)
	stopped := errors.New("consumer stopped")
	q.fail(stopped)
	b, err := q.pop(10)
	if err != nil || len(b.Events) != 2 || b.Undecodable != 1 || b.Err != bad {
		t.Fatalf("batch %+v, %v: want the start and one undecodable payload", b, err)
	}
	if _, badCounts, _ := q.counts(); badCounts[lineage.KindFork] != 1 || badCounts[lineage.KindExec] != 1 {
		t.Errorf("undecodable counts %v", badCounts)
	}
	if _, err := q.pop(10); err != stopped {
		t.Fatalf("after the queue is read: %v, want the producer's error", err)
	}

	q = newEventQueue(100)
	res := make(chan error, 1)
	go func() { _, err := q.pop(10); res <- err }()
	time.Sleep(10 * time.Millisecond)
	q.close()
	select {
	case err := <-res:
		if !errors.Is(err, ErrClosed) {
			t.Fatalf("a blocked pop returned %v at close, want ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a blocked pop did not return at close")
	}
	q.handle(func() []lineage.Event { return qStart(2) })
	q.barrier(3)
	if _, err := q.pop(10); !errors.Is(err, ErrClosed) {
		t.Fatalf("pop after close: %v, want ErrClosed", err)
	}
}
