package state

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

const testBoot = "9f0c1f2e-5c1a-4d7e-9a8b-0123456789ab"

// clock is a Now that moves one second per call, so every move aside is a
// generation of its own.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)} }

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(time.Second)
	return c.t
}

func testOptions(dir string) Options {
	return Options{Dir: dir, BootID: testBoot, Now: newClock().now}
}

// open opens dir with the test boot id and fails the test on error.
func open(t testing.TB, dir string) (*Store, *Loaded) {
	t.Helper()
	return openWith(t, testOptions(dir))
}

func openWith(t testing.TB, opts Options) (*Store, *Loaded) {
	t.Helper()
	s, ld, err := Open(opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s, ld
}

// rec is the i-th test record: its kind and data follow from i alone, and
// its data length varies.
func rec(i int) Record {
	data := fmt.Appendf(nil, "record %d:", i)
	for j := range i % 23 {
		data = append(data, byte('a'+j))
	}
	return Record{Kind: Kind(1 + i%3), Data: data}
}

func recs(from, to int) []Record {
	var rs []Record
	for i := from; i < to; i++ {
		rs = append(rs, rec(i))
	}
	return rs
}

func mustAppend(t testing.TB, s *Store, rs ...Record) {
	t.Helper()
	if err := s.Append(rs...); err != nil {
		t.Fatalf("Append: %v", err)
	}
}

func mustCheckpoint(t testing.TB, s *Store, payload []byte) Cut {
	t.Helper()
	c := s.Cut()
	if err := s.WriteCheckpoint(c, payload); err != nil {
		t.Fatalf("WriteCheckpoint: %v", err)
	}
	return c
}

func sameRecords(got, want []Record) error {
	if len(got) != len(want) {
		return fmt.Errorf("%d records, want %d", len(got), len(want))
	}
	for i := range got {
		if got[i].Kind != want[i].Kind || !bytes.Equal(got[i].Data, want[i].Data) {
			return fmt.Errorf("record %d = {%d %q}, want {%d %q}", i, got[i].Kind, got[i].Data, want[i].Kind, want[i].Data)
		}
	}
	return nil
}

func checkRecords(t testing.TB, got, want []Record) {
	t.Helper()
	if err := sameRecords(got, want); err != nil {
		t.Fatal(err)
	}
}

// clean fails unless ld reports no problem and no torn record.
func clean(t testing.TB, ld *Loaded) {
	t.Helper()
	if len(ld.Problems) != 0 || ld.Torn != 0 {
		t.Fatalf("problems %+v, torn %d; want none", ld.Problems, ld.Torn)
	}
}

// files lists dir, sorted.
func files(t testing.TB, dir string) []string {
	t.Helper()
	des, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, de := range des {
		names = append(names, de.Name())
	}
	slices.Sort(names)
	return names
}

// segments lists the live segment files of dir.
func segments(t testing.TB, dir string) []string {
	t.Helper()
	var segs []string
	for _, n := range files(t, dir) {
		if _, ok := parseSegmentName(n); ok {
			segs = append(segs, n)
		}
	}
	return segs
}

// aside lists the moved-aside files of dir.
func aside(t testing.TB, dir string) []string {
	t.Helper()
	var as []string
	for _, n := range files(t, dir) {
		if _, ok := parseAsideName(n); ok {
			as = append(as, n)
		}
	}
	return as
}

func readFile(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func writeFile(t testing.TB, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// problemWith fails unless ld has exactly n problems and the first one's
// What contains what.
func problemWith(t testing.TB, ld *Loaded, n int, what string) {
	t.Helper()
	if len(ld.Problems) != n {
		t.Fatalf("%d problems %+v, want %d", len(ld.Problems), ld.Problems, n)
	}
	if !strings.Contains(ld.Problems[0].What, what) {
		t.Fatalf("problem %q does not say %q", ld.Problems[0].What, what)
	}
}

// recordOffsets returns the file offset of each record in a segment file.
func recordOffsets(t testing.TB, b []byte) []int {
	t.Helper()
	hl, f := parseSegmentHeader(b, testBoot, mustSeq(t, b))
	if f != nil {
		t.Fatal(f.what)
	}
	var offs []int
	for p := hl; p < len(b); {
		size, why, _ := frameAt(b[p:])
		if why != "" {
			t.Fatalf("offset %d: %s", p, why)
		}
		offs = append(offs, p)
		p += size
	}
	return offs
}

func mustSeq(t testing.TB, b []byte) uint64 {
	t.Helper()
	if len(b) < walFixed {
		t.Fatal("short segment")
	}
	return uint64(b[14]) | uint64(b[15])<<8 | uint64(b[16])<<16 | uint64(b[17])<<24 |
		uint64(b[18])<<32 | uint64(b[19])<<40 | uint64(b[20])<<48 | uint64(b[21])<<56
}

func join(dir string, name string) string { return filepath.Join(dir, name) }
