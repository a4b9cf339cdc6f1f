package procfs

import (
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"testing"

	"github.com/mcptrace/mcptrace/lineage"
)

func TestUsageOfALiveProcessGrowsWithItsIO(t *testing.T) {
	st, err := ReadStat("", uint32(os.Getpid()))
	if err != nil {
		t.Fatal(err)
	}
	id := lineage.ID{PID: uint32(os.Getpid()), Start: st.StartTicks * lineage.TickNS}
	var r UsageReader
	before, err := r.Read(id)
	if err != nil {
		t.Fatal(err)
	}
	if before.RSSBytes == 0 || before.IOBytes == 0 {
		t.Fatalf("usage of the test process = %+v, want rss and io above 0", before)
	}
	if err := os.WriteFile(t.TempDir()+"/f", make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	after, err := r.Read(id)
	if err != nil {
		t.Fatal(err)
	}
	if after.IOBytes < before.IOBytes+1<<20 {
		t.Fatalf("io bytes went from %d to %d after writing 1 MiB, want +1 MiB at least", before.IOBytes, after.IOBytes)
	}
}

func TestUsageOfARecycledOrExitedPIDReadsAsGone(t *testing.T) {
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	var r UsageReader
	if _, err := r.Read(lineage.ID{PID: uint32(cmd.Process.Pid), Start: 1}); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("exited child: err = %v, want fs.ErrNotExist", err)
	}
	// This process under another start time: a PID that was recycled.
	if _, err := r.Read(lineage.ID{PID: uint32(os.Getpid()), Start: 1}); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("own pid with another start time: err = %v, want fs.ErrNotExist", err)
	}
}

func TestParseStatUsageAndIO(t *testing.T) {
	stat := []byte("42 (a) b) S 1 42 42 0 -1 4194560 100 0 0 0 7 5 0 0 20 0 1 0 777 1000000 3 18446744073709551615 0 0\n")
	u, start, err := parseStatUsage(stat)
	if err != nil || start != 777 {
		t.Fatalf("parseStatUsage: start %d, %v; want 777", start, err)
	}
	if u.CPUTicks != 12 || u.RSSBytes != 3*uint64(os.Getpagesize()) {
		t.Fatalf("usage = %+v, want 12 ticks and 3 pages", u)
	}
	if _, _, err := parseStatUsage([]byte("42 (a) S 1 42")); err == nil {
		t.Fatal("a short stat line parsed")
	}
	n, err := parseIO([]byte("rchar: 10\nwchar: 5\nsyscr: 1\nsyscw: 1\nread_bytes: 0\n"))
	if err != nil || n != 15 {
		t.Fatalf("parseIO = %d, %v; want 15", n, err)
	}
	if _, err := parseIO([]byte("syscr: 1\n")); err == nil {
		t.Fatal("an io file without rchar and wchar parsed")
	}
}
