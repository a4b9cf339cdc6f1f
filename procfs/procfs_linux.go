package procfs

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/mcptrace/mcptrace/lineage"
)

// pfKthread is PF_KTHREAD in the flags field of /proc/PID/stat.
const pfKthread = 0x00200000

// Scan reads every process under root (threads are not listed there). A
// process that exits during the scan is skipped; any other error ends the
// scan and is returned wrapped, with no snapshots, since a partial scan
// would make Repair mark the missing processes exited. Snapshots are sorted
// by PID.
//
// Take the graph's readAt (BootTimeNow) before calling Scan.
func Scan(root string) ([]lineage.Snapshot, error) {
	if root == "" {
		root = DefaultRoot
	}
	d, err := os.Open(root)
	if err != nil {
		return nil, fmt.Errorf("procfs: %w", err)
	}
	names, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		return nil, fmt.Errorf("procfs: list %s: %w", root, err)
	}
	pids := make([]uint32, 0, len(names))
	for _, name := range names {
		if pid, err := strconv.ParseUint(name, 10, 32); err == nil && pid > 0 {
			pids = append(pids, uint32(pid))
		}
	}
	slices.Sort(pids)
	snaps := make([]lineage.Snapshot, 0, len(pids))
	for _, pid := range pids {
		s, err := Read(root, pid)
		if errors.Is(err, fs.ErrNotExist) {
			continue // exited since the listing
		}
		if err != nil {
			return nil, err
		}
		snaps = append(snaps, s)
	}
	return snaps, nil
}

// Read reads one process. When the process does not exist or has exited
// (including a zombie waiting to be reaped: its exit already happened), the
// error wraps fs.ErrNotExist. A PID that names a thread rather than a
// process is reported the same way.
func Read(root string, pid uint32) (lineage.Snapshot, error) {
	snap, _, err := ReadCreds(root, pid)
	return snap, err
}

// ReadCreds is Read with the process's four user IDs, read through the
// same handle: the API checks a socket peer's effective uid with it.
func ReadCreds(root string, pid uint32) (lineage.Snapshot, UIDs, error) {
	snap, ss, err := read(root, pid)
	return snap, ss.uids, err
}

func read(root string, pid uint32) (lineage.Snapshot, status, error) {
	if root == "" {
		root = DefaultRoot
	}
	dir := filepath.Join(root, strconv.FormatUint(uint64(pid), 10))
	// Every file is read through this one handle on the process directory:
	// if the PID is recycled mid-read, reads fail instead of mixing two
	// processes.
	r, err := os.OpenRoot(dir)
	if err != nil {
		return lineage.Snapshot{}, status{}, readErr(pid, err)
	}
	defer r.Close()

	b, err := r.ReadFile("stat")
	if err != nil {
		return lineage.Snapshot{}, status{}, readErr(pid, err)
	}
	st, err := parseStat(b)
	if err != nil {
		return lineage.Snapshot{}, status{}, fmt.Errorf("procfs: %s/stat: %w", dir, err)
	}
	if st.PID != pid {
		return lineage.Snapshot{}, status{}, fmt.Errorf("procfs: %s/stat names pid %d", dir, st.PID)
	}

	b, err = r.ReadFile("status")
	if err != nil {
		return lineage.Snapshot{}, status{}, readErr(pid, err)
	}
	ss, err := parseStatus(b)
	if err != nil {
		return lineage.Snapshot{}, status{}, fmt.Errorf("procfs: %s/status: %w", dir, err)
	}
	if ss.tgid != 0 && ss.tgid != pid {
		return lineage.Snapshot{}, status{}, fmt.Errorf("procfs: %d is a thread of process %d, not a process: %w", pid, ss.tgid, fs.ErrNotExist)
	}
	// A zombie has exited (its exit event fired); only its parent's wait
	// is pending. A thread-group leader that exited while other threads
	// run also shows Z, but its process is alive: it has other threads
	// (briefly so too while exit_group takes them down; the process exits
	// when the last one leaves).
	if st.State == 'X' || (st.State == 'Z' && ss.threads <= 1) {
		return lineage.Snapshot{}, status{}, fmt.Errorf("procfs: process %d has exited (state %c): %w", pid, st.State, fs.ErrNotExist)
	}

	b, err = r.ReadFile("cmdline")
	if err != nil {
		return lineage.Snapshot{}, status{}, readErr(pid, err)
	}
	// exe is unreadable for kernel threads, exited mms and without ptrace
	// access: not fatal. A file deleted (or replaced by an upgrade) since
	// the exec reads with " (deleted)" appended; the name the process
	// executed is without it, as the kernel reported it at exec, so rules
	// see the same file whichever way the process became known.
	exe, exeErr := r.Readlink("exe")
	exe = strings.TrimSuffix(exe, " (deleted)")

	return lineage.Snapshot{
		ID:       lineage.ID{PID: pid, Start: st.StartTicks * lineage.TickNS},
		PPID:     st.PPID,
		UID:      ss.uid,
		Comm:     st.Comm,
		Filename: exe,
		Argv:     splitCmdline(b),
		Kernel:   isKernelThread(st, exeErr),
	}, ss, nil
}

// BootTimeNow returns CLOCK_BOOTTIME in nanoseconds: the clock of the
// kernel's task start_boottime, of lineage event times and of /proc start
// times (in ticks).
func BootTimeNow() uint64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		return 0 // CLOCK_BOOTTIME exists since Linux 2.6.39
	}
	return uint64(ts.Nano())
}

// readErr wraps a read error; a process that is gone (ENOENT, or ESRCH
// through a handle on an exited process) wraps fs.ErrNotExist.
func readErr(pid uint32, err error) error {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("procfs: process %d is gone: %w", pid, err)
	case errors.Is(err, syscall.ESRCH):
		return fmt.Errorf("procfs: process %d is gone: %w: %w", pid, err, fs.ErrNotExist)
	}
	return fmt.Errorf("procfs: process %d: %w", pid, err)
}

// Stat is what mcptrace reads of /proc/PID/stat (proc(5)).
type Stat struct {
	PID   uint32
	Comm  string
	State byte // R, S, D, Z, X, ...
	PPID  uint32
	Flags uint64 // PF_* flags
	// StartTicks is the start time in clock ticks since boot
	// (lineage.TickNS each).
	StartTicks uint64
}

// ReadStat reads root/PID/stat. Unlike Read it reports a zombie too (State
// 'Z'): tests and callers that walk parent links need it. A process that
// is gone wraps fs.ErrNotExist.
func ReadStat(root string, pid uint32) (Stat, error) {
	if root == "" {
		root = DefaultRoot
	}
	path := filepath.Join(root, strconv.FormatUint(uint64(pid), 10), "stat")
	b, err := os.ReadFile(path)
	if err != nil {
		return Stat{}, readErr(pid, err)
	}
	st, err := parseStat(b)
	if err != nil {
		return Stat{}, fmt.Errorf("procfs: %s: %w", path, err)
	}
	return st, nil
}

// kthreaddPID is the parent of every kernel thread.
const kthreaddPID = 2

// isKernelThread: PF_KTHREAD is set, or the process has no executable and
// kthreadd is its parent.
func isKernelThread(st Stat, exeErr error) bool {
	return st.Flags&pfKthread != 0 || (errors.Is(exeErr, fs.ErrNotExist) && st.PPID == kthreaddPID)
}

// parseStat parses /proc/PID/stat (proc(5)). comm may hold spaces and
// parentheses, so it runs from the first '(' to the last ')'.
func parseStat(b []byte) (Stat, error) {
	var st Stat
	open := bytes.IndexByte(b, '(')
	end := bytes.LastIndexByte(b, ')')
	if open < 0 || end < open {
		return st, errors.New("malformed: no (comm)")
	}
	pid, err := strconv.ParseUint(string(bytes.TrimSpace(b[:open])), 10, 32)
	if err != nil {
		return st, fmt.Errorf("malformed pid: %w", err)
	}
	st.PID = uint32(pid)
	st.Comm = string(b[open+1 : end])
	// Fields after comm, numbered from 3 (state) as in proc(5).
	f := strings.Fields(string(b[end+1:]))
	const (
		fState = 3 - 3
		fPPID  = 4 - 3
		fFlags = 9 - 3
		fStart = 22 - 3
	)
	if len(f) <= fStart || len(f[fState]) != 1 {
		return st, fmt.Errorf("malformed: %d fields after comm", len(f))
	}
	st.State = f[fState][0]
	ppid, err := strconv.ParseUint(f[fPPID], 10, 32)
	if err != nil {
		return st, fmt.Errorf("malformed ppid: %w", err)
	}
	st.PPID = uint32(ppid)
	if st.Flags, err = strconv.ParseUint(f[fFlags], 10, 64); err != nil {
		return st, fmt.Errorf("malformed flags: %w", err)
	}
	if st.StartTicks, err = strconv.ParseUint(f[fStart], 10, 64); err != nil {
		return st, fmt.Errorf("malformed starttime: %w", err)
	}
	return st, nil
}

type status struct {
	uid     uint32 // real
	uids    UIDs
	tgid    uint32
	threads int
}

// UIDs are a process's user IDs as the Uid: line of /proc/PID/status gives
// them: real, effective, saved set-user-ID and file system.
type UIDs struct {
	Real, Effective, Saved, FS uint32
}

// ReadUIDs reads the user IDs of process pid from root/PID/status. The
// caller proves the file belongs to the process it means (a pidfd held on
// a live process pins its PID). A process that is gone wraps
// fs.ErrNotExist.
func ReadUIDs(root string, pid uint32) (UIDs, error) {
	if root == "" {
		root = DefaultRoot
	}
	b, err := os.ReadFile(filepath.Join(root, strconv.FormatUint(uint64(pid), 10), "status"))
	if err != nil {
		return UIDs{}, readErr(pid, err)
	}
	ss, err := parseStatus(b)
	if err != nil {
		return UIDs{}, fmt.Errorf("procfs: %d/status: %w", pid, err)
	}
	return ss.uids, nil
}

// parseStatus takes the UIDs, the thread group and the thread count from
// /proc/PID/status.
func parseStatus(b []byte) (status, error) {
	var ss status
	haveUID := false
	for line := range strings.Lines(string(b)) {
		key, val, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		f := strings.Fields(val)
		if len(f) == 0 {
			continue
		}
		switch key {
		case "Uid":
			if len(f) != 4 {
				return ss, fmt.Errorf("malformed Uid: %d fields, want 4", len(f))
			}
			var ids [4]uint32
			for i := range ids {
				id, err := strconv.ParseUint(f[i], 10, 32)
				if err != nil {
					return ss, fmt.Errorf("malformed Uid: %w", err)
				}
				ids[i] = uint32(id)
			}
			ss.uids = UIDs{Real: ids[0], Effective: ids[1], Saved: ids[2], FS: ids[3]}
			ss.uid, haveUID = ids[0], true
		case "Tgid":
			tgid, err := strconv.ParseUint(f[0], 10, 32)
			if err != nil {
				return ss, fmt.Errorf("malformed Tgid: %w", err)
			}
			ss.tgid = uint32(tgid)
		case "Threads":
			n, err := strconv.Atoi(f[0])
			if err != nil {
				return ss, fmt.Errorf("malformed Threads: %w", err)
			}
			ss.threads = n
		}
	}
	if !haveUID {
		return ss, errors.New("no Uid line")
	}
	return ss, nil
}

// splitCmdline splits /proc/PID/cmdline on NUL. The terminating NUL makes a
// trailing empty element, which is dropped; a command line a process
// rewrote with spaces and no NUL stays one element. Empty for kernel
// threads and zombies.
func splitCmdline(b []byte) []string {
	if len(b) == 0 {
		return nil
	}
	argv := strings.Split(string(b), "\x00")
	if argv[len(argv)-1] == "" {
		argv = argv[:len(argv)-1]
	}
	return argv
}
