package history

import (
	"context"
	"syscall"
	"testing"
	"time"
)

// BenchmarkJournalEvents is the history's CPU per event, writer
// included: events of 120 bytes, handed in batches of 256 as the
// consumer does, then flushed. ns/op is the time to hand them in and
// write them; cpu-ns/event the process's CPU (user and system, every
// goroutine: the writer's system calls are most of it), which is what
// an event storm beside the agent competes with.
//
//	go test -run '^$' -bench JournalEvents -benchtime 200000x ./history/
func BenchmarkJournalEvents(b *testing.B) {
	c := &clock{now: t0.Add(time.Hour)}
	j, err := Open(Options{Dir: b.TempDir(), BootID: "boot-1", Now: c.wall, BootNow: c.boot, FlushInterval: time.Second})
	if err != nil {
		b.Fatal(err)
	}
	defer j.Close()
	// The events are made before the clock starts (making them cost as
	// much as storing them); each round sets their times anew.
	ring := make([][]Event, 64)
	for r := range ring {
		ring[r] = make([]Event, 256)
		for k := range ring[r] {
			ring[r][k] = ev(r*256+k, 120)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuNS(b)
	for i, r := 0, 0; i < b.N; i, r = i+256, r+1 {
		batch := ring[r%len(ring)]
		for k := range batch {
			batch[k].Time = uint64(i+k) * uint64(time.Millisecond)
		}
		j.Events(batch)
	}
	flushB(b, j)
	b.ReportMetric(float64(cpuNS(b)-cpu0)/float64(b.N), "cpu-ns/event")
}

// cpuNS is the CPU time (user and system) the process has used.
func cpuNS(b *testing.B) int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

func flushB(b *testing.B, j *Journal) {
	b.Helper()
	if err := j.Flush(context.Background()); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkJournalOpen is the time Open takes to read and check a store
// of 256 MiB of events (16 MiB with -short), the default bound: every
// segment is read and every frame checked (warm page cache; from a cold
// disk, add its read time).
//
//	go test -run '^$' -bench JournalOpen -benchtime 5x ./history/
func BenchmarkJournalOpen(b *testing.B) {
	total := int64(DefaultMaxBytes)
	if testing.Short() {
		total = 16 << 20
	}
	c := &clock{now: t0.Add(time.Hour)}
	o := Options{Dir: b.TempDir(), BootID: "boot-1", Now: c.wall, BootNow: c.boot, FlushInterval: time.Hour, MaxBytes: 2 * total}
	j, err := Open(o)
	if err != nil {
		b.Fatal(err)
	}
	batch := make([]Event, 4096)
	for i := 0; j.Stats().InUseBytes < total; i += len(batch) {
		for k := range batch {
			batch[k] = ev(i+k, 120)
		}
		j.Events(batch)
		flushB(b, j)
	}
	j.Close()
	b.ResetTimer()
	for range b.N {
		j, err := Open(o)
		if err != nil {
			b.Fatal(err)
		}
		j.Close()
	}
	b.ReportMetric(float64(total>>20), "MiB")
}
