package sensor

import (
	"bytes"
	"errors"
	"fmt"
	"unsafe"

	"github.com/mcptrace/mcptrace/bpf"
	"github.com/mcptrace/mcptrace/containers"
	"github.com/mcptrace/mcptrace/lineage"
)

const (
	headerSize = int(unsafe.Sizeof(bpf.McptraceEvent{}))
	execSize   = int(unsafe.Sizeof(bpf.McptraceExecEvent{})) // the longest exec record
	// execArgsOffset is where an exec record's argv starts and, for an
	// exec without argv, where the record ends (bpf/events.h: exec records
	// are cut after their args_len bytes of argv).
	execArgsOffset = int(unsafe.Offsetof(bpf.McptraceExecEvent{}.Args))
	barrierSize    = int(unsafe.Sizeof(bpf.McptraceBarrierEvent{}))
	requestSize    = int(unsafe.Sizeof(bpf.McptraceRequestEvent{}))
)

// record is one decoded ring buffer record: a process event or a barrier.
type record struct {
	ev        lineage.Event
	isBarrier bool
	barrier   uint64 // the barrier's sequence number
	// dropped: an engine request that starts no container, dropped
	// unread (see canonicalRequest).
	dropped bool
}

// A decoder decodes records for one reader. It interns the strings records
// repeat (comm and filename: a node runs the same few programs again and
// again), so a storm of `sh` costs one "sh", not one per event, and the
// graph's nodes share it. Not safe for concurrent use; the zero value is
// ready.
type decoder struct {
	interned map[string]string
}

// maxInterned bounds the interned strings; the table starts again empty
// when it is full (a process can pick any comm and filename it likes).
const maxInterned = 4096

// intern returns b as a string, the same string for the same bytes while
// the table holds it.
func (d *decoder) intern(b []byte) string {
	if s, ok := d.interned[string(b)]; ok { // no allocation
		return s
	}
	s := string(b)
	if d.interned == nil || len(d.interned) >= maxInterned {
		d.interned = make(map[string]string, 256)
	}
	d.interned[s] = s
	return s
}

// decodeRecord decodes a process event (Decode) or a barrier record.
func (d *decoder) decodeRecord(raw []byte) (record, error) {
	if len(raw) >= headerSize && bpf.McptraceEventKind((*bpf.McptraceEvent)(unsafe.Pointer(&raw[0])).Kind) == bpf.McptraceEventKindEVENT_BARRIER {
		if len(raw) < barrierSize {
			return record{}, fmt.Errorf("decode barrier record of %d bytes: %w", len(raw), ErrShortRecord)
		}
		b := (*bpf.McptraceBarrierEvent)(unsafe.Pointer(&raw[0]))
		return record{isBarrier: true, barrier: b.Seq}, nil
	}
	ev, err := d.decode(raw)
	return record{ev: ev, dropped: err == nil && ev.Kind == lineage.KindRequest && ev.Request == ""}, err
}

// ErrShortRecord is returned by Decode for a record smaller than its kind's layout.
var ErrShortRecord = errors.New("short record")

// Decode turns one ring buffer record into an event. The record layouts are
// the C structs of bpf/events.h, through the Go types bpf2go generated.
func Decode(raw []byte) (lineage.Event, error) {
	var d decoder
	return d.decode(raw)
}

func (d *decoder) decode(raw []byte) (lineage.Event, error) {
	if len(raw) < headerSize {
		return lineage.Event{}, fmt.Errorf("decode record of %d bytes: %w", len(raw), ErrShortRecord)
	}
	h := (*bpf.McptraceEvent)(unsafe.Pointer(&raw[0]))
	ev := lineage.Event{
		Time:     h.Time,
		Proc:     lineage.ID{PID: h.Proc.Pid, Start: h.Proc.Start},
		Parent:   lineage.ID{PID: h.Parent.Pid, Start: h.Parent.Start},
		UID:      h.Uid,
		CgroupID: h.CgroupId,
		Comm:     d.intern(cBytes(h.Comm[:])),
	}
	switch bpf.McptraceEventKind(h.Kind) {
	case bpf.McptraceEventKindEVENT_FORK:
		ev.Kind = lineage.KindFork
		ev.Creator = lineage.ID{PID: h.Creator.Pid, Start: h.Creator.Start}
	case bpf.McptraceEventKindEVENT_EXIT:
		ev.Kind = lineage.KindExit
		// A wait status: low 7 bits the terminating signal, bits 8-15 the exit code.
		ev.Signal = int(h.ExitCode & 0x7f)
		ev.ExitCode = int(h.ExitCode>>8) & 0xff
	case bpf.McptraceEventKindEVENT_EXEC:
		if len(raw) < execArgsOffset {
			return lineage.Event{}, fmt.Errorf("decode exec record of %d bytes: %w", len(raw), ErrShortRecord)
		}
		x := (*bpf.McptraceExecEvent)(unsafe.Pointer(&raw[0]))
		if n := int(x.ArgsLen); n > len(raw)-execArgsOffset {
			return lineage.Event{}, fmt.Errorf("decode exec record of %d bytes holding %d bytes of argv: %w", len(raw), n, ErrShortRecord)
		}
		ev.Kind = lineage.KindExec
		ev.Filename = d.intern(cBytes(x.Filename[:min(int(x.FilenameLen), len(x.Filename))]))
		flags := bpf.McptraceEventFlags(h.Flags)
		ev.ArgvTruncated = flags&(bpf.McptraceEventFlagsEVENT_FLAG_ARGS_TRUNCATED|bpf.McptraceEventFlagsEVENT_FLAG_ARGS_UNREADABLE) != 0
		ev.Argv = splitArgs(raw[execArgsOffset : execArgsOffset+int(x.ArgsLen)])
		ev.Stdio = lineage.Stdio{In: stdioKind(x.StdinMode), Out: stdioKind(x.StdoutMode)}
	case bpf.McptraceEventKindEVENT_REQUEST:
		if len(raw) < requestSize {
			return lineage.Event{}, fmt.Errorf("decode request record of %d bytes: %w", len(raw), ErrShortRecord)
		}
		r := (*bpf.McptraceRequestEvent)(unsafe.Pointer(&raw[0]))
		line := unsafe.Slice((*byte)(unsafe.Pointer(&r.Line[0])), len(r.Line))
		ev.Kind = lineage.KindRequest
		// Only the canonical form of a request that starts a container is
		// kept; any other bytes the client sent are dropped here, unread.
		ev.Request = canonicalRequest(line[:min(int(r.Len), len(line))])
	default:
		return lineage.Event{}, fmt.Errorf("decode record: unknown kind %d", h.Kind)
	}
	return ev, nil
}

// cBytes returns b up to its first NUL, as bytes.
func cBytes(b []int8) []byte {
	bs := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(b))), len(b))
	if i := bytes.IndexByte(bs, 0); i >= 0 {
		bs = bs[:i]
	}
	return bs
}

// splitArgs splits a NUL-separated argv block as /proc/PID/cmdline holds
// it. Each argument is a string of its own, never a slice of one string
// for the whole block: a record that keeps some words of a redacted argv
// (a kill record, a session's ID) must not keep the redacted secret's
// bytes reachable with them.
func splitArgs(b []byte) []string {
	b = bytes.TrimSuffix(b, []byte{0})
	if len(b) == 0 {
		return nil
	}
	argv := make([]string, 0, bytes.Count(b, []byte{0})+1)
	for {
		i := bytes.IndexByte(b, 0)
		if i < 0 {
			return append(argv, string(b))
		}
		argv = append(argv, string(b[:i]))
		b = b[i+1:]
	}
}

// canonicalRequest returns the canonical form of a request line the kernel
// read, or "" when it does not start a container (then it is dropped).
func canonicalRequest(line []byte) string {
	id, verb, ok := containers.ParseRequest(string(line))
	if !ok {
		return ""
	}
	return containers.Request(id, verb)
}

// stdioKind reads a record's enum stdio_mode: a file type (S_IFMT >> 12),
// or closed, or unread.
func stdioKind(m uint8) lineage.FileKind {
	switch bpf.McptraceStdioMode(m) {
	case bpf.McptraceStdioModeSTDIO_UNREAD:
		return lineage.FileUnknown
	case bpf.McptraceStdioModeSTDIO_CLOSED:
		return lineage.FileClosed
	}
	return lineage.FileKindOfMode(uint32(m) << 12)
}
