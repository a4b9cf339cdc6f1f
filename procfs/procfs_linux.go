package procfs

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
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
// Processes are read by up to scanWorkers goroutines (no more than
// GOMAXPROCS), each reusing one buffer for every file it reads.
//
// Take the graph's readAt (BootTimeNow) before calling Scan.
func Scan(root string) ([]lineage.Snapshot, error) {
	if root == "" {
		root = DefaultRoot
	}
	pids, err := PIDs(root)
	if err != nil {
		return nil, err
	}
	snaps := make([]lineage.Snapshot, len(pids))
	read := make([]bool, len(pids))
	err = Each(len(pids), func(i int, rd *Reader) error {
		s, _, err := rd.read(root, pids[i])
		if errors.Is(err, fs.ErrNotExist) {
			return nil // exited since the listing
		}
		if err != nil {
			return err
		}
		snaps[i], read[i] = s, true
		return nil
	})
	if err != nil {
		return nil, err
	}
	out := snaps[:0]
	for i := range snaps {
		if read[i] {
			out = append(out, snaps[i])
		}
	}
	clear(snaps[len(out):])
	return out, nil
}

// PIDs lists the processes of root ("" for DefaultRoot), in order.
func PIDs(root string) ([]uint32, error) {
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
	return pids, nil
}

// Each runs f(0, rd) … f(n-1, rd) on up to scanWorkers goroutines, each
// with a Reader of its own, and returns the first error (the calls not
// begun by then are skipped): how Scan reads, and how a caller reads
// many processes or files of /proc beside other work.
func Each(n int, f func(i int, rd *Reader) error) error {
	var (
		next    atomic.Int64
		failed  atomic.Bool
		errOnce sync.Once
		first   error
		wg      sync.WaitGroup
	)
	for range max(1, min(scanWorkers, runtime.GOMAXPROCS(0), n)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var rd Reader
			for !failed.Load() {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := f(i, &rd); err != nil {
					errOnce.Do(func() { first = err })
					failed.Store(true)
					return
				}
			}
		}()
	}
	wg.Wait()
	return first
}

// scanWorkers bounds the goroutines of one Each: reading /proc is system
// calls, so more than the CPUs only adds contention.
const scanWorkers = 4

// Read reads one process. When the process does not exist or has exited
// (including a zombie waiting to be reaped: its exit already happened), the
// error wraps fs.ErrNotExist. A PID that names a thread rather than a
// process is reported the same way.
func Read(root string, pid uint32) (lineage.Snapshot, error) {
	var rd Reader
	snap, _, err := rd.read(root, pid)
	return snap, err
}

// ReadCreds is Read with the process's four user IDs, read through the
// same handle: the API checks a socket peer's effective uid with it.
func ReadCreds(root string, pid uint32) (lineage.Snapshot, UIDs, error) {
	var rd Reader
	snap, ss, err := rd.read(root, pid)
	return snap, ss.uids, err
}

// Reader reads the files of /proc/PID with plain system calls into one
// buffer it reuses; what it returns is copied out of the buffer. A Reader
// is not safe for concurrent use. Its methods are this package's: outside
// it, a Reader is what Each gives each of its goroutines.
type Reader struct {
	buf []byte
}

// readBufSize is a reader's first buffer: a stat or status file, or a
// typical command line, in one read(2).
const readBufSize = 4096

func (rd *Reader) read(root string, pid uint32) (lineage.Snapshot, status, error) {
	if root == "" {
		root = DefaultRoot
	}
	dir := filepath.Join(root, strconv.FormatUint(uint64(pid), 10))
	// Every file is read through this one handle on the process directory:
	// if the PID is recycled mid-read, reads fail instead of mixing two
	// processes.
	dfd, err := openDir(dir)
	if err != nil {
		return lineage.Snapshot{}, status{}, readErr(pid, err)
	}
	defer unix.Close(dfd)

	b, err := rd.file(dfd, "stat")
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

	b, err = rd.file(dfd, "status")
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
	if HasExited(st.State == 'X', st.State == 'Z', ss.threads) {
		return lineage.Snapshot{}, status{}, fmt.Errorf("procfs: process %d has exited (state %c): %w", pid, st.State, fs.ErrNotExist)
	}

	b, err = rd.file(dfd, "cmdline")
	if err != nil {
		return lineage.Snapshot{}, status{}, readErr(pid, err)
	}
	argv := splitCmdline(b)
	// exe is unreadable for kernel threads, exited mms and without ptrace
	// access: not fatal.
	exe, exeErr := rd.link(dfd, "exe")
	exe = executable(exe)

	return lineage.Snapshot{
		ID:       lineage.ID{PID: pid, Start: st.StartTicks * lineage.TickNS},
		PPID:     st.PPID,
		UID:      ss.uid,
		Comm:     st.Comm,
		Filename: exe,
		Argv:     argv,
		Kernel:   isKernelThread(st, exeErr),
		Stdio:    stdioOf(dfd),
	}, ss, nil
}

// HasExited says whether a process whose leader is dead (being reaped,
// state X) or a zombie (state Z) with threads live threads has exited.
// A zombie has exited (its exit event fired); only its parent's wait is
// pending. A thread-group leader that exited while other threads run
// also shows Z, but its process is alive: it has other threads (briefly
// so too while exit_group takes them down; the process exits when the
// last one leaves).
func HasExited(dead, zombie bool, threads int) bool {
	return dead || (zombie && threads <= 1)
}

// ReadExe returns the path of the executable of process pid (the target
// of root/PID/exe, as Read gives it), in one readlink: no handle on the
// process directory, so it does not prove which process the path is of
// (a PID recycled meanwhile lends its new process's): a caller checks
// the process's identity before and after.
func ReadExe(root string, pid uint32) (string, error) {
	if root == "" {
		root = DefaultRoot
	}
	name := root + "/" + strconv.FormatUint(uint64(pid), 10) + "/exe"
	buf := make([]byte, 256)
	for {
		n, err := unix.Readlink(name, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return "", readErr(pid, &fs.PathError{Op: "readlink", Path: name, Err: err})
		}
		if n < len(buf) {
			return executable(string(buf[:n])), nil
		}
		buf = make([]byte, 2*len(buf)) // maybe cut: try a larger buffer
	}
}

// executable is the path a process executed, from its exe link: a file
// deleted (or replaced by an upgrade) since the exec reads with
// " (deleted)" appended; the name the process executed is without it,
// as the kernel reported it at exec, so rules see the same file
// whichever way the process became known.
func executable(link string) string { return strings.TrimSuffix(link, " (deleted)") }

// stdioOf returns what the fd 0 and fd 1 of the process directory dfd
// are; unknown when its fd directory cannot be read.
func stdioOf(dfd int) lineage.Stdio {
	var st unix.Stat_t
	if fstatat(dfd, "fd", &st) != nil {
		return lineage.Stdio{}
	}
	return lineage.Stdio{In: fdKind(dfd, "fd/0"), Out: fdKind(dfd, "fd/1")}
}

func fstatat(dfd int, name string, st *unix.Stat_t) error {
	for {
		if err := unix.Fstatat(dfd, name, st, 0); err != unix.EINTR {
			return err
		}
	}
}

// fdKind returns the kind of file the descriptor link name (fd/N) of the
// process directory dfd leads to; FileClosed when there is none,
// FileUnknown when it cannot be read (a kernel thread, no ptrace access).
func fdKind(dfd int, name string) lineage.FileKind {
	var st unix.Stat_t
	switch err := fstatat(dfd, name, &st); {
	case err == unix.ENOENT:
		return lineage.FileClosed
	case err != nil:
		return lineage.FileUnknown
	}
	return lineage.FileKindOfMode(st.Mode)
}

// openDir opens a process directory as a handle for openat.
func openDir(dir string) (int, error) {
	for {
		fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return -1, &fs.PathError{Op: "open", Path: dir, Err: err}
		}
		return fd, nil
	}
}

// file reads the file name of the directory dfd whole into rd's buffer
// and returns it; the bytes are valid until the next call.
func (rd *Reader) file(dfd int, name string) ([]byte, error) {
	fd, err := unix.Openat(dfd, name, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	for err == unix.EINTR {
		fd, err = unix.Openat(dfd, name, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	}
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: name, Err: err}
	}
	defer unix.Close(fd)
	if rd.buf == nil {
		rd.buf = make([]byte, readBufSize)
	}
	n := 0
	for {
		if n == len(rd.buf) {
			rd.buf = slices.Grow(rd.buf, len(rd.buf))[:2*len(rd.buf)]
		}
		m, err := unix.Read(fd, rd.buf[n:])
		switch {
		case err == unix.EINTR:
			continue
		case err != nil:
			return nil, &fs.PathError{Op: "read", Path: name, Err: err}
		case m == 0:
			return rd.buf[:n], nil
		}
		n += m
	}
}

// link reads the symbolic link name of the directory dfd.
func (rd *Reader) link(dfd int, name string) (string, error) {
	if rd.buf == nil {
		rd.buf = make([]byte, readBufSize)
	}
	for {
		n, err := unix.Readlinkat(dfd, name, rd.buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return "", &fs.PathError{Op: "readlink", Path: name, Err: err}
		}
		if n < len(rd.buf) {
			return string(rd.buf[:n]), nil
		}
		rd.buf = make([]byte, 2*len(rd.buf)) // maybe cut: try a larger buffer
	}
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

// BootID returns the id of this boot (root/sys/kernel/random/boot_id),
// which changes at every reboot: boot-clock times from different boots
// are not comparable.
func BootID(root string) (string, error) {
	if root == "" {
		root = DefaultRoot
	}
	b, err := os.ReadFile(filepath.Join(root, "sys/kernel/random/boot_id"))
	if err != nil {
		return "", fmt.Errorf("procfs: reading the boot id: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
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

// Threads lists the thread IDs of process pid (root/PID/task). A process
// that is gone wraps fs.ErrNotExist.
func Threads(root string, pid uint32) ([]uint32, error) {
	if root == "" {
		root = DefaultRoot
	}
	ents, err := os.ReadDir(filepath.Join(root, strconv.FormatUint(uint64(pid), 10), "task"))
	if err != nil {
		return nil, readErr(pid, err)
	}
	tids := make([]uint32, 0, len(ents))
	for _, e := range ents {
		if tid, err := strconv.ParseUint(e.Name(), 10, 32); err == nil {
			tids = append(tids, uint32(tid))
		}
	}
	return tids, nil
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
	const (
		fState   = 3
		fPPID    = 4
		fSession = 6
		fFlags   = 9
		fNice    = 19
		fStart   = 22
	)
	var f [fStart + 1][]byte
	if err := statFields(b[end+1:], f[:]); err != nil {
		return st, err
	}
	if len(f[fState]) != 1 {
		return st, fmt.Errorf("malformed state %q", f[fState])
	}
	st.State = f[fState][0]
	ppid, err := parseUint(f[fPPID], 32)
	if err != nil {
		return st, fmt.Errorf("malformed ppid: %w", err)
	}
	st.PPID = uint32(ppid)
	// The session ID prints as a signed number, and reads -1 where the
	// kernel has none to show: 0, unknown.
	if sid, err := strconv.ParseInt(string(f[fSession]), 10, 64); err != nil {
		return st, fmt.Errorf("malformed session: %w", err)
	} else if sid > 0 && sid <= 1<<32-1 {
		st.Session = uint32(sid)
	}
	if st.Flags, err = parseUint(f[fFlags], 64); err != nil {
		return st, fmt.Errorf("malformed flags: %w", err)
	}
	neg := len(f[fNice]) > 0 && f[fNice][0] == '-'
	nice, err := parseUint(bytes.TrimPrefix(f[fNice], []byte{'-'}), 5)
	if err != nil || nice > 20 {
		return st, fmt.Errorf("malformed nice %q", f[fNice])
	}
	st.Nice = int(nice)
	if neg {
		st.Nice = -st.Nice
	}
	if st.StartTicks, err = parseUint(f[fStart], 64); err != nil {
		return st, fmt.Errorf("malformed starttime: %w", err)
	}
	return st, nil
}

// statFields splits what follows comm in a stat file into f, numbered
// from 3 (state) as in proc(5): f[3] up to f[len(f)-1]. It fails when
// there are fewer fields.
func statFields(afterComm []byte, f [][]byte) error {
	const first = 3
	n := first
	for rest := afterComm; n < len(f); n++ {
		var fld []byte
		if fld, rest = nextField(rest); fld == nil {
			return fmt.Errorf("malformed: %d fields after comm", n-first)
		}
		f[n] = fld
	}
	return nil
}

// nextField returns the first run of non-space bytes of b (nil when
// there is none) and what follows it.
func nextField(b []byte) (field, rest []byte) {
	i := 0
	for i < len(b) && isSpace(b[i]) {
		i++
	}
	j := i
	for j < len(b) && !isSpace(b[j]) {
		j++
	}
	if i == j {
		return nil, nil
	}
	return b[i:j], b[j:]
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'
}

// parseUint parses a decimal number of the given bit size without
// converting b to a string.
func parseUint(b []byte, bits int) (uint64, error) {
	if len(b) == 0 || len(b) > 20 {
		return 0, fmt.Errorf("not a %d-bit number: %q", bits, b)
	}
	var v uint64
	for _, c := range b {
		d := uint64(c - '0')
		if c < '0' || c > '9' || v > (1<<uint(bits)-1-d)/10 {
			return 0, fmt.Errorf("not a %d-bit number: %q", bits, b)
		}
		v = v*10 + d
	}
	return v, nil
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

// statusLine cuts the first line off /proc/PID/status content b: its key
// and its value (nil for a line without a colon), and the rest of b.
func statusLine(b []byte) (key, val, rest []byte) {
	line := b
	if i := bytes.IndexByte(b, '\n'); i >= 0 {
		line, rest = b[:i], b[i+1:]
	}
	key, val, _ = bytes.Cut(line, []byte(":"))
	return key, val, rest
}

// parseStatus takes the UIDs, the thread group and the thread count from
// /proc/PID/status.
func parseStatus(b []byte) (status, error) {
	var ss status
	haveUID := false
	for len(b) > 0 {
		var key, val []byte
		key, val, b = statusLine(b)
		first, rest := nextField(val)
		if first == nil {
			continue
		}
		switch string(key) { // no allocation: compared, not kept
		case "Uid":
			var ids [4]uint32
			n := 0
			for f := first; f != nil; f, rest = nextField(rest) {
				if n == len(ids) {
					n++
					break
				}
				id, err := parseUint(f, 32)
				if err != nil {
					return ss, fmt.Errorf("malformed Uid: %w", err)
				}
				ids[n] = uint32(id)
				n++
			}
			if n != len(ids) {
				return ss, fmt.Errorf("malformed Uid: %d fields, want 4", n)
			}
			ss.uids = UIDs{Real: ids[0], Effective: ids[1], Saved: ids[2], FS: ids[3]}
			ss.uid, haveUID = ids[0], true
		case "Tgid":
			tgid, err := parseUint(first, 32)
			if err != nil {
				return ss, fmt.Errorf("malformed Tgid: %w", err)
			}
			ss.tgid = uint32(tgid)
		case "Threads":
			n, err := parseUint(first, 31)
			if err != nil {
				return ss, fmt.Errorf("malformed Threads: %w", err)
			}
			ss.threads = int(n)
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

// ReadGroups returns the groups process id holds now, as the kernel
// keeps them (root/PID/status): its effective gid first, then its
// supplementary groups, each once. It reads through one handle on the
// process directory and checks the process's start time there, so the
// groups are id's, never a later process's at a recycled PID; a process
// that is gone (or a zombie) wraps fs.ErrNotExist. These are what the
// kernel checks a file's group permission against: membership granted by
// LDAP or SSSD, by newgrp or sg, or by setgroups before an exec, which
// /etc/group does not show.
func ReadGroups(root string, id lineage.ID) ([]uint32, error) {
	if root == "" {
		root = DefaultRoot
	}
	dir := filepath.Join(root, strconv.FormatUint(uint64(id.PID), 10))
	dfd, err := openDir(dir)
	if err != nil {
		return nil, readErr(id.PID, err)
	}
	defer unix.Close(dfd)
	var rd Reader
	b, err := rd.file(dfd, "stat")
	if err != nil {
		return nil, readErr(id.PID, err)
	}
	st, err := parseStat(b)
	if err != nil {
		return nil, fmt.Errorf("procfs: %s/stat: %w", dir, err)
	}
	if st.StartTicks != id.Tick() || st.State == 'Z' || st.State == 'X' {
		return nil, fmt.Errorf("procfs: process %d (start %d) is gone: %w", id.PID, id.Start, fs.ErrNotExist)
	}
	b, err = rd.file(dfd, "status")
	if err != nil {
		return nil, readErr(id.PID, err)
	}
	groups, err := parseGroups(b)
	if err != nil {
		return nil, fmt.Errorf("procfs: %s/status: %w", dir, err)
	}
	return groups, nil
}

// parseGroups takes the effective gid (the Gid: line's second field) and
// the supplementary groups (Groups:) from /proc/PID/status.
func parseGroups(b []byte) ([]uint32, error) {
	var out []uint32
	haveGid := false
	for len(b) > 0 {
		var key, val []byte
		key, val, b = statusLine(b)
		switch string(key) {
		case "Gid":
			_, rest := nextField(val)
			egid, _ := nextField(rest)
			g, err := parseUint(egid, 32)
			if err != nil {
				return nil, fmt.Errorf("malformed Gid: %w", err)
			}
			out = append([]uint32{uint32(g)}, out...)
			haveGid = true
		case "Groups":
			for f, rest := nextField(val); f != nil; f, rest = nextField(rest) {
				g, err := parseUint(f, 32)
				if err != nil {
					return nil, fmt.Errorf("malformed Groups: %w", err)
				}
				out = append(out, uint32(g))
			}
		}
	}
	if !haveGid {
		return nil, errors.New("no Gid line")
	}
	// The effective gid first, then each supplementary group once.
	seen := make(map[uint32]bool, len(out))
	kept := out[:0]
	for _, g := range out {
		if !seen[g] {
			seen[g] = true
			kept = append(kept, g)
		}
	}
	return kept, nil
}
