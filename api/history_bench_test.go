//go:build !windows

package api

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/mcptrace/mcptrace/history"
	"github.com/mcptrace/mcptrace/lineage"
	"github.com/mcptrace/mcptrace/sessions"
)

// BenchmarkPastTreeAmong200Sessions is `tree PID --at T` by a user with
// 200 sessions active at T, about 100 KB of record each (issue 31: one
// such request took 0.41 s, and 8 connections asking it took 185% CPU):
// the records carry their pids, and the request reads the one that holds
// PID. docs/benchmarks.md compares it with the commit before the index,
// whose request read all 200 (test binaries of both, run alternately):
//
//	go test -run '^$' -bench PastTreeAmong200Sessions -count 5 ./api/
func BenchmarkPastTreeAmong200Sessions(b *testing.B) {
	j := manySessions(b, 200, true)
	w := newWorld(b)
	w.s.History = func() (*history.Journal, error) { return j, nil }
	// The pid of the oldest session's last member: every other session
	// is newer and active at the time asked.
	path := fmt.Sprintf("/v1/tree/%d?at=%s", 100_000+299, pastStart.Add(2*time.Second).UTC().Format(time.RFC3339Nano))
	c := callerOf(w.spawn(init1, 1200, 1000, "sh"), 1000)
	b.ReportAllocs()
	for b.Loop() {
		if code, body := getAs(w, c, path); code != http.StatusOK {
			b.Fatalf("%d %s", code, body)
		}
	}
}

// manySessions is a history of n ended sessions of uid 1000, each of 300
// members with 40-word command lines, all active at pastStart+2s;
// session i's members have pids 100000+300i up.
func manySessions(b *testing.B, n int, indexed bool) *history.Journal {
	j, err := history.Open(history.Options{Dir: b.TempDir(), BootID: "boot", Now: func() time.Time { return pastStart.Add(time.Hour) },
		BootNow: func() uint64 { return pastBoot + uint64(time.Hour) }})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { j.Close() })
	argv := []string{"node"}
	for k := range 39 {
		argv = append(argv, fmt.Sprintf("--option-%02d=value", k))
	}
	for i := range n {
		base := uint32(100_000 + 300*i)
		root := lineage.ID{PID: base, Start: pastBoot}
		rec := SessionRecord{Now: pastBoot + 10*sec,
			Session: sessions.Session{ID: "s", Tag: "s", Root: root, Owner: 1000, Origin: "run", State: sessions.Ended, Began: pastBoot - uint64(n-i)*sec, EndedAt: pastBoot + 5*sec}}
		var pids []uint32
		for m := range uint32(300) {
			id := lineage.ID{PID: base + m, Start: pastBoot + uint64(m)}
			creator := root
			if m == 0 {
				creator = lineage.ID{}
			}
			rec.Members = append(rec.Members, lineage.Process{ID: id, Creator: creator, UID: 1000, Comm: "node", Exited: true, ExitTime: pastBoot + 6*sec,
				Images: []lineage.Image{{Time: id.Start, Argv: argv, UID: 1000}}})
			rec.Generations = append(rec.Generations, 0)
			pids = append(pids, id.PID)
		}
		d, err := json.Marshal(rec)
		if err != nil {
			b.Fatal(err)
		}
		hs := history.Session{Owner: 1000, ID: "s", Began: pastStart.Add(-time.Duration(n-i) * time.Second), Ended: pastStart.Add(5 * time.Second), Written: pastStart.Add(10 * time.Second), Detail: d}
		if indexed {
			hs.PIDs = pids
		}
		j.PutSession(hs)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := j.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	return j
}
