package history

import (
	"bytes"
	"encoding/binary"
	"testing"
)

// FuzzChunk: reading a chunk never panics, whatever its bytes (a damaged
// store hands any), and splitting one at a time keeps every event
// exactly once: the older ones counted, the others in the kept chunk
// unchanged, under the oldest of their times.
func FuzzChunk(f *testing.F) {
	var valid []byte
	valid = binary.BigEndian.AppendUint64(valid, 30)
	for i, d := range []string{"a", "", "ccc"} {
		valid = appendEventKey(valid, uint64(10*(i+1)), uint32(i), uint8(i))
		valid = binary.AppendUvarint(valid, uint64(len(d)))
		valid = append(valid, d...)
	}
	f.Add(valid, uint64(15))
	f.Add(valid[:len(valid)-1], uint64(0))
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 1, 0xff}, uint64(1))
	f.Fuzz(func(t *testing.T, v []byte, at uint64) {
		type ev struct{ key, data string }
		var all []ev
		errAll := eachInChunk(v, func(k, d []byte) bool {
			all = append(all, ev{string(k), string(d)})
			return true
		})
		older, kept, oldest, err := splitChunk(v, at)
		if (err == nil) != (errAll == nil) {
			t.Fatalf("split and read disagree on the chunk: %v, %v", err, errAll)
		}
		if err != nil {
			return
		}
		var rest []ev
		if kept != nil {
			if !bytes.Equal(kept[:chunkHeadLen], v[:chunkHeadLen]) {
				t.Fatal("the kept chunk lost its header")
			}
			if err := eachInChunk(kept, func(k, d []byte) bool {
				if keyTime(k) < at || keyTime(k) < oldest {
					t.Fatalf("kept an event at %d: split at %d, oldest %d", keyTime(k), at, oldest)
				}
				rest = append(rest, ev{string(k), string(d)})
				return true
			}); err != nil {
				t.Fatalf("the kept chunk does not read: %v", err)
			}
		}
		if older+len(rest) != len(all) {
			t.Fatalf("%d older and %d kept of %d events", older, len(rest), len(all))
		}
		i := 0
		for _, e := range all {
			if keyTime([]byte(e.key)) >= at {
				if rest[i] != e {
					t.Fatalf("kept event %d changed: %q, want %q", i, rest[i], e)
				}
				i++
			}
		}
	})
}
