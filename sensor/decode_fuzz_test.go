package sensor

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"unsafe"

	"github.com/mcptrace/mcptrace/bpf"
	"github.com/mcptrace/mcptrace/containers"
	"github.com/mcptrace/mcptrace/lineage"
)

// aligned copies raw into 8-byte aligned memory, as the ring buffer hands
// out records.
func aligned(raw []byte) []byte {
	words := make([]uint64, (len(raw)+7)/8)
	b := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(words))), len(words)*8)[:len(raw)]
	copy(b, raw)
	return b
}

// encodeRecord encodes a ring buffer record the way the BPF programs lay
// it out: an exec record is cut after argsLen bytes of argv (at most the
// field), as bpf_ringbuf_output sends it.
func encodeRecord(kind bpf.McptraceEventKind, flags uint8, comm, filename string, argsLen uint32, args []byte) []byte {
	size := headerSize
	switch kind {
	case bpf.McptraceEventKindEVENT_EXEC:
		size = execArgsOffset + min(int(argsLen), execSize-execArgsOffset)
	case bpf.McptraceEventKindEVENT_BARRIER:
		size = barrierSize
	case bpf.McptraceEventKindEVENT_REQUEST:
		size = requestSize
	}
	raw := aligned(make([]byte, size))
	h := (*bpf.McptraceEvent)(unsafe.Pointer(&raw[0]))
	h.Kind, h.Flags, h.Time, h.Uid, h.CgroupId, h.ExitCode = uint8(kind), flags, 123456789, 1000, 42, 9<<8|0
	h.Proc.Pid, h.Proc.Start = 4242, 5_000_000_001
	h.Creator.Pid, h.Creator.Start = 1, 7
	h.Parent.Pid, h.Parent.Start = 1, 7
	copy(unsafe.Slice((*byte)(unsafe.Pointer(&h.Comm[0])), len(h.Comm)), comm)
	if kind == bpf.McptraceEventKindEVENT_EXEC {
		x := (*bpf.McptraceExecEvent)(unsafe.Pointer(&raw[0]))
		x.FilenameLen = uint32(len(filename) + 1)
		copy(unsafe.Slice((*byte)(unsafe.Pointer(&x.Filename[0])), len(x.Filename)), filename)
		x.ArgsLen = argsLen
		copy(raw[execArgsOffset:], args)
	}
	if kind == bpf.McptraceEventKindEVENT_BARRIER {
		(*bpf.McptraceBarrierEvent)(unsafe.Pointer(&raw[0])).Seq = 77
	}
	if kind == bpf.McptraceEventKindEVENT_REQUEST {
		r := (*bpf.McptraceRequestEvent)(unsafe.Pointer(&raw[0]))
		r.Len = argsLen
		copy(unsafe.Slice((*byte)(unsafe.Pointer(&r.Line[0])), len(r.Line)), args)
	}
	return raw
}

// FuzzDecodeRecord feeds the ring buffer record decoder arbitrary bytes:
// records cut short, unknown kinds, lengths past the buffers, strings with
// no terminating NUL. The decoder must never panic nor read past the
// record, and what it returns must be what the record says, bounded.
//
//	go test -run x -fuzz FuzzDecodeRecord -fuzztime 30s ./sensor/
func FuzzDecodeRecord(f *testing.F) {
	argv := []byte("node\x00server.js\x00--port\x003000\x00")
	f.Add(encodeRecord(bpf.McptraceEventKindEVENT_FORK, 0, "bash", "", 0, nil))
	f.Add(encodeRecord(bpf.McptraceEventKindEVENT_EXIT, 0, "sleep", "", 0, nil))
	f.Add(encodeRecord(bpf.McptraceEventKindEVENT_EXEC, 0, "node", "/usr/bin/node", uint32(len(argv)), argv))
	f.Add(encodeRecord(bpf.McptraceEventKindEVENT_EXEC, 1, strings.Repeat("c", 16), strings.Repeat("f", 300), 1<<31, bytes.Repeat([]byte{'a', 0}, 3000)))
	f.Add(encodeRecord(bpf.McptraceEventKindEVENT_EXEC, 0, "true", "/bin/true", 0, nil))
	f.Add(encodeRecord(bpf.McptraceEventKindEVENT_EXEC, 0, "x", "/x", 9, []byte("a\x00b\x00"))[:execArgsOffset+4])
	f.Add(encodeRecord(bpf.McptraceEventKindEVENT_BARRIER, 0, "", "", 0, nil))
	f.Add(encodeRecord(bpf.McptraceEventKindEVENT_EXEC, 0, "x", "/x", 3, []byte("a\x00b"))[:headerSize+8])
	start := []byte("POST /v1.41/containers/" + strings.Repeat("ab", 32) + "/start HTTP/1.1\r\n")
	f.Add(encodeRecord(bpf.McptraceEventKindEVENT_REQUEST, 0, "docker", "", uint32(len(start)), start))
	f.Add(encodeRecord(bpf.McptraceEventKindEVENT_REQUEST, 0, "docker", "", 500, start))
	f.Add([]byte{})
	var d decoder // one for every input: interning must not change a result
	f.Fuzz(func(t *testing.T, data []byte) {
		raw := aligned(data)
		rec, err := d.decodeRecord(raw)
		if len(raw) < headerSize {
			if !errors.Is(err, ErrShortRecord) {
				t.Fatalf("%d bytes: err %v, want ErrShortRecord", len(raw), err)
			}
			return
		}
		h := (*bpf.McptraceEvent)(unsafe.Pointer(&raw[0]))
		kind := bpf.McptraceEventKind(h.Kind)
		if err != nil {
			short := errors.Is(err, ErrShortRecord)
			switch {
			case kind == bpf.McptraceEventKindEVENT_EXEC && short &&
				(len(raw) < execArgsOffset || int((*bpf.McptraceExecEvent)(unsafe.Pointer(&raw[0])).ArgsLen) > len(raw)-execArgsOffset),
				kind == bpf.McptraceEventKindEVENT_BARRIER && len(raw) < barrierSize && short,
				kind == bpf.McptraceEventKindEVENT_REQUEST && len(raw) < requestSize && short,
				kind != bpf.McptraceEventKindEVENT_FORK && kind != bpf.McptraceEventKindEVENT_EXEC &&
					kind != bpf.McptraceEventKindEVENT_EXIT && kind != bpf.McptraceEventKindEVENT_BARRIER &&
					kind != bpf.McptraceEventKindEVENT_REQUEST && !short:
			default:
				t.Fatalf("kind %d, %d bytes: unexpected error %v", kind, len(raw), err)
			}
			return
		}
		if rec.isBarrier {
			if kind != bpf.McptraceEventKindEVENT_BARRIER || rec.barrier != (*bpf.McptraceBarrierEvent)(unsafe.Pointer(&raw[0])).Seq {
				t.Fatalf("barrier %d decoded from kind %d", rec.barrier, kind)
			}
			return
		}
		ev := rec.ev
		if rec.dropped != (ev.Kind == lineage.KindRequest && ev.Request == "") {
			t.Fatalf("dropped %v for %+v", rec.dropped, ev)
		}
		if ev.Proc != (lineage.ID{PID: h.Proc.Pid, Start: h.Proc.Start}) || ev.Time != h.Time || ev.UID != h.Uid {
			t.Fatalf("header fields not carried: %+v", ev)
		}
		if len(ev.Comm) > len(h.Comm) || strings.IndexByte(ev.Comm, 0) >= 0 {
			t.Fatalf("comm %q: longer than the field or holds a NUL", ev.Comm)
		}
		switch ev.Kind {
		case lineage.KindFork:
			if kind != bpf.McptraceEventKindEVENT_FORK || ev.Creator.PID != h.Creator.Pid {
				t.Fatalf("fork from kind %d, creator %v", kind, ev.Creator)
			}
		case lineage.KindExit:
			if ev.Signal < 0 || ev.Signal > 0x7f || ev.ExitCode < 0 || ev.ExitCode > 0xff {
				t.Fatalf("exit code %d signal %d out of range", ev.ExitCode, ev.Signal)
			}
		case lineage.KindExec:
			x := (*bpf.McptraceExecEvent)(unsafe.Pointer(&raw[0]))
			if len(ev.Filename) >= len(x.Filename)+1 || strings.IndexByte(ev.Filename, 0) >= 0 {
				t.Fatalf("filename of %d bytes past the field or holding a NUL", len(ev.Filename))
			}
			args := raw[execArgsOffset : execArgsOffset+int(x.ArgsLen)]
			want := string(bytes.TrimSuffix(args, []byte{0}))
			if got := strings.Join(ev.Argv, "\x00"); got != want {
				t.Fatalf("argv %q does not join back to the record's %q", ev.Argv, want)
			}
			if len(ev.Argv) > len(x.Args) {
				t.Fatalf("%d argv elements from %d bytes", len(ev.Argv), len(x.Args))
			}
		case lineage.KindRequest:
			// Only the canonical form of a start the record's own bytes
			// hold, or nothing.
			r := (*bpf.McptraceRequestEvent)(unsafe.Pointer(&raw[0]))
			line := unsafe.Slice((*byte)(unsafe.Pointer(&r.Line[0])), len(r.Line))[:min(int(r.Len), len(r.Line))]
			if kind != bpf.McptraceEventKindEVENT_REQUEST || ev.Request != canonicalRequest(line) {
				t.Fatalf("request %q from kind %d and line %q", ev.Request, kind, line)
			}
			if ev.Request != "" {
				if _, _, ok := containers.ParseRequest(ev.Request); !ok {
					t.Fatalf("kept request %q is not a start", ev.Request)
				}
			}
		default:
			t.Fatalf("decoded kind %v from record kind %d", ev.Kind, kind)
		}
	})
}
