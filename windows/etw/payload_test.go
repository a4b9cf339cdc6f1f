package etw

import (
	"encoding/binary"
	"unicode/utf16"
)

// payload writes an event payload field by field, as the kernel lays it
// out: little-endian numbers, NUL-terminated UTF-16LE and ANSI strings,
// SIDs whole. The tests write each version's fields in the order the
// provider's manifest lists them, independently of the decoder's tables.
type payload []byte

func (p payload) u32(v uint32) payload { return binary.LittleEndian.AppendUint32(p, v) }
func (p payload) u64(v uint64) payload { return binary.LittleEndian.AppendUint64(p, v) }
func (p payload) utf16z(s string) payload {
	for _, u := range utf16.Encode([]rune(s)) {
		p = binary.LittleEndian.AppendUint16(p, u)
	}
	return binary.LittleEndian.AppendUint16(p, 0)
}
func (p payload) ansiz(s string) payload { return append(append(p, s...), 0) }

// sid is S-1-16-8192, the medium mandatory label.
func (p payload) sid() payload {
	p = append(p, 1, 1, 0, 0, 0, 0, 0, 16)
	return binary.LittleEndian.AppendUint32(p, 8192)
}

// startV builds a ProcessStart payload of version v from s, as the
// manifest orders the fields (version 3: sequence numbers, elevation and
// the mandatory label; version 2: checksum, time stamp, package names).
func startV(v uint8, s ProcessStart) payload {
	var p payload
	switch v {
	case 0:
		p = p.u32(s.ProcessID).u64(s.CreateTime).u32(s.ParentProcessID).u32(s.SessionID).utf16z(s.ImageName)
	case 1:
		p = p.u32(s.ProcessID).u64(s.CreateTime).u32(s.ParentProcessID).u32(s.SessionID).u32(s.Flags).utf16z(s.ImageName)
	case 2:
		p = p.u32(s.ProcessID).u64(s.CreateTime).u32(s.ParentProcessID).u32(s.SessionID).u32(s.Flags).utf16z(s.ImageName).
			u32(0x1234).u32(0x5678).utf16z("").utf16z("")
	case 3:
		p = p.u32(s.ProcessID).u64(s.SequenceNumber).u64(s.CreateTime).u32(s.ParentProcessID).u64(s.ParentSequenceNumber).
			u32(s.SessionID).u32(s.Flags).u32(3).u32(0).sid().utf16z(s.ImageName).u32(0x1234).u32(0x5678).
			utf16z("Microsoft.App_1.0_x64__8wekyb3d8bbwe").utf16z("App")
	}
	return p
}

// stopV builds a ProcessStop payload of version v from s.
func stopV(v uint8, s ProcessStop) payload {
	var p payload
	switch v {
	case 0:
		p = p.u32(s.ProcessID).u64(s.CreateTime).u64(s.ExitTime).u32(s.ExitCode).u32(1).u32(42).u64(1 << 20).u64(2 << 20).ansiz(s.ImageName)
	case 1:
		p = p.u32(s.ProcessID).u64(s.CreateTime).u64(s.ExitTime).u32(s.ExitCode).u32(1).u32(42).u64(1 << 20).u64(2 << 20).
			u64(123456789).u32(10).u32(20).u32(30).u32(40).u32(5).ansiz(s.ImageName)
	case 2:
		p = p.u32(s.ProcessID).u64(s.SequenceNumber).u64(s.CreateTime).u64(s.ExitTime).u32(s.ExitCode).u32(1).u32(42).u64(1 << 20).u64(2 << 20).
			u64(123456789).u32(10).u32(20).u32(30).u32(40).u32(5).ansiz(s.ImageName)
	}
	return p
}
