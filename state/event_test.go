package state

import (
	"bytes"
	"errors"
	"math"
	"reflect"
	"testing"

	"github.com/mcptrace/mcptrace/lineage"
)

var testEvents = []struct {
	name string
	ev   lineage.Event
}{
	{"zero event", lineage.Event{}},
	{"fork", lineage.Event{
		Kind: lineage.KindFork, Time: 123_456_789_012, Proc: lineage.ID{PID: 4242, Start: 123_456_700_000},
		Creator: lineage.ID{PID: 4000, Start: 99_000_000}, Parent: lineage.ID{PID: 4000, Start: 99_000_000},
		UID: 1000, CgroupID: 8812, Comm: "node",
	}},
	{"exec with argv", lineage.Event{
		Kind: lineage.KindExec, Time: 5_000_000_001, Proc: lineage.ID{PID: 7, Start: 5_000_000_000},
		Parent: lineage.ID{PID: 1, Start: 2}, UID: 0, CgroupID: 1, Comm: "sh",
		Filename: "/usr/bin/dash", Argv: []string{"sh", "-c", "npx -y @scope/server --token=x"},
	}},
	{"exec with stdio", lineage.Event{
		Kind: lineage.KindExec, Proc: lineage.ID{PID: 8, Start: 8}, Filename: "/usr/bin/node", Argv: []string{"node", "server.js"},
		Stdio: lineage.Stdio{In: lineage.FileSocket, Out: lineage.FilePipe},
	}},
	{"exec with stdin closed only", lineage.Event{Kind: lineage.KindExec, Stdio: lineage.Stdio{In: lineage.FileClosed}}},
	{"exec with nil argv", lineage.Event{Kind: lineage.KindExec, Proc: lineage.ID{PID: 9, Start: 9}, Filename: "/bin/x"}},
	{"exec with empty non-nil argv", lineage.Event{Kind: lineage.KindExec, Proc: lineage.ID{PID: 9, Start: 9}, Argv: []string{}}},
	{"exec with empty arguments", lineage.Event{Kind: lineage.KindExec, Argv: []string{"", "", "x", ""}}},
	{"exec truncated argv", lineage.Event{Kind: lineage.KindExec, Argv: []string{"a"}, ArgvTruncated: true}},
	{"truncated flag without argv", lineage.Event{Kind: lineage.KindExec, ArgvTruncated: true}},
	{"bytes that are not UTF-8", lineage.Event{Kind: lineage.KindExec, Comm: "\xff\xfe\x00", Filename: "/tmp/\x80", Argv: []string{"\x00\x01", "é", "\xc3"}}},
	{"exit with status", lineage.Event{Kind: lineage.KindExit, Time: 77, Proc: lineage.ID{PID: 7, Start: 5}, ExitCode: 1}},
	{"exit by signal", lineage.Event{Kind: lineage.KindExit, Proc: lineage.ID{PID: 7, Start: 5}, ExitCode: -1, Signal: 9}},
	{"extreme values", lineage.Event{
		Kind: 255, Time: math.MaxUint64, Proc: lineage.ID{PID: math.MaxUint32, Start: math.MaxUint64},
		Creator: lineage.ID{PID: math.MaxUint32, Start: math.MaxUint64}, Parent: lineage.ID{PID: math.MaxUint32, Start: math.MaxUint64},
		UID: math.MaxUint32, CgroupID: math.MaxUint64, ExitCode: math.MinInt, Signal: math.MaxInt,
	}},
	{"unknown kind", lineage.Event{Kind: 42}},
	{"engine request", lineage.Event{
		Kind: lineage.KindRequest, Time: 9, Proc: lineage.ID{PID: 31, Start: 8}, Comm: "docker",
		Request: "POST /containers/3f1c9a3b1e2d4c5f6a7b8c9d0e1f2a3b4c5d6e7f8091a2b3c4d5e6f708192a3b/start ",
	}},
	{"engine request with its sender's groups", lineage.Event{
		Kind: lineage.KindRequest, Time: 9, Proc: lineage.ID{PID: 31, Start: 8}, UID: 1000, Comm: "docker",
		Request: "POST /containers/svc/start ", Groups: []uint32{1000, 0, 999, math.MaxUint32},
	}},
}

func TestEventRoundTripIsExact(t *testing.T) {
	for _, tt := range testEvents {
		t.Run(tt.name, func(t *testing.T) {
			b := AppendEvent(nil, tt.ev)
			got, err := DecodeEvent(b)
			if err != nil {
				t.Fatalf("DecodeEvent: %v", err)
			}
			if !reflect.DeepEqual(got, tt.ev) {
				t.Fatalf("round trip:\n got %#v\nwant %#v", got, tt.ev)
			}
			if again := AppendEvent([]byte("prefix"), tt.ev); !bytes.Equal(again[6:], b) {
				t.Fatalf("encoding is not deterministic or depends on b: %x vs %x", again[6:], b)
			}
		})
	}
}

func TestEventEncodingIsCompact(t *testing.T) {
	ev := benchEvents()[1] // an exec with 8 argv words
	n := len(AppendEvent(nil, ev))
	raw := len(ev.Comm) + len(ev.Filename)
	for _, a := range ev.Argv {
		raw += len(a)
	}
	// The strings plus about 1-9 bytes per number and 1 per string length.
	if n > raw+60 {
		t.Fatalf("%d bytes for an event with %d bytes of strings", n, raw)
	}
}

func TestDecodeEventRejectsMalformedInput(t *testing.T) {
	valid := AppendEvent(nil, testEvents[2].ev)
	for i := range len(valid) {
		if _, err := DecodeEvent(valid[:i]); !errors.Is(err, ErrBadEvent) {
			t.Errorf("truncated to %d of %d bytes: err = %v, want ErrBadEvent", i, len(valid), err)
		}
	}
	tests := []struct {
		name string
		b    []byte
	}{
		{"empty", nil},
		{"trailing byte", append(AppendEvent(nil, testEvents[1].ev), 0)},
		{"unknown version", append([]byte{2}, valid[1:]...)},
		{"version 0", append([]byte{0}, valid[1:]...)},
		{"unknown flag", append([]byte{1, 2, 16}, valid[3:]...)},
		{"groups flag with no group", []byte{1, 4, flagGroups, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}},
		{"group count larger than the input", []byte{1, 4, flagGroups, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0x03, 1}},
		{"group beyond 32 bits", []byte{1, 4, flagGroups, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0x80, 0x80, 0x80, 0x80, 0x10}},
		{"pid beyond 32 bits", []byte{1, 1, 0, 0, 0x80, 0x80, 0x80, 0x80, 0x10, 0}},
		{"uid beyond 32 bits", []byte{1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0x80, 0x80, 0x80, 0x80, 0x10}},
		{"overlong varint", []byte{1, 1, 0, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01}},
		{"string longer than the input", []byte{1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0x03, 'a'}},
		{"argv count larger than the input", []byte{1, 3, flagArgv, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0x0f, 0, 0}},
		{"stdio flag with no stdio", []byte{1, 2, flagStdio, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}},
		{"stdio kind out of range", []byte{1, 2, flagStdio, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 99}},
		{"stdio flag without its bytes", []byte{1, 2, flagStdio, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2}},
		{"argv count with too few strings", []byte{1, 3, flagArgv, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ev, err := DecodeEvent(tt.b)
			if !errors.Is(err, ErrBadEvent) {
				t.Fatalf("err = %v (event %#v), want ErrBadEvent", err, ev)
			}
		})
	}
}

// FuzzDecodeEvent feeds arbitrary bytes to DecodeEvent: it must not panic,
// and whatever it accepts must encode to bytes that decode to the same
// event.
//
//	go test -run x -fuzz FuzzDecodeEvent -fuzztime 60s ./state/
func FuzzDecodeEvent(f *testing.F) {
	for _, tt := range testEvents {
		f.Add(AppendEvent(nil, tt.ev))
	}
	f.Add([]byte{})
	f.Add([]byte{1, 3, flagArgv, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, b []byte) {
		ev, err := DecodeEvent(b)
		if err != nil {
			if !errors.Is(err, ErrBadEvent) {
				t.Fatalf("error does not wrap ErrBadEvent: %v", err)
			}
			return
		}
		enc := AppendEvent(nil, ev)
		again, err := DecodeEvent(enc)
		if err != nil {
			t.Fatalf("re-encoding %x of %#v does not decode: %v", enc, ev, err)
		}
		if !reflect.DeepEqual(again, ev) {
			t.Fatalf("re-encoded event differs:\n got %#v\nwant %#v", again, ev)
		}
		if len(enc) > len(b) {
			t.Fatalf("canonical encoding (%d bytes) longer than the input (%d)", len(enc), len(b))
		}
	})
}

// benchEvents is a typical batch: forks, execs with 5-10 argv words, exits.
func benchEvents() []lineage.Event {
	argvs := [][]string{
		{"node", "/home/dev/.npm/_npx/4a1b/node_modules/.bin/mcp-server-filesystem", "--root", "/home/dev/project", "--read-only"},
		{"npm", "exec", "--yes", "--package", "@modelcontextprotocol/server-github", "--", "mcp-server-github", "--stdio"},
		{"python3", "-m", "uvicorn", "app.main:app", "--host", "127.0.0.1", "--port", "8080", "--reload", "--log-level=debug"},
		{"/bin/sh", "-c", "git status --porcelain", "sh", "extra", "args"},
	}
	var evs []lineage.Event
	now := uint64(86_400_000_000_000)
	for i := range 64 {
		pid := uint32(20000 + i)
		start := now + uint64(i)*1_000_000
		id := lineage.ID{PID: pid, Start: start}
		parent := lineage.ID{PID: 19000, Start: 3_600_000_000_000}
		switch i % 3 {
		case 0:
			evs = append(evs, lineage.Event{Kind: lineage.KindFork, Time: start + 1500, Proc: id, Creator: parent, Parent: parent, UID: 1000, CgroupID: 12345, Comm: "node"})
		case 1:
			a := argvs[i%len(argvs)]
			evs = append(evs, lineage.Event{Kind: lineage.KindExec, Time: start + 250_000, Proc: id, Parent: parent, UID: 1000, CgroupID: 12345, Comm: "node", Filename: "/usr/bin/" + a[0], Argv: a})
		case 2:
			evs = append(evs, lineage.Event{Kind: lineage.KindExit, Time: start + 90_000_000, Proc: id, Parent: parent, UID: 1000, CgroupID: 12345, Comm: "node", ExitCode: 0})
		}
	}
	return evs
}

// BenchmarkAppendEvent encodes the 64 events of a typical batch.
//
//	go test -run x -bench Event -benchmem -count 10 ./state/ | benchstat -
func BenchmarkAppendEvent(b *testing.B) {
	evs := benchEvents()
	var buf []byte
	n := 0
	for _, ev := range evs {
		n += len(AppendEvent(nil, ev))
	}
	b.SetBytes(int64(n))
	b.ReportAllocs()
	for b.Loop() {
		buf = buf[:0]
		for _, ev := range evs {
			buf = AppendEvent(buf, ev)
		}
	}
}

// BenchmarkDecodeEvent decodes the 64 events of a typical batch.
func BenchmarkDecodeEvent(b *testing.B) {
	var encs [][]byte
	n := 0
	for _, ev := range benchEvents() {
		encs = append(encs, AppendEvent(nil, ev))
		n += len(encs[len(encs)-1])
	}
	b.SetBytes(int64(n))
	b.ReportAllocs()
	for b.Loop() {
		for _, e := range encs {
			if _, err := DecodeEvent(e); err != nil {
				b.Fatal(err)
			}
		}
	}
}
