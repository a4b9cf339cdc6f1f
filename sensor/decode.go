package sensor

import (
	"bytes"
	"errors"
	"fmt"
	"unsafe"

	"github.com/mcptrace/mcptrace/bpf"
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
)

// record is one decoded ring buffer record: a process event or a barrier.
type record struct {
	ev        lineage.Event
	isBarrier bool
	barrier   uint64 // the barrier's sequence number
}

// decodeRecord decodes a process event (Decode) or a barrier record.
func decodeRecord(raw []byte) (record, error) {
	if len(raw) >= headerSize && bpf.McptraceEventKind((*bpf.McptraceEvent)(unsafe.Pointer(&raw[0])).Kind) == bpf.McptraceEventKindEVENT_BARRIER {
		if len(raw) < barrierSize {
			return record{}, fmt.Errorf("decode barrier record of %d bytes: %w", len(raw), ErrShortRecord)
		}
		b := (*bpf.McptraceBarrierEvent)(unsafe.Pointer(&raw[0]))
		return record{isBarrier: true, barrier: b.Seq}, nil
	}
	ev, err := Decode(raw)
	return record{ev: ev}, err
}

// ErrShortRecord is returned by Decode for a record smaller than its kind's layout.
var ErrShortRecord = errors.New("short record")

// Decode turns one ring buffer record into an event. The record layouts are
// the C structs of bpf/events.h, through the Go types bpf2go generated.
func Decode(raw []byte) (lineage.Event, error) {
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
		Comm:     cString(h.Comm[:]),
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
		ev.Filename = cString(x.Filename[:min(int(x.FilenameLen), len(x.Filename))])
		flags := bpf.McptraceEventFlags(h.Flags)
		ev.ArgvTruncated = flags&(bpf.McptraceEventFlagsEVENT_FLAG_ARGS_TRUNCATED|bpf.McptraceEventFlagsEVENT_FLAG_ARGS_UNREADABLE) != 0
		ev.Argv = splitArgs(raw[execArgsOffset : execArgsOffset+int(x.ArgsLen)])
	default:
		return lineage.Event{}, fmt.Errorf("decode record: unknown kind %d", h.Kind)
	}
	return ev, nil
}

func cString(b []int8) string {
	bs := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(b))), len(b))
	if i := bytes.IndexByte(bs, 0); i >= 0 {
		bs = bs[:i]
	}
	return string(bs)
}

// splitArgs splits a NUL-separated argv block as /proc/PID/cmdline holds it.
func splitArgs(b []byte) []string {
	b = bytes.TrimSuffix(b, []byte{0})
	if len(b) == 0 {
		return nil
	}
	parts := bytes.Split(b, []byte{0})
	argv := make([]string, len(parts))
	for i, p := range parts {
		argv[i] = string(p)
	}
	return argv
}
