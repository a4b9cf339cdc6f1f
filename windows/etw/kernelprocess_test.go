package etw

import (
	"errors"
	"testing"
)

// ft is a FILETIME: 2026-11-26, plus ms milliseconds.
func ft(ms uint64) uint64 { return 134401248000000000 + ms*10_000 }

func TestEveryVersionOfProcessStartDecodesFromItsManifestLayout(t *testing.T) {
	want := ProcessStart{ProcessID: 4242, SequenceNumber: 77, CreateTime: ft(1), ParentProcessID: 8, ParentSequenceNumber: 5,
		SessionID: 1, Flags: 2, ImageName: `\Device\HarddiskVolume3\Program Files\nodejs\node.exe`}
	for v := uint8(0); v <= 3; v++ {
		w := want
		w.Version = v
		if v < 3 {
			w.SequenceNumber, w.ParentSequenceNumber = 0, 0
		}
		if v < 1 {
			w.Flags = 0
		}
		got, err := DecodeProcessStart(v, startV(v, w))
		if err != nil {
			t.Fatalf("v%d: %v", v, err)
		}
		if got != w {
			t.Errorf("v%d:\n got %+v\nwant %+v", v, got, w)
		}
	}
}

func TestEveryVersionOfProcessStopDecodesFromItsManifestLayout(t *testing.T) {
	want := ProcessStop{ProcessID: 4242, SequenceNumber: 77, CreateTime: ft(1), ExitTime: ft(900), ExitCode: 0xC000013A, ImageName: "node.exe"}
	for v := uint8(0); v <= 2; v++ {
		w := want
		w.Version = v
		if v < 2 {
			w.SequenceNumber = 0
		}
		got, err := DecodeProcessStop(v, stopV(v, w))
		if err != nil {
			t.Fatalf("v%d: %v", v, err)
		}
		if got != w {
			t.Errorf("v%d:\n got %+v\nwant %+v", v, got, w)
		}
	}
}

// A payload cut anywhere is an error, never a short read taken as whole;
// an unknown version is ErrVersion, never read as another.
func TestTruncatedPayloadsAndUnknownVersionsAreErrors(t *testing.T) {
	s := ProcessStart{ProcessID: 1, CreateTime: ft(1), ImageName: `C:\x.exe`}
	for v := uint8(0); v <= 3; v++ {
		full := startV(v, s)
		for n := range len(full) {
			if _, err := DecodeProcessStart(v, full[:n]); err == nil {
				t.Errorf("ProcessStart v%d cut to %d of %d bytes decoded", v, n, len(full))
			}
		}
	}
	p := ProcessStop{ProcessID: 1, ImageName: "x.exe"}
	for v := uint8(0); v <= 2; v++ {
		full := stopV(v, p)
		for n := range len(full) {
			if _, err := DecodeProcessStop(v, full[:n]); err == nil {
				t.Errorf("ProcessStop v%d cut to %d of %d bytes decoded", v, n, len(full))
			}
		}
	}
	if _, err := DecodeProcessStart(4, startV(3, s)); !errors.Is(err, ErrVersion) {
		t.Errorf("ProcessStart v4: %v, want ErrVersion", err)
	}
	if _, err := DecodeProcessStop(3, stopV(2, p)); !errors.Is(err, ErrVersion) {
		t.Errorf("ProcessStop v3: %v, want ErrVersion", err)
	}
}

// Any bytes: decoding never panics, and what decodes decodes the same
// again.
func FuzzDecode(f *testing.F) {
	f.Add(uint8(3), true, []byte(startV(3, ProcessStart{ProcessID: 1, ImageName: "a"})))
	f.Add(uint8(2), false, []byte(stopV(2, ProcessStop{ProcessID: 1, ImageName: "a"})))
	f.Fuzz(func(t *testing.T, v uint8, start bool, data []byte) {
		if start {
			a, err := DecodeProcessStart(v, data)
			b, err2 := DecodeProcessStart(v, data)
			if (err == nil) != (err2 == nil) || a != b {
				t.Fatalf("decoded twice differently: %+v %v / %+v %v", a, err, b, err2)
			}
			return
		}
		a, err := DecodeProcessStop(v, data)
		b, err2 := DecodeProcessStop(v, data)
		if (err == nil) != (err2 == nil) || a != b {
			t.Fatalf("decoded twice differently: %+v %v / %+v %v", a, err, b, err2)
		}
	})
}
