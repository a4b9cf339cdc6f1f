package etw

import (
	"encoding/binary"
	"errors"
	"fmt"
	"unicode/utf16"
)

// The provider and what the agent enables of it.
const (
	// ProviderGUID is Microsoft-Windows-Kernel-Process.
	ProviderGUID = "{22FB2CD6-0E7B-422B-A0C7-2FAD1FD0E716}"
	// KeywordProcess is WINEVENT_KEYWORD_PROCESS: process start and stop.
	KeywordProcess = 0x10
	// EventProcessStart and EventProcessStop are the event IDs.
	EventProcessStart = 1
	EventProcessStop  = 2
)

// ProcessStart is a ProcessStart event, whatever its version. Fields a
// version lacks are zero.
type ProcessStart struct {
	Version         uint8
	ProcessID       uint32
	SequenceNumber  uint64 // version 3 on: the process's number this boot
	CreateTime      uint64 // FILETIME: 100 ns since 1601 (UTC)
	ParentProcessID uint32
	// ParentSequenceNumber (version 3 on) names the parent exactly, where
	// the PID alone may have been reused.
	ParentSequenceNumber uint64
	SessionID            uint32
	Flags                uint32 // version 1 on
	ImageName            string // the image's NT path, \Device\HarddiskVolume3\…
	// CreatorProcessID is the event header's ProcessId: the process in
	// whose context the start was logged, the one that created it. The
	// payload's ParentProcessID is what the creator chose to name
	// (PROC_THREAD_ATTRIBUTE_PARENT_PROCESS lets it name any process it
	// can open), so the creator edge follows this one. 0 when not known
	// (a decoded payload alone).
	CreatorProcessID uint32
}

// ProcessStop is a ProcessStop event, whatever its version.
type ProcessStop struct {
	Version        uint8
	ProcessID      uint32
	SequenceNumber uint64 // version 2 on
	CreateTime     uint64 // FILETIME, names the process with ProcessID
	ExitTime       uint64 // FILETIME
	ExitCode       uint32
	ImageName      string // the image's file name, ANSI
}

// Field types of the manifest (win:UInt32 …).
type fieldType uint8

const (
	tUInt32 fieldType = iota + 1
	tUInt64
	tFiletime
	tUnicodeString // NUL-terminated UTF-16LE
	tAnsiString    // NUL-terminated bytes
	tSID           // a SID: revision, count, authority, count sub-authorities
)

type field struct {
	name string
	typ  fieldType
}

// The layouts of each version, in payload order, as the provider's
// manifest declares them.
var (
	startLayouts = [][]field{
		0: {{"ProcessID", tUInt32}, {"CreateTime", tFiletime}, {"ParentProcessID", tUInt32}, {"SessionID", tUInt32}, {"ImageName", tUnicodeString}},
		1: {{"ProcessID", tUInt32}, {"CreateTime", tFiletime}, {"ParentProcessID", tUInt32}, {"SessionID", tUInt32}, {"Flags", tUInt32}, {"ImageName", tUnicodeString}},
		2: {{"ProcessID", tUInt32}, {"CreateTime", tFiletime}, {"ParentProcessID", tUInt32}, {"SessionID", tUInt32}, {"Flags", tUInt32}, {"ImageName", tUnicodeString},
			{"ImageChecksum", tUInt32}, {"TimeDateStamp", tUInt32}, {"PackageFullName", tUnicodeString}, {"PackageRelativeAppId", tUnicodeString}},
		3: {{"ProcessID", tUInt32}, {"ProcessSequenceNumber", tUInt64}, {"CreateTime", tFiletime}, {"ParentProcessID", tUInt32},
			{"ParentProcessSequenceNumber", tUInt64}, {"SessionID", tUInt32}, {"Flags", tUInt32}, {"ProcessTokenElevationType", tUInt32},
			{"ProcessTokenIsElevated", tUInt32}, {"MandatoryLabel", tSID}, {"ImageName", tUnicodeString}, {"ImageChecksum", tUInt32},
			{"TimeDateStamp", tUInt32}, {"PackageFullName", tUnicodeString}, {"PackageRelativeAppId", tUnicodeString}},
	}
	stopLayouts = [][]field{
		0: {{"ProcessID", tUInt32}, {"CreateTime", tFiletime}, {"ExitTime", tFiletime}, {"ExitCode", tUInt32}, {"TokenElevationType", tUInt32},
			{"HandleCount", tUInt32}, {"CommitCharge", tUInt64}, {"CommitPeak", tUInt64}, {"ImageName", tAnsiString}},
		1: {{"ProcessID", tUInt32}, {"CreateTime", tFiletime}, {"ExitTime", tFiletime}, {"ExitCode", tUInt32}, {"TokenElevationType", tUInt32},
			{"HandleCount", tUInt32}, {"CommitCharge", tUInt64}, {"CommitPeak", tUInt64}, {"CPUCycleCount", tUInt64}, {"ReadOperationCount", tUInt32},
			{"WriteOperationCount", tUInt32}, {"ReadTransferKiloBytes", tUInt32}, {"WriteTransferKiloBytes", tUInt32}, {"HardFaultCount", tUInt32},
			{"ImageName", tAnsiString}},
		2: {{"ProcessID", tUInt32}, {"ProcessSequenceNumber", tUInt64}, {"CreateTime", tFiletime}, {"ExitTime", tFiletime}, {"ExitCode", tUInt32},
			{"TokenElevationType", tUInt32}, {"HandleCount", tUInt32}, {"CommitCharge", tUInt64}, {"CommitPeak", tUInt64}, {"CPUCycleCount", tUInt64},
			{"ReadOperationCount", tUInt32}, {"WriteOperationCount", tUInt32}, {"ReadTransferKiloBytes", tUInt32}, {"WriteTransferKiloBytes", tUInt32},
			{"HardFaultCount", tUInt32}, {"ImageName", tAnsiString}},
	}
)

// maxString bounds a decoded string (an NT path is at most 32,767 UTF-16
// units).
const maxString = 32 << 10

// ErrVersion is a version of an event this package has no layout for:
// the caller counts it as a lost event, never reads it as another
// version.
var ErrVersion = errors.New("etw: unknown event version")

// decode reads data as layout and hands each number and string field to
// set (SIDs are checked and skipped). The payload must hold every field;
// bytes after the last are allowed (the provider may append fields in a
// later build without a new version).
func decode(layout []field, data []byte, set func(name string, num uint64, str string)) error {
	off := 0
	need := func(n int, f field) error {
		if len(data)-off < n {
			return fmt.Errorf("etw: field %s at byte %d: payload ends (%d bytes)", f.name, off, len(data))
		}
		return nil
	}
	for _, f := range layout {
		switch f.typ {
		case tUInt32:
			if err := need(4, f); err != nil {
				return err
			}
			set(f.name, uint64(binary.LittleEndian.Uint32(data[off:])), "")
			off += 4
		case tUInt64, tFiletime:
			if err := need(8, f); err != nil {
				return err
			}
			set(f.name, binary.LittleEndian.Uint64(data[off:]), "")
			off += 8
		case tUnicodeString:
			start := off
			for {
				if err := need(2, f); err != nil {
					return fmt.Errorf("%w: unterminated string", err)
				}
				off += 2
				if binary.LittleEndian.Uint16(data[off-2:]) == 0 {
					break
				}
				if (off-start)/2 > maxString {
					return fmt.Errorf("etw: field %s: longer than %d units", f.name, maxString)
				}
			}
			units := make([]uint16, 0, (off-start)/2-1)
			for i := start; i < off-2; i += 2 {
				units = append(units, binary.LittleEndian.Uint16(data[i:]))
			}
			set(f.name, 0, string(utf16.Decode(units)))
		case tAnsiString:
			start := off
			for {
				if err := need(1, f); err != nil {
					return fmt.Errorf("%w: unterminated string", err)
				}
				off++
				if data[off-1] == 0 {
					break
				}
				if off-start > maxString {
					return fmt.Errorf("etw: field %s: longer than %d bytes", f.name, maxString)
				}
			}
			set(f.name, 0, string(data[start:off-1]))
		case tSID:
			if err := need(8, f); err != nil {
				return err
			}
			if data[off] != 1 {
				return fmt.Errorf("etw: field %s: SID revision %d, want 1", f.name, data[off])
			}
			n := 8 + 4*int(data[off+1])
			if err := need(n, f); err != nil {
				return err
			}
			off += n
		}
	}
	return nil
}

// DecodeProcessStart decodes the payload of a ProcessStart event of the
// given version.
func DecodeProcessStart(version uint8, data []byte) (ProcessStart, error) {
	if int(version) >= len(startLayouts) {
		return ProcessStart{}, fmt.Errorf("%w: ProcessStart version %d", ErrVersion, version)
	}
	s := ProcessStart{Version: version}
	err := decode(startLayouts[version], data, func(name string, n uint64, str string) {
		switch name {
		case "ProcessID":
			s.ProcessID = uint32(n)
		case "ProcessSequenceNumber":
			s.SequenceNumber = n
		case "CreateTime":
			s.CreateTime = n
		case "ParentProcessID":
			s.ParentProcessID = uint32(n)
		case "ParentProcessSequenceNumber":
			s.ParentSequenceNumber = n
		case "SessionID":
			s.SessionID = uint32(n)
		case "Flags":
			s.Flags = uint32(n)
		case "ImageName":
			s.ImageName = str
		}
	})
	if err != nil {
		return ProcessStart{}, fmt.Errorf("ProcessStart v%d: %w", version, err)
	}
	return s, nil
}

// DecodeProcessStop decodes the payload of a ProcessStop event of the
// given version.
func DecodeProcessStop(version uint8, data []byte) (ProcessStop, error) {
	if int(version) >= len(stopLayouts) {
		return ProcessStop{}, fmt.Errorf("%w: ProcessStop version %d", ErrVersion, version)
	}
	s := ProcessStop{Version: version}
	err := decode(stopLayouts[version], data, func(name string, n uint64, str string) {
		switch name {
		case "ProcessID":
			s.ProcessID = uint32(n)
		case "ProcessSequenceNumber":
			s.SequenceNumber = n
		case "CreateTime":
			s.CreateTime = n
		case "ExitTime":
			s.ExitTime = n
		case "ExitCode":
			s.ExitCode = uint32(n)
		case "ImageName":
			s.ImageName = str
		}
	})
	if err != nil {
		return ProcessStop{}, fmt.Errorf("ProcessStop v%d: %w", version, err)
	}
	return s, nil
}
