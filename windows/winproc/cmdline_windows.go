package winproc

import (
	"errors"
	"fmt"
	"unsafe"

	"golang.org/x/sys/windows"
)

// ErrNotStarted says a process has no PEB or no process parameters yet:
// it was created but has not set them up (seen under wine, whose new
// processes build their own PEB after CreateProcess returns). Asked
// again a moment later, it has them.
var ErrNotStarted = errors.New("the process has not set up its PEB yet")

// MaxCommandLine bounds a command line read from a process, in UTF-16
// units: Windows' own limit (32,767 characters), so nothing real is cut.
const MaxCommandLine = 32767

// CommandLine reads the process's command line from its PEB: the
// ProcessParameters pointer of the PEB that ProcessBasicInformation
// locates, then the CommandLine string those parameters hold. The handle
// must have been opened with OpenForRead. A line longer than
// MaxCommandLine is cut there and truncated is true.
//
// The command line is what the process was started with, unless it has
// rewritten its own PEB since (a process can): read it as soon as the
// process starts.
func (h *Handle) CommandLine() (line string, truncated bool, err error) {
	var pbi windows.PROCESS_BASIC_INFORMATION
	if err := windows.NtQueryInformationProcess(h.h, windows.ProcessBasicInformation, unsafe.Pointer(&pbi), uint32(unsafe.Sizeof(pbi)), nil); err != nil {
		return "", false, fmt.Errorf("command line of process %d: basic information: %w", h.PID, err)
	}
	if pbi.PebBaseAddress == nil {
		return "", false, fmt.Errorf("command line of process %d: no PEB: %w", h.PID, ErrNotStarted)
	}
	var peb windows.PEB
	pebAt := uintptr(unsafe.Pointer(pbi.PebBaseAddress))
	// Only up to ProcessParameters: the rest of the PEB is not needed.
	if err := h.read(pebAt, unsafe.Pointer(&peb), unsafe.Offsetof(peb.ProcessParameters)+unsafe.Sizeof(peb.ProcessParameters)); err != nil {
		return "", false, fmt.Errorf("command line of process %d: PEB: %w", h.PID, err)
	}
	if peb.ProcessParameters == nil {
		return "", false, fmt.Errorf("command line of process %d: no process parameters: %w", h.PID, ErrNotStarted)
	}
	var params windows.RTL_USER_PROCESS_PARAMETERS
	paramsAt := uintptr(unsafe.Pointer(peb.ProcessParameters))
	if err := h.read(paramsAt, unsafe.Pointer(&params), unsafe.Offsetof(params.CommandLine)+unsafe.Sizeof(params.CommandLine)); err != nil {
		return "", false, fmt.Errorf("command line of process %d: process parameters: %w", h.PID, err)
	}
	n := int(params.CommandLine.Length / 2)
	if n > MaxCommandLine {
		n, truncated = MaxCommandLine, true
	}
	if n == 0 {
		return "", truncated, nil
	}
	if params.CommandLine.Buffer == nil {
		return "", false, fmt.Errorf("command line of process %d: no buffer", h.PID)
	}
	buf := make([]uint16, n)
	if err := h.read(uintptr(unsafe.Pointer(params.CommandLine.Buffer)), unsafe.Pointer(&buf[0]), uintptr(2*n)); err != nil {
		return "", false, fmt.Errorf("command line of process %d: %w", h.PID, err)
	}
	return windows.UTF16ToString(buf), truncated, nil
}

// read copies size bytes at addr in the process into dst, all or nothing.
func (h *Handle) read(addr uintptr, dst unsafe.Pointer, size uintptr) error {
	var got uintptr
	if err := windows.ReadProcessMemory(h.h, addr, (*byte)(dst), size, &got); err != nil {
		return err
	}
	if got != size {
		return fmt.Errorf("read %d of %d bytes at %#x", got, size, addr)
	}
	return nil
}

// SplitCommandLine splits a command line as CommandLineToArgvW does (the
// rule the Microsoft C runtime follows for most programs).
func SplitCommandLine(line string) ([]string, error) {
	if line == "" {
		return nil, nil
	}
	argv, err := windows.DecomposeCommandLine(line)
	if err != nil {
		return nil, fmt.Errorf("split command line: %w", err)
	}
	return argv, nil
}
