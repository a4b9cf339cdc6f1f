package history

import (
	"context"
	"testing"
	"time"
)

// BenchmarkJournalEvents is the history's CPU per event, writer
// included: events of 120 bytes, handed in batches of 256 as the
// consumer does, then flushed.
//
//	go test -run '^$' -bench JournalEvents -benchtime 200000x ./history/
func BenchmarkJournalEvents(b *testing.B) {
	c := &clock{now: t0.Add(time.Hour)}
	j, err := Open(Options{Dir: b.TempDir(), BootID: "boot-1", Now: c.wall, BootNow: c.boot, FlushInterval: time.Second})
	if err != nil {
		b.Fatal(err)
	}
	defer j.Close()
	batch := make([]Event, 256)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i += len(batch) {
		for k := range batch {
			batch[k] = ev(i+k, 120)
		}
		j.Events(batch)
	}
	flushB(b, j)
}

func flushB(b *testing.B, j *Journal) {
	b.Helper()
	if err := j.Flush(context.Background()); err != nil {
		b.Fatal(err)
	}
}
