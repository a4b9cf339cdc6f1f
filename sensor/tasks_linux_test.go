package sensor_test

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mcptrace/mcptrace/internal/testenv"
	"github.com/mcptrace/mcptrace/lineage"
	"github.com/mcptrace/mcptrace/procfs"
	"github.com/mcptrace/mcptrace/sensor"
)

// TestTasksReadWhatProcReads: the kernel's task iterator says of every
// process what /proc's files say, in the states a seed meets: an argv
// longer than the iterator copies (read whole from /proc instead), stdin
// a pipe, stdin and stdout closed, another user's process, an executable
// deleted since its exec, and a zombie (in neither). On a kernel older
// than 5.18 the iterator cannot load, and says what it needs: the agent
// reads /proc's files there.
func TestTasksReadWhatProcReads(t *testing.T) {
	testenv.Root(t)
	tasks, err := sensor.OpenTasks("", nil)
	if release, ok := iteratorKernel(); !ok {
		var ferr *sensor.FeatureError
		if !errors.As(err, &ferr) || !strings.Contains(ferr.Needs, "5.18") {
			t.Fatalf("kernel %s: OpenTasks = %v, want a FeatureError that says it needs 5.18", release, err)
		}
		t.Logf("kernel %s: %v (the agent reads /proc's files)", release, err)
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	defer tasks.Close()

	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Fatal(err)
	}
	sleepPath, err := filepath.EvalSymlinks(sleep) // as /proc names it
	if err != nil {
		t.Fatal(err)
	}
	gone := filepath.Join(t.TempDir(), "gone-sleep")
	testenv.CopyFile(t, sleep, gone, 0o755)
	// One file under two names (a hard link): one inode, two dentries,
	// two paths in /proc, so two readlinks (sensor.Tasks.Scan).
	hard := filepath.Join(filepath.Dir(gone), "hard-sleep")
	testenv.CopyFile(t, sleep, hard, 0o755)
	hardToo := hard + "-too"
	if err := os.Link(hard, hardToo); err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("x", 5000)
	cases := map[string]*exec.Cmd{
		"long argv":      exec.Command("/bin/sh", "-c", "sleep 300; :", long),
		"stdin a pipe":   exec.Command(sleep, "300"),
		"stdio closed":   exec.Command("/bin/sh", "-c", "exec "+sleep+" 300 <&- >&-"),
		"another user":   exec.Command(sleep, "300"),
		"exe deleted":    exec.Command(gone, "300"),
		"a zombie":       exec.Command("/bin/true"),
		"plain sleeper":  exec.Command(sleep, "301"),
		"hard link":      exec.Command(hard, "300"),
		"its other name": exec.Command(hardToo, "300"),
		"retitled":       exec.Command(os.Args[0], "-test.run=^$", "an argv to write over"),
	}
	cases["retitled"].Env = testenv.HelperEnv("retitle")
	retitled, err := cases["retitled"].StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cases["stdin a pipe"].StdinPipe(); err != nil {
		t.Fatal(err)
	}
	cases["another user"].SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	pids := map[string]uint32{}
	for name, cmd := range cases {
		if err := cmd.Start(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		pids[name] = uint32(cmd.Process.Pid)
		t.Cleanup(func() {
			cmd.Process.Kill()
			cmd.Wait()
		})
	}
	if err := os.Remove(gone); err != nil {
		t.Fatal(err)
	}
	if line, err := bufio.NewReader(retitled).ReadString('\n'); err != nil || line != "retitled\n" {
		t.Fatalf("the retitled helper said %q, %v", line, err)
	}
	testenv.Eventually(t, "every case in its state", func() (bool, string) {
		if st, err := procfs.ReadStat("", pids["a zombie"]); err != nil || st.State != 'Z' {
			return false, fmt.Sprintf("the zombie: %+v, %v", st, err)
		}
		if st, err := procfs.ReadStat("", pids["stdio closed"]); err != nil || st.Comm != "sleep" {
			return false, fmt.Sprintf("the closed one has not exec'd sleep: %+v, %v", st, err)
		}
		// Just after its exec, the dynamic loader opens ld.so.cache and
		// then libc at the lowest free descriptor, which is 0 here: the
		// two scans would each catch a moment of that (a file, then
		// closed, then a file again). The case is the sleep the loader
		// handed over to, asleep in its system call.
		if sc, err := os.ReadFile(fmt.Sprintf("/proc/%d/syscall", pids["stdio closed"])); err != nil || !asleep(string(sc)) {
			return false, fmt.Sprintf("the closed one is not asleep yet: /proc/PID/syscall %q, %v", sc, err)
		}
		return true, ""
	})

	before := procfs.BootTimeNow()
	got, fromFiles, err := tasks.Scan()
	if err != nil {
		t.Fatal(err)
	}
	want, err := procfs.Scan("")
	if err != nil {
		t.Fatal(err)
	}
	gotBy, wantBy := byPID(got), byPID(want)
	for name, pid := range pids {
		g, inGot := gotBy[pid]
		w, inWant := wantBy[pid]
		if name == "a zombie" {
			if inGot || inWant {
				t.Errorf("%s (pid %d): in the iterator's scan %v, in /proc's %v; want in neither", name, pid, inGot, inWant)
			}
			continue
		}
		if !inGot || !inWant {
			t.Errorf("%s (pid %d): in the iterator's scan %v, in /proc's %v; want in both", name, pid, inGot, inWant)
			continue
		}
		if !reflect.DeepEqual(g, w) {
			t.Errorf("%s (pid %d):\n iterator %+v\n /proc    %+v", name, pid, g, w)
		}
	}
	// What each case is there for, as both read it.
	for _, c := range []struct {
		name string
		ok   func(lineage.Snapshot) bool
	}{
		{"long argv", func(s lineage.Snapshot) bool { return len(s.Argv) == 4 && s.Argv[3] == long }},
		{"stdin a pipe", func(s lineage.Snapshot) bool { return s.Stdio.In == lineage.FilePipe }},
		{"stdio closed", func(s lineage.Snapshot) bool {
			return s.Stdio == lineage.Stdio{In: lineage.FileClosed, Out: lineage.FileClosed}
		}},
		{"another user", func(s lineage.Snapshot) bool { return s.UID == 65534 }},
		{"exe deleted", func(s lineage.Snapshot) bool { return s.Filename == gone }},
		{"plain sleeper", func(s lineage.Snapshot) bool { return s.Filename == sleepPath }},
		{"stdin a pipe", func(s lineage.Snapshot) bool { return s.Filename == sleepPath }},
		{"another user", func(s lineage.Snapshot) bool { return s.Filename == sleepPath }},
		{"hard link", func(s lineage.Snapshot) bool { return s.Filename == hard }},
		{"its other name", func(s lineage.Snapshot) bool { return s.Filename == hardToo }},
		{"retitled", func(s lineage.Snapshot) bool { return len(s.Argv) == 1 && strings.HasPrefix(s.Argv[0], retitledAs) }},
	} {
		if s := gotBy[pids[c.name]]; !c.ok(s) {
			t.Errorf("%s: the iterator read %+v", c.name, s)
		}
	}

	// The whole node: every process /proc listed that had started before
	// the iterator's scan and is still the same process now is in that
	// scan, and the two agree on which are kernel threads and on them.
	// (Other tests' packages run beside this one: what started since is
	// theirs to have or not.)
	missing := 0
	for _, w := range want {
		g, ok := gotBy[w.ID.PID]
		if !ok || g.ID != w.ID {
			if w.ID.Start+lineage.TickNS > before {
				continue // may have started after the iterator's scan began
			}
			if now, err := procfs.Read("", w.ID.PID); err == nil && now.ID == w.ID {
				missing++
				t.Errorf("pid %d (%s) is in /proc's scan and alive, not in the iterator's (it has %+v)", w.ID.PID, w.Comm, g.ID)
			}
			continue
		}
		// A process may exec (a new comm, a setuid's uid) between the
		// two scans, a kernel thread never does: those are compared.
		// A kernel thread's name in /proc may be longer than its task's
		// comm (a workqueue's, 6.4's full kthread names).
		if g.Kernel != w.Kernel {
			t.Errorf("pid %d (%s): a kernel thread to the iterator %v, to /proc %v", w.ID.PID, w.Comm, g.Kernel, w.Kernel)
		} else if w.Kernel && (g.UID != w.UID || !strings.HasPrefix(w.Comm, g.Comm) || g.Comm == "") {
			t.Errorf("pid %d: iterator kernel=%v uid=%d comm=%q, /proc kernel=%v uid=%d comm=%q", w.ID.PID, g.Kernel, g.UID, g.Comm, w.Kernel, w.UID, w.Comm)
		}
	}
	t.Logf("%d processes by the iterator (%d of them read from /proc's files), %d by /proc's files alone, %d alive and missing", len(got), fromFiles, len(want), missing)
}

// asleep says whether /proc/PID/syscall's line is a process waiting in
// nanosleep or clock_nanosleep (the number of the call first).
func asleep(line string) bool {
	nr, _, _ := strings.Cut(strings.TrimSpace(line), " ")
	return nr == strconv.Itoa(unix.SYS_NANOSLEEP) || nr == strconv.Itoa(unix.SYS_CLOCK_NANOSLEEP)
}

// iteratorKernel says whether the running kernel has what the task
// iterator needs (5.18: sleepable iterators, bpf_copy_from_user_task).
func iteratorKernel() (string, bool) {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return "", false
	}
	release := unix.ByteSliceToString(u.Release[:])
	var major, minor int
	fmt.Sscanf(release, "%d.%d", &major, &minor)
	return release, major > 5 || major == 5 && minor >= 18
}

func byPID(snaps []lineage.Snapshot) map[uint32]lineage.Snapshot {
	m := make(map[uint32]lineage.Snapshot, len(snaps))
	for _, s := range snaps {
		m[s.ID.PID] = s
	}
	return m
}

// retitledAs is what the helper "retitle" writes over its argv.
const retitledAs = "mcp-server: retitled"

// retitle is a helper that writes over its whole argv, its last NUL too,
// as setproctitle(3) and node's process.title do, says "retitled" and
// sleeps. /proc then reads its command line as one title.
func retitle() {
	b, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		panic(err)
	}
	// arg_start and arg_end are fields 48 and 49; the fields after comm
	// begin with the third.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	start, err1 := strconv.ParseInt(f[48-3], 10, 64)
	end, err2 := strconv.ParseInt(f[49-3], 10, 64)
	if err1 != nil || err2 != nil || end-start < int64(len(retitledAs))+1 {
		panic(fmt.Sprintf("arg_start %v, arg_end %v", f[48-3], f[49-3]))
	}
	title := []byte(retitledAs + strings.Repeat(".", int(end-start)-len(retitledAs)))
	mem, err := os.OpenFile("/proc/self/mem", os.O_WRONLY, 0)
	if err != nil {
		panic(err)
	}
	if _, err := mem.WriteAt(title, start); err != nil {
		panic(err)
	}
	mem.Close()
	fmt.Println("retitled")
	time.Sleep(5 * time.Minute)
}
