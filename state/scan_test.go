package state

import (
	"errors"
	"math"
	"reflect"
	"testing"

	"github.com/mcptrace/mcptrace/lineage"
)

var testScans = []struct {
	name string
	s    Scan
}{
	{"empty seed", Scan{}},
	{"empty repair", Scan{ReadAt: 7, Repair: true}},
	{"a node", Scan{ReadAt: 123_456_789_000, Snapshots: []lineage.Snapshot{
		{ID: lineage.ID{PID: 1, Start: 10_000_000}, Comm: "systemd", Filename: "/usr/lib/systemd/systemd", Argv: []string{"/sbin/init"}},
		{ID: lineage.ID{PID: 2, Start: 10_000_000}, Comm: "kthreadd", Kernel: true},
		{ID: lineage.ID{PID: 4242, Start: 99_990_000_000}, PPID: 1, UID: 1000, Comm: "node", Filename: "/usr/bin/node",
			Argv: []string{"node", "server.js", "--token=***"}, Stdio: lineage.Stdio{In: lineage.FilePipe, Out: lineage.FilePipe}},
		{ID: lineage.ID{PID: 4243, Start: 99_990_000_001}, PPID: 4242, Comm: "sh", Argv: []string{}},
		{ID: lineage.ID{PID: 4244, Start: 1}, PPID: 4242, Stdio: lineage.Stdio{In: lineage.FileClosed}},
		{ID: lineage.ID{PID: 4245, Start: 2}, PPID: 4242, Comm: "\xff\x00", Filename: "/tmp/\x80", Argv: []string{"", "é", "\xc3"}},
	}}},
	{"extreme values", Scan{ReadAt: math.MaxUint64, Repair: true, Snapshots: []lineage.Snapshot{
		{ID: lineage.ID{PID: math.MaxUint32, Start: math.MaxUint64}, PPID: math.MaxUint32, UID: math.MaxUint32},
	}}},
}

func TestScanRoundTripIsExact(t *testing.T) {
	for _, tt := range testScans {
		t.Run(tt.name, func(t *testing.T) {
			b := AppendScan(nil, tt.s)
			got, err := DecodeScan(b)
			if err != nil {
				t.Fatalf("DecodeScan(%x): %v", b, err)
			}
			if !reflect.DeepEqual(got, tt.s) {
				t.Fatalf("round trip:\n got %#v\nwant %#v", got, tt.s)
			}
			// Appending to a buffer that holds something else leaves it.
			pre := []byte("prefix")
			if b2 := AppendScan(pre, tt.s); string(b2[:len(pre)]) != "prefix" || string(b2[len(pre):]) != string(b) {
				t.Fatalf("AppendScan onto a prefix wrote %x, want prefix then %x", b2, b)
			}
		})
	}
}

func TestDecodeScanRejectsMalformedInput(t *testing.T) {
	good := AppendScan(nil, testScans[2].s)
	cases := map[string][]byte{
		"nothing":                {},
		"version only":           {ScanFormat},
		"unknown version":        append([]byte{2}, good[1:]...),
		"unknown flags":          append([]byte{ScanFormat, 0x80}, good[2:]...),
		"truncated":              good[:len(good)-1],
		"trailing byte":          append(append([]byte{}, good...), 0),
		"count beyond data":      {ScanFormat, 0, 0, 0xff, 0xff, 0xff, 0xff, 0x0f},
		"unknown snapshot flags": {ScanFormat, 0, 0, 1, 0x80, 1, 1, 0, 0, 0},
		"PPID flag, PPID 0":      {ScanFormat, 0, 0, 1, snapPPID, 1, 1, 0, 0, 0, 0},
		"stdio flag, no stdio":   {ScanFormat, 0, 0, 1, snapStdio, 1, 1, 0, 0, 0, 0, 0},
		"argv count beyond data": {ScanFormat, 0, 0, 1, snapArgv, 1, 1, 0, 0, 0, 0xff, 0x7f},
	}
	for name, b := range cases {
		t.Run(name, func(t *testing.T) {
			s, err := DecodeScan(b)
			if !errors.Is(err, ErrBadEvent) {
				t.Fatalf("err = %v (scan %#v), want ErrBadEvent", err, s)
			}
		})
	}
}

// FuzzDecodeScan feeds arbitrary bytes to DecodeScan: it must not panic,
// and whatever it accepts must encode to bytes that decode to the same
// scan.
//
//	go test -run x -fuzz FuzzDecodeScan -fuzztime 60s ./state/
func FuzzDecodeScan(f *testing.F) {
	for _, tt := range testScans {
		f.Add(AppendScan(nil, tt.s))
	}
	f.Add([]byte{ScanFormat, 0, 0, 1, snapArgv, 1, 1, 0, 0, 0, 2, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := DecodeScan(b)
		if err != nil {
			if !errors.Is(err, ErrBadEvent) {
				t.Fatalf("error does not wrap ErrBadEvent: %v", err)
			}
			return
		}
		enc := AppendScan(nil, s)
		again, err := DecodeScan(enc)
		if err != nil {
			t.Fatalf("re-encoding %x of %#v does not decode: %v", enc, s, err)
		}
		if !reflect.DeepEqual(again, s) {
			t.Fatalf("re-encoded scan differs:\n got %#v\nwant %#v", again, s)
		}
		if len(enc) > len(b) {
			t.Fatalf("canonical encoding (%d bytes) longer than the input (%d)", len(enc), len(b))
		}
	})
}
