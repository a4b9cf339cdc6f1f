package cpio

import (
	"bytes"
	"fmt"
	"strconv"
	"testing"
)

type entry struct {
	name       string
	mode       uint32
	data       string
	rmaj, rmin uint32
}

// parse is an independent newc reader used to check the writer.
func parse(t *testing.T, b []byte) []entry {
	t.Helper()
	var out []entry
	off := 0
	align := func() { off = (off + 3) &^ 3 }
	for {
		if off+110 > len(b) {
			t.Fatalf("truncated header at %d", off)
		}
		h := string(b[off : off+110])
		if h[:6] != "070701" {
			t.Fatalf("bad magic %q at %d", h[:6], off)
		}
		field := func(i int) uint32 {
			v, err := strconv.ParseUint(h[6+8*i:14+8*i], 16, 32)
			if err != nil {
				t.Fatal(err)
			}
			return uint32(v)
		}
		mode, size, rmaj, rmin, namesize := field(1), field(6), field(9), field(10), field(11)
		off += 110
		name := string(b[off : off+int(namesize)-1])
		if b[off+int(namesize)-1] != 0 {
			t.Fatalf("name %q not NUL terminated", name)
		}
		off += int(namesize)
		align()
		data := string(b[off : off+int(size)])
		off += int(size)
		align()
		if name == trailer {
			if len(b)%512 != 0 {
				t.Errorf("archive length %d not padded to 512", len(b))
			}
			return out
		}
		out = append(out, entry{name, mode, data, rmaj, rmin})
	}
}

func TestRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	w := NewWriter(&buf)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(w.Dir("/proc", 0o555))
	must(w.Bytes("/bin/hello", 0o755, []byte("abcde")))
	must(w.Symlink("/bin/sh", "hello"))
	must(w.CharDev("dev/console", 0o600, 5, 1))
	must(w.Bytes("a/b/c/d.txt", 0o644, nil))
	must(w.Dir("a/b", 0o700)) // already created as a parent: no duplicate
	if err := w.Bytes("/bin/hello", 0o755, nil); err == nil {
		t.Error("duplicate file accepted")
	}
	if err := w.Bytes("../x", 0o644, nil); err == nil {
		t.Error("path escaping the root accepted")
	}
	must(w.Close())

	got := parse(t, buf.Bytes())
	var s []string
	for _, e := range got {
		s = append(s, fmt.Sprintf("%s %o %q %d,%d", e.name, e.mode, e.data, e.rmaj, e.rmin))
	}
	want := []string{
		`proc 40555 "" 0,0`,
		`bin 40755 "" 0,0`,
		`bin/hello 100755 "abcde" 0,0`,
		`bin/sh 120777 "hello" 0,0`,
		`dev 40755 "" 0,0`,
		`dev/console 20600 "" 5,1`,
		`a 40755 "" 0,0`,
		`a/b 40755 "" 0,0`,
		`a/b/c 40755 "" 0,0`,
		`a/b/c/d.txt 100644 "" 0,0`,
	}
	if fmt.Sprint(s) != fmt.Sprint(want) {
		t.Errorf("entries:\n got %q\nwant %q", s, want)
	}
}
