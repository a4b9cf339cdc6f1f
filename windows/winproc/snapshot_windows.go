package winproc

import (
	"errors"
	"fmt"
	"unsafe"

	"golang.org/x/sys/windows"
)

// MaxSnapshot bounds how many processes Snapshot returns.
const MaxSnapshot = 1 << 20

// Snapshot lists the running processes (CreateToolhelp32Snapshot) with
// each one's create time, image path and command line, read through a
// handle opened for the purpose. A process that exits, or denies access,
// while it is read keeps what the snapshot gave (PID, parent PID, image
// name) with Create 0 or ArgvTruncated set: nothing is guessed.
func Snapshot() ([]Entry, error) {
	snap, err := windows.CreateToolhelp32Snapshot(windows.TH32CS_SNAPPROCESS, 0)
	if err != nil {
		return nil, fmt.Errorf("process snapshot: %w", err)
	}
	defer windows.CloseHandle(snap)
	var pe windows.ProcessEntry32
	pe.Size = uint32(unsafe.Sizeof(pe))
	var out []Entry
	for err = windows.Process32First(snap, &pe); err == nil; err = windows.Process32Next(snap, &pe) {
		if len(out) >= MaxSnapshot {
			return out, fmt.Errorf("process snapshot: more than %d processes", MaxSnapshot)
		}
		out = append(out, Describe(pe.ProcessID, pe.ParentProcessID, windows.UTF16ToString(pe.ExeFile[:])))
	}
	if !errors.Is(err, windows.ERROR_NO_MORE_FILES) {
		return out, fmt.Errorf("process snapshot: %w", err)
	}
	return out, nil
}

// Describe reads what a handle tells of process pid: its create time,
// image path, command line and token. What cannot be read stays empty
// and is marked (Create 0, ArgvTruncated, TokenOK false).
func Describe(pid, ppid uint32, image string) Entry {
	e := Entry{PID: pid, PPID: ppid, Image: image, ArgvTruncated: true}
	h, err := OpenForRead(pid, 0)
	if err != nil {
		// Query-limited access is enough for the create time.
		if h, err = open(pid, 0, windows.PROCESS_QUERY_LIMITED_INFORMATION); err != nil {
			return e
		}
	}
	defer h.Close()
	e.Create = h.Create
	if p, err := h.ImagePath(); err == nil {
		e.Path = p
	}
	if line, truncated, err := h.CommandLine(); err == nil {
		if argv, err := SplitCommandLine(line); err == nil {
			e.Argv, e.ArgvTruncated = argv, truncated
		}
	}
	if tok, err := h.Token(); err == nil {
		e.Token, e.TokenOK = tok, true
	}
	return e
}
