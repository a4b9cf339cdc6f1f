package events

import (
	"bufio"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/mcptrace/mcptrace/internal/testenv"
)

// exportLines reads every line of the export's files (path, path.1, …),
// oldest file first, and fails on a line that is not one whole event.
func exportLines(t *testing.T, path string, maxBytes int64) (events []Event, files int) {
	t.Helper()
	var names []string
	for i := 1; ; i++ {
		name := path + "." + strconv.Itoa(i)
		if _, err := os.Stat(name); err != nil {
			break
		}
		names = append([]string{name}, names...)
	}
	names = append(names, path)
	for _, name := range names {
		f, err := os.Open(name)
		if err != nil {
			t.Fatal(err)
		}
		st, _ := f.Stat()
		if st.Size() > maxBytes {
			t.Errorf("%s holds %d bytes, over the bound %d", filepath.Base(name), st.Size(), maxBytes)
		}
		if runtime.GOOS == "linux" && st.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %v, want 0600", filepath.Base(name), st.Mode().Perm())
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var e Event
			if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
				t.Fatalf("%s: a line that is not an event (%v): %q", filepath.Base(name), err, sc.Text())
			}
			events = append(events, e)
		}
		f.Close()
	}
	return events, len(names)
}

// The export file rotates at its size bound, writes whole lines only,
// and loses nothing across rotations: every event published is in one
// of the files exactly once, in order.
func TestExportRotatesAtItsSizeBoundAndLosesNothing(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "events.jsonl")
	h := NewHub("node-a", 0)
	const maxBytes = 4 * MinExportMaxBytes
	x, err := OpenExport(h, ExportOptions{Path: path, MaxBytes: maxBytes, MaxFiles: MaxExportMaxFiles, Logger: testenv.Logger(t, slog.LevelInfo)})
	if err != nil {
		t.Fatal(err)
	}
	n := testenv.Sized(3000, 1000)
	for i := range n {
		// Lines of every length, up to a few KiB, so a rotation falls
		// anywhere in a line.
		h.Publish(&Event{Kind: Exec, Session: "s", UID: U(1000), PID: uint32(i), Argv: []string{"node", strings.Repeat("x", i%2000)}})
		if i%1000 == 999 {
			// The writer's queue is bounded (a slow disk loses events,
			// counted): give it the time it needs, as a real event rate
			// would.
			testenv.Eventually(t, "the export to write its queue", func() (bool, string) {
				st := x.Stats()
				return st.Written+st.Failed >= uint64(i+1), fmt.Sprintf("%+v of %d", st, i+1)
			})
		}
	}
	if err := x.Close(); err != nil {
		t.Fatal(err)
	}
	st := x.Stats()
	if st.Dropped != 0 || st.Failed != 0 || st.Written != uint64(n) {
		t.Fatalf("stats %+v, want %d written and nothing dropped or failed", st, n)
	}
	evs, files := exportLines(t, path, maxBytes)
	if st.Rotations < 3 || uint64(files) != st.Rotations+1 {
		t.Fatalf("%d rotations into %d files, want at least 3 and one file per rotation more", st.Rotations, files)
	}
	if len(evs) != n {
		t.Fatalf("%d events across %d files, want %d", len(evs), files, n)
	}
	for i, e := range evs {
		if e.PID != uint32(i) || len(e.Argv) != 2 || len(e.Argv[1]) != i%2000 || e.Node != "node-a" {
			t.Fatalf("line %d: pid %d, argv of %d words, node %q: want event %d whole", i, e.PID, len(e.Argv), e.Node, i)
		}
	}
	t.Logf("%d events, %d rotations at %d bytes", n, st.Rotations, maxBytes)
}

// Past MaxFiles the oldest rotated file goes; an agent that starts again
// appends to the current file.
func TestExportKeepsMaxFilesAndAppendsAfterARestart(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "events.jsonl")
	h := NewHub("n", 0)
	x, err := OpenExport(h, ExportOptions{Path: path, MaxBytes: MinExportMaxBytes, MaxFiles: 2})
	if err != nil {
		t.Fatal(err)
	}
	big := strings.Repeat("y", 20<<10)
	for i := range 20 {
		h.Publish(&Event{Kind: Exec, PID: uint32(i), Argv: []string{big}})
		testenv.Eventually(t, "the export to write an event", func() (bool, string) {
			return x.Stats().Written >= uint64(i+1), fmt.Sprintf("%+v of %d", x.Stats(), i+1)
		})
	}
	x.Close()
	if _, err := os.Stat(path + ".3"); err == nil {
		t.Error("a third rotated file is kept with MaxFiles 2")
	}
	before, _ := exportLines(t, path, MinExportMaxBytes)
	if before[len(before)-1].PID != 19 {
		t.Fatalf("the newest event is %+v, want 19", before[len(before)-1])
	}
	x, err = OpenExport(h, ExportOptions{Path: path, MaxBytes: MinExportMaxBytes, MaxFiles: 2})
	if err != nil {
		t.Fatal(err)
	}
	h.Publish(&Event{Kind: Loss, What: "fork", Count: 1})
	x.Close()
	after, _ := exportLines(t, path, MinExportMaxBytes)
	if last := after[len(after)-1]; last.Kind != Loss || after[len(after)-2].PID != 19 {
		t.Errorf("after a restart the file ends %+v, %+v; want event 19 then the loss", after[len(after)-2], last)
	}
}
