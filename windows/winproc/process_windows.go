package winproc

import (
	"errors"
	"fmt"
	"time"
	"unsafe"

	"golang.org/x/sys/windows"
)

// ErrGone: the process has exited, or its PID now names another process
// (the identity did not match). Either way the process asked for is not
// there to act on.
var ErrGone = errors.New("process gone")

// Access rights a Handle is opened with. accessEnd: read the identity and
// owner, check the job, wait, terminate (IsProcessInJob wants
// PROCESS_QUERY_INFORMATION, not only its limited form). accessRead:
// read the command line too; terminating needs no access to memory.
const (
	accessEnd  = windows.PROCESS_QUERY_INFORMATION | windows.SYNCHRONIZE | windows.PROCESS_TERMINATE
	accessRead = windows.PROCESS_QUERY_LIMITED_INFORMATION | windows.PROCESS_QUERY_INFORMATION | windows.PROCESS_VM_READ
)

// Handle is an open process handle with the process's identity as read
// through it. While it is open the PID cannot name another process.
type Handle struct {
	h      windows.Handle
	PID    uint32
	Create uint64 // FILETIME
}

// Open opens pid for ending it (query, wait, terminate) and reads its
// create time through the handle. When create is not 0 it must match:
// otherwise the PID names another process now and Open returns ErrGone.
func Open(pid uint32, create uint64) (*Handle, error) {
	return open(pid, create, accessEnd)
}

// OpenForRead opens pid for reading its command line and owner.
func OpenForRead(pid uint32, create uint64) (*Handle, error) {
	return open(pid, create, accessRead)
}

func open(pid uint32, create uint64, access uint32) (*Handle, error) {
	if pid == 0 {
		return nil, fmt.Errorf("open process 0: %w", ErrGone)
	}
	h, err := windows.OpenProcess(access, false, pid)
	if err != nil {
		if errors.Is(err, windows.ERROR_INVALID_PARAMETER) {
			return nil, fmt.Errorf("open process %d: %w", pid, ErrGone)
		}
		return nil, fmt.Errorf("open process %d: %w", pid, err)
	}
	ph := &Handle{h: h, PID: pid}
	c, err := createTime(h)
	if err != nil {
		ph.Close()
		return nil, fmt.Errorf("create time of process %d: %w", pid, err)
	}
	ph.Create = c
	if create != 0 && c != create {
		ph.Close()
		return nil, fmt.Errorf("process %d was created at %d, not %d: %w", pid, c, create, ErrGone)
	}
	return ph, nil
}

// FromHandle takes ownership of h, a handle to process pid (one
// CreateProcess returned), and reads its create time.
func FromHandle(h windows.Handle, pid uint32) (*Handle, error) {
	c, err := createTime(h)
	if err != nil {
		return nil, fmt.Errorf("create time of process %d: %w", pid, err)
	}
	return &Handle{h: h, PID: pid, Create: c}, nil
}

func createTime(h windows.Handle) (uint64, error) {
	var c, e, k, u windows.Filetime
	if err := windows.GetProcessTimes(h, &c, &e, &k, &u); err != nil {
		return 0, err
	}
	return filetime(c), nil
}

func filetime(f windows.Filetime) uint64 { return uint64(f.HighDateTime)<<32 | uint64(f.LowDateTime) }

// Raw is the handle, for waiting on it with others. It stays owned by h.
func (h *Handle) Raw() windows.Handle { return h.h }

// Close closes the handle; the PID may be reused from then on.
func (h *Handle) Close() error {
	if h == nil || h.h == 0 {
		return nil
	}
	err := windows.CloseHandle(h.h)
	h.h = 0
	return err
}

// Exited reports whether the process has exited, and its exit code.
func (h *Handle) Exited() (bool, uint32, error) {
	ev, err := windows.WaitForSingleObject(h.h, 0)
	if err != nil {
		return false, 0, fmt.Errorf("wait for process %d: %w", h.PID, err)
	}
	if ev != windows.WAIT_OBJECT_0 {
		return false, 0, nil
	}
	var code uint32
	if err := windows.GetExitCodeProcess(h.h, &code); err != nil {
		return true, 0, fmt.Errorf("exit code of process %d: %w", h.PID, err)
	}
	return true, code, nil
}

// Wait waits up to d for the process to exit and reports whether it did.
func (h *Handle) Wait(d time.Duration) (bool, error) {
	ms := uint32(windows.INFINITE)
	if d >= 0 {
		ms = uint32(min(d.Milliseconds(), int64(windows.INFINITE-1)))
	}
	ev, err := windows.WaitForSingleObject(h.h, ms)
	if err != nil {
		return false, fmt.Errorf("wait for process %d: %w", h.PID, err)
	}
	return ev == windows.WAIT_OBJECT_0, nil
}

// Terminate ends the process with exit code code, through the handle.
// A process that already exited is not an error.
func (h *Handle) Terminate(code uint32) error {
	if err := windows.TerminateProcess(h.h, code); err != nil {
		if done, _, _ := h.Exited(); done {
			return nil
		}
		return fmt.Errorf("terminate process %d: %w", h.PID, err)
	}
	return nil
}

// ImagePath is the full Win32 path of the process's executable.
func (h *Handle) ImagePath() (string, error) {
	buf := make([]uint16, windows.MAX_LONG_PATH)
	n := uint32(len(buf))
	if err := windows.QueryFullProcessImageName(h.h, 0, &buf[0], &n); err != nil {
		return "", fmt.Errorf("image path of process %d: %w", h.PID, err)
	}
	return windows.UTF16ToString(buf[:n]), nil
}

// UserSID is the string SID of the user the process's token runs as.
func (h *Handle) UserSID() (string, error) {
	var tok windows.Token
	if err := windows.OpenProcessToken(h.h, windows.TOKEN_QUERY, &tok); err != nil {
		return "", fmt.Errorf("token of process %d: %w", h.PID, err)
	}
	defer tok.Close()
	u, err := tok.GetTokenUser()
	if err != nil {
		return "", fmt.Errorf("token user of process %d: %w", h.PID, err)
	}
	return u.User.Sid.String(), nil
}

// Self is the current process's PID and create time.
func Self() (uint32, uint64, error) {
	c, err := createTime(windows.CurrentProcess())
	if err != nil {
		return 0, 0, fmt.Errorf("create time of this process: %w", err)
	}
	return windows.GetCurrentProcessId(), c, nil
}

// SystemClock is the lineage clock of this boot: the kernel's boot time
// (NtQuerySystemInformation, SystemTimeOfDayInformation), read exactly,
// so every reader agrees on it. Windows moves it when the system time is
// set; identities read before and after such a change differ.
func SystemClock() (Clock, error) {
	var info struct {
		BootTime, CurrentTime, TimeZoneBias int64
		TimeZoneID, Reserved                uint32
		BootTimeBias, SleepTimeBias         uint64
	}
	if err := windows.NtQuerySystemInformation(windows.SystemTimeOfDayInformation, unsafe.Pointer(&info), uint32(unsafe.Sizeof(info)), nil); err != nil {
		return Clock{}, fmt.Errorf("boot time (SystemTimeOfDayInformation): %w", err)
	}
	return Clock{Boot: uint64(info.BootTime)}, nil
}

// Now is the present on c, ns since boot.
func (c Clock) Now() uint64 { return c.Since(FiletimeNow()) }

// FiletimeNow is the present as a FILETIME, as process times and events
// carry it.
func FiletimeNow() uint64 {
	var ft windows.Filetime
	windows.GetSystemTimeAsFileTime(&ft)
	return filetime(ft)
}
