package dockertest

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Bounds of the sweep.
const (
	sweepProcsWait   = 10 * time.Second
	sweepCgroupsWait = 5 * time.Second
	sweepRound       = 50 * time.Millisecond
)

// sweep ends whatever the engine of directory dir and cgroup parent
// cgroupParent left: processes whose command line names dir or that are
// in its cgroups, mounts below dir, the cgroup directories, and dir. It
// returns what it could not remove. dir or cgroupParent may be "" (one
// without the other, left by an interrupted sweep).
func sweep(dir, cgroupParent string) error {
	var errs []error
	deadline := time.Now().Add(sweepProcsWait)
	for {
		pids := leftProcesses(dir, cgroupParent)
		if len(pids) == 0 {
			break
		}
		if time.Now().After(deadline) {
			errs = append(errs, fmt.Errorf("processes still there %v after SIGKILL: %s", sweepProcsWait, describe(pids)))
			break
		}
		for _, pid := range pids {
			killIf(pid, func() bool { return belongs(pid, dir, cgroupParent) })
		}
		time.Sleep(sweepRound)
	}
	if dir != "" {
		for _, sock := range shimSockets(dir) {
			if err := os.Remove(sock); err != nil && !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, err)
			}
		}
		if err := unmountBelow(dir); err != nil {
			errs = append(errs, err)
		}
	}
	if cgroupParent != "" {
		if err := removeCgroups(cgroupParent); err != nil {
			errs = append(errs, err)
		}
	}
	if dir != "" {
		var err error
		for try := 0; try < 5; try++ {
			if err = os.RemoveAll(dir); err == nil {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("remove %s: %w", dir, err))
		}
	}
	return errors.Join(errs...)
}

// shimSocketDir is where every containerd-shim (runc v2) puts its socket,
// whichever containerd started it.
const shimSocketDir = "/run/containerd/s"

// shimSockets returns the sockets of the shims of the engine in dir, one
// per task in its containerd's state: containerd names each by the
// sha256 of "<containerd address>/<namespace>/<container id>". A shim
// removes its socket when its container ends; one the sweep killed
// cannot.
func shimSockets(dir string) []string {
	address := filepath.Join(dir, "exec", "containerd", "containerd.sock")
	tasks := filepath.Join(dir, "exec", "containerd", "daemon", "io.containerd.runtime.v2.task")
	namespaces, _ := os.ReadDir(tasks)
	var out []string
	for _, ns := range namespaces {
		ids, _ := os.ReadDir(filepath.Join(tasks, ns.Name()))
		for _, id := range ids {
			sum := sha256.Sum256([]byte(filepath.Join(address, ns.Name(), id.Name())))
			out = append(out, filepath.Join(shimSocketDir, hex.EncodeToString(sum[:])))
		}
	}
	return out
}

// leftProcesses returns the processes that name dir in their command line
// or are in a cgroup below cgroupParent, except this one.
func leftProcesses(dir, cgroupParent string) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, ent := range entries {
		pid, err := strconv.Atoi(ent.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		if belongs(pid, dir, cgroupParent) {
			out = append(out, pid)
		}
	}
	return out
}

// engineProgs are the programs of an engine: only they are found by
// their command line, so that a shell that happens to name the directory
// is left alone.
var engineProgs = []string{"dockerd", "containerd", "containerd-shim", "containerd-shim-runc-v1",
	"containerd-shim-runc-v2", "runc", "docker-init", "docker-proxy"}

// belongs reports whether process pid is an engine program naming dir in
// its command line (dockerd, containerd, containerd-shim) or is in a
// cgroup below cgroupParent (the containers).
func belongs(pid int, dir, cgroupParent string) bool {
	if exited(pid) {
		return false
	}
	if dir != "" {
		cmdline, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
		if err == nil && bytes.Contains(cmdline, []byte(dir+"/")) {
			exe, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/exe")
			if err == nil && slices.Contains(engineProgs, filepath.Base(strings.TrimSuffix(exe, " (deleted)"))) {
				return true
			}
		}
	}
	if cgroupParent != "" {
		cg, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
		if err == nil {
			for _, l := range strings.Split(string(cg), "\n") {
				_, p, ok := strings.Cut(l, ":")
				if !ok {
					continue
				}
				if _, p, ok = strings.Cut(p, ":"); ok && (p == cgroupParent || strings.HasPrefix(p, cgroupParent+"/")) {
					return true
				}
			}
		}
	}
	return false
}

// exited reports whether process pid is gone or a zombie: an engine's
// shims are reparented to init, which may reap them late.
func exited(pid int) bool {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	i := bytes.LastIndexByte(data, ')')
	if i < 0 || i+2 >= len(data) {
		return true
	}
	return data[i+2] == 'Z' || data[i+2] == 'X'
}

// killIf sends SIGKILL to pid through a pidfd, if still returns true once
// the pidfd is open: a recycled pid is never signalled.
func killIf(pid int, still func() bool) {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return
	}
	defer unix.Close(fd)
	if still() {
		unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0)
	}
}

// describe lists processes with their command lines, for errors.
func describe(pids []int) string {
	var parts []string
	for _, pid := range pids {
		cmdline, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
		parts = append(parts, fmt.Sprintf("%d %q", pid, strings.TrimSpace(string(bytes.ReplaceAll(cmdline, []byte{0}, []byte{' '})))))
	}
	return strings.Join(parts, ", ")
}

// mountsBelow returns the mount points at or below dir, deepest first.
func mountsBelow(dir string) []string {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	var out []string
	for _, l := range strings.Split(string(data), "\n") {
		f := strings.Fields(l)
		if len(f) < 5 {
			continue
		}
		p := unescape(f[4])
		if p == dir || strings.HasPrefix(p, dir+"/") {
			out = append(out, p)
		}
	}
	slices.SortFunc(out, func(a, b string) int { return len(b) - len(a) })
	return slices.Compact(out)
}

// unmountBelow lazily unmounts everything at or below dir.
func unmountBelow(dir string) error {
	for try := 0; try < 10; try++ {
		mps := mountsBelow(dir)
		if len(mps) == 0 {
			return nil
		}
		for _, mp := range mps {
			unix.Unmount(mp, unix.MNT_DETACH)
		}
	}
	if mps := mountsBelow(dir); len(mps) > 0 {
		return fmt.Errorf("still mounted: %s", strings.Join(mps, ", "))
	}
	return nil
}

// unescape undoes mountinfo's octal escapes.
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// cgroupRoots returns where every cgroup hierarchy is mounted (its whole
// tree, not a part).
func cgroupRoots() []string {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	var out []string
	for _, l := range strings.Split(string(data), "\n") {
		f := strings.Fields(l)
		i := slices.Index(f, "-")
		if i < 6 || i+1 >= len(f) || f[3] != "/" {
			continue
		}
		if f[i+1] == "cgroup" || f[i+1] == "cgroup2" {
			out = append(out, unescape(f[4]))
		}
	}
	return out
}

// removeCgroups removes the cgroup directory cgroupParent and everything
// below it, deepest first, in every hierarchy. A cgroup whose last
// process is still exiting is busy for a moment, so it tries again for
// up to sweepCgroupsWait.
func removeCgroups(cgroupParent string) error {
	deadline := time.Now().Add(sweepCgroupsWait)
	for {
		var dirs []string
		for _, root := range cgroupRoots() {
			top := filepath.Join(root, cgroupParent)
			filepath.WalkDir(top, func(p string, d fs.DirEntry, err error) error {
				if err == nil && d.IsDir() {
					dirs = append(dirs, p)
				}
				return nil
			})
		}
		if len(dirs) == 0 {
			return nil
		}
		slices.SortFunc(dirs, func(a, b string) int { return strings.Count(b, "/") - strings.Count(a, "/") })
		var last error
		for _, d := range dirs {
			if err := unix.Rmdir(d); err != nil && !errors.Is(err, unix.ENOENT) {
				last = fmt.Errorf("rmdir %s: %w", d, err)
			}
		}
		if last == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return last
		}
		time.Sleep(sweepRound)
	}
}

// procStart returns process pid's start time in clock ticks since boot
// (field 22 of /proc/PID/stat), which with the pid names a process once.
func procStart(pid int) (string, error) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return "", err
	}
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return "", fmt.Errorf("/proc/%d/stat: no comm", pid)
	}
	f := strings.Fields(string(data[i+1:]))
	// After the comm: state is field 3, starttime field 22.
	if len(f) < 20 {
		return "", fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f)+2)
	}
	return f[19], nil
}

// ownerAlive reports whether the test binary named by an engine's name
// suffix "<pid>-<start>-<random>" still runs. A name it cannot read is
// taken for alive: only what is certainly dead is swept.
func ownerAlive(suffix string) bool {
	parts := strings.SplitN(suffix, "-", 3)
	if len(parts) != 3 {
		return true
	}
	pid, err := strconv.Atoi(parts[0])
	if err != nil || pid <= 0 {
		return true
	}
	start, err := procStart(pid)
	if errors.Is(err, fs.ErrNotExist) {
		return false
	}
	if err != nil {
		return true
	}
	return start == parts[1]
}

// sweepStale sweeps the engines (directories and cgroup parents) whose
// test binary is no longer running.
func sweepStale() {
	seen := map[string]bool{} // suffixes swept
	bases := slices.Compact([]string{os.TempDir(), "/tmp"})
	for _, base := range bases {
		matches, _ := filepath.Glob(filepath.Join(base, dirPrefix+"*"))
		for _, dir := range matches {
			suffix := strings.TrimPrefix(filepath.Base(dir), dirPrefix)
			if ownerAlive(suffix) {
				continue
			}
			seen[suffix] = true
			sweepLocked(dir, suffix)
		}
	}
	for _, root := range cgroupRoots() {
		matches, _ := filepath.Glob(filepath.Join(root, cgroupPrefix+"*"))
		for _, cg := range matches {
			suffix := strings.TrimPrefix(filepath.Base(cg), cgroupPrefix)
			if seen[suffix] || ownerAlive(suffix) {
				continue
			}
			seen[suffix] = true
			report("cgroup /"+filepath.Base(cg), sweep("", "/"+cgroupPrefix+suffix))
		}
	}
}

// sweepLocked sweeps a dead binary's engine directory unless another test
// binary is sweeping it: the sweeper holds an exclusive flock of the
// directory.
func sweepLocked(dir, suffix string) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return // gone meanwhile
	}
	defer unix.Close(fd)
	if unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB) != nil {
		return
	}
	report("directory "+dir, sweep(dir, "/"+cgroupPrefix+suffix))
}

func report(what string, err error) {
	if err != nil {
		fmt.Fprintf(os.Stderr, "dockertest: sweeping the %s of a dead test binary: %v\n", what, err)
		return
	}
	fmt.Fprintf(os.Stderr, "dockertest: swept the %s of a dead test binary\n", what)
}
