package procfs

import (
	"bufio"
	"errors"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mcptrace/mcptrace/internal/testenv"
	"github.com/mcptrace/mcptrace/lineage"
	"github.com/mcptrace/mcptrace/procmatch"
)

const fakeRoot = "testdata/proc"

// TestMain doubles as the helper child of the integration tests.
func TestMain(m *testing.M) {
	testenv.RunHelper(map[string]func(){
		"stat": func() {
			// Report our own start as /proc shows it, then wait for stdin to close.
			b, err := os.ReadFile("/proc/self/stat")
			if err != nil {
				os.Exit(2)
			}
			os.Stdout.Write(b)
			io.Copy(io.Discard, os.Stdin)
		},
		"exit": func() {},
	})
	os.Exit(m.Run())
}

func TestReadFakeTree(t *testing.T) {
	tests := []struct {
		name string
		pid  uint32
		want lineage.Snapshot
	}{
		{"init", 1, lineage.Snapshot{
			ID: lineage.ID{PID: 1, Start: 2 * lineage.TickNS}, UID: 0, Comm: "systemd",
			Filename: "/usr/lib/systemd/systemd", Argv: []string{"/sbin/init", "splash"},
		}},
		{"kthreadd is a kernel thread", 2, lineage.Snapshot{
			ID: lineage.ID{PID: 2, Start: 2 * lineage.TickNS}, Comm: "kthreadd", Kernel: true,
		}},
		{"kworker comm with slash and dash", 7, lineage.Snapshot{
			ID: lineage.ID{PID: 7, Start: 3 * lineage.TickNS}, PPID: 2, Comm: "kworker/0:0H-events_highpri", Kernel: true,
		}},
		{"comm with spaces and parentheses", 1234, lineage.Snapshot{
			ID: lineage.ID{PID: 1234, Start: 1500 * lineage.TickNS}, PPID: 1, UID: 1000, Comm: "(sd-pam) x)",
			Filename: "/usr/lib/systemd/systemd", Argv: []string{"(sd-pam)"},
		}},
		// The executable was deleted (an upgrade replaced it): /proc
		// appends " (deleted)", the kernel's exec event named the file
		// without it, and rules must see one name either way.
		{"cmdline rewritten with spaces stays one element; a deleted exe reads as the file executed", 4321, lineage.Snapshot{
			ID: lineage.ID{PID: 4321, Start: 98765 * lineage.TickNS}, PPID: 4320, UID: 33, Comm: "nginx",
			Filename: "/usr/sbin/nginx", Argv: []string{"nginx: worker process"},
		}},
		{"empty argument kept", 777, lineage.Snapshot{
			ID: lineage.ID{PID: 777, Start: 123456 * lineage.TickNS}, PPID: 1234, UID: 1000, Comm: "sh",
			Filename: "/usr/bin/dash", Argv: []string{"sh", "-c", "", "x y"},
		}},
		{"zombie leader with live threads is alive", 5001, lineage.Snapshot{
			ID: lineage.ID{PID: 5001, Start: 200001 * lineage.TickNS}, PPID: 1, UID: 1000, Comm: "leader-gone",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Read(fakeRoot, tt.pid)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Read(%d) = %+v\nwant %+v", tt.pid, got, tt.want)
			}
		})
	}
}

func TestReadGoneIsNotExist(t *testing.T) {
	tests := []struct {
		name string
		root string
		pid  uint32
	}{
		{"no such process", fakeRoot, 999},
		{"exited while read", fakeRoot, 6000},
		{"zombie", fakeRoot, 5000},
		{"no such root", "testdata/nope", 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Read(tt.root, tt.pid)
			if !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("Read(%d) error = %v, want one wrapping fs.ErrNotExist", tt.pid, err)
			}
		})
	}
}

func TestScanFakeTreeSkipsVanishedZombiesAndNonProcesses(t *testing.T) {
	snaps, err := Scan(fakeRoot)
	if err != nil {
		t.Fatal(err)
	}
	var pids []uint32
	for _, s := range snaps {
		pids = append(pids, s.ID.PID)
	}
	if want := []uint32{1, 2, 7, 777, 1234, 4321, 5001}; !slices.Equal(pids, want) {
		t.Errorf("Scan PIDs = %v, want %v", pids, want)
	}
}

// TestScanReadsWhatReadReads: the scan's workers give every process as a
// Read of it alone, in PID order.
func TestScanReadsWhatReadReads(t *testing.T) {
	snaps, err := Scan(fakeRoot)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range snaps {
		r, err := Read(fakeRoot, s.ID.PID)
		if err != nil || !reflect.DeepEqual(r, s) {
			t.Errorf("Scan gives %+v, Read gives %+v, %v", s, r, err)
		}
	}
	// Real /proc: many processes, so several workers take part.
	snaps, err = Scan("")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.IsSortedFunc(snaps, func(a, b lineage.Snapshot) int { return int(a.ID.PID) - int(b.ID.PID) }) {
		t.Errorf("snapshots of /proc not sorted by PID")
	}
	self := slices.IndexFunc(snaps, func(s lineage.Snapshot) bool { return s.ID.PID == uint32(os.Getpid()) })
	if self < 0 {
		t.Fatal("Scan misses this process")
	}
	if r, err := Read("", uint32(os.Getpid())); err != nil || !reflect.DeepEqual(r, snaps[self]) {
		t.Errorf("Scan gives %+v for this process, Read gives %+v, %v", snaps[self], r, err)
	}
}

func TestScanReturnsOtherErrorsWrapped(t *testing.T) {
	snaps, err := Scan("testdata/broken/proc")
	if err == nil || errors.Is(err, fs.ErrNotExist) || snaps != nil {
		t.Fatalf("Scan = %d snapshots, %v; want no snapshots and a real error", len(snaps), err)
	}
	if !strings.Contains(err.Error(), "42/stat") {
		t.Errorf("error %q does not name the file", err)
	}
	if _, err := Scan("testdata/nope"); err == nil {
		t.Errorf("Scan of a missing root succeeded")
	}
}

func TestParseStat(t *testing.T) {
	tail := " 0 0 0 0 0 0 0 0 0 0 1 0 777 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n"
	line := func(comm string) string { return "42 (" + comm + ") S 7 42 41 0 -1 2097152" + tail }
	tests := []struct {
		name    string
		in      string
		comm    string
		wantErr bool
	}{
		{"plain", line("bash"), "bash", false},
		{"spaces", line("Web Content"), "Web Content", false},
		{"parentheses", line("(sd-pam) x)"), "(sd-pam) x)", false},
		{"fake fields in comm", line(") R 1 2 3 ("), ") R 1 2 3 (", false},
		{"empty comm", line(""), "", false},
		{"no session to show", "42 (bash) S 7 42 -1 0 -1 2097152" + tail, "bash", false},
		{"no comm", "42 bash S 1\n", "", true},
		{"truncated", "42 (bash) S 7 42\n", "", true},
		{"bad ppid", "42 (bash) S x" + tail, "", true},
		{"empty", "", "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st, err := parseStat([]byte(tt.in))
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tt.wantErr)
			}
			if tt.wantErr {
				return
			}
			want := Stat{PID: 42, Comm: tt.comm, State: 'S', PPID: 7, Session: 41, Flags: pfKthread, StartTicks: 777}
			if strings.Contains(tt.in, " 42 -1 ") {
				want.Session = 0
			}
			if st != want {
				t.Errorf("parseStat = %+v, want %+v", st, want)
			}
		})
	}
}

func TestKernelThreadDetection(t *testing.T) {
	noExe := &fs.PathError{Op: "readlink", Path: "/proc/9/exe", Err: fs.ErrNotExist}
	cases := []struct {
		name   string
		st     Stat
		exeErr error
		want   bool
	}{
		{"PF_KTHREAD", Stat{Flags: pfKthread, PPID: 2}, nil, true},
		{"PF_KTHREAD under another parent", Stat{Flags: pfKthread, PPID: 0}, noExe, true},
		{"no exe under kthreadd", Stat{PPID: 2}, noExe, true},
		{"no exe elsewhere (zombie)", Stat{PPID: 100}, noExe, false},
		{"exe unreadable under kthreadd", Stat{PPID: 2}, errors.New("EACCES"), false},
		{"user process", Stat{PPID: 2}, nil, false},
	}
	for _, c := range cases {
		if got := isKernelThread(c.st, c.exeErr); got != c.want {
			t.Errorf("%s: got %v", c.name, got)
		}
	}
}

func TestSplitCmdline(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []string
	}{
		{"empty", "", nil},
		{"one", "sleep\x00", []string{"sleep"}},
		{"several", "node\x00server.js\x00--port\x003000\x00", []string{"node", "server.js", "--port", "3000"}},
		{"empty argument", "sh\x00-c\x00\x00", []string{"sh", "-c", ""}},
		{"rewritten without NUL", "postgres: writer process", []string{"postgres: writer process"}},
		{"no trailing NUL", "a\x00b", []string{"a", "b"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := splitCmdline([]byte(tt.in)); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("splitCmdline(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

// startHelper runs this test binary as a child in the given helper mode.
func startHelper(t *testing.T, mode string) (*exec.Cmd, io.WriteCloser, *bufio.Scanner) {
	t.Helper()
	return startHelperFrom(t, os.Args[0], mode)
}

// startHelperFrom is startHelper with a copy of the test binary at bin.
func startHelperFrom(t *testing.T, bin, mode string) (*exec.Cmd, io.WriteCloser, *bufio.Scanner) {
	t.Helper()
	cmd := exec.Command(bin, "-test.run=^$", "helper-"+mode)
	cmd.Env = testenv.HelperEnv(mode)
	stdin, stdout := testenv.StartPiped(t, cmd)
	return cmd, stdin, stdout
}

func TestReadRealChild(t *testing.T) {
	before := BootTimeNow()
	cmd, stdin, stdout := startHelper(t, "stat")
	if !stdout.Scan() {
		t.Fatalf("helper: %v", stdout.Err())
	}
	line := stdout.Text()
	pid := uint32(cmd.Process.Pid)

	got, err := Read("", pid) // "" is /proc
	if err != nil {
		t.Fatal(err)
	}
	after := BootTimeNow()

	// The child's own view of its start, field 22 of /proc/self/stat.
	f := strings.Fields(line[strings.LastIndexByte(line, ')')+1:])
	ticks, err := strconv.ParseUint(f[22-3], 10, 64)
	if err != nil {
		t.Fatalf("child stat %q: %v", line, err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	exe, _ = filepath.EvalSymlinks(exe)
	want := lineage.Snapshot{
		ID:       lineage.ID{PID: pid, Start: ticks * lineage.TickNS},
		PPID:     uint32(os.Getpid()),
		UID:      uint32(os.Getuid()),
		Comm:     procmatch.TruncComm(filepath.Base(exe)),
		Filename: exe,
		Argv:     cmd.Args,
		Stdio:    lineage.Stdio{In: lineage.FilePipe, Out: lineage.FilePipe},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Read(child) = %+v\nwant %+v", got, want)
	}
	// The kernel's start_boottime is on CLOCK_BOOTTIME: the child started
	// between our two clock reads, give or take the tick /proc truncates to.
	if got.ID.Start+lineage.TickNS < before || got.ID.Start > after {
		t.Errorf("child start %d not within [%d, %d] (BootTimeNow around the start)", got.ID.Start, before, after)
	}
	if age := time.Duration(BootTimeNow() - got.ID.Start); age > 5*time.Second {
		t.Errorf("child started %v ago by BootTimeNow, want a few seconds at most", age)
	}

	stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	if _, err := Read("", pid); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Read(reaped child) error = %v, want fs.ErrNotExist", err)
	}
}

// A process whose executable was deleted after its exec (an upgrade
// replaced it) reads with the name it executed, as the kernel's exec event
// gave it, not with the " (deleted)" that /proc appends.
func TestReadRealProcessWhoseExecutableWasDeleted(t *testing.T) {
	self, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	copyPath := filepath.Join(t.TempDir(), "procfs-helper")
	if err := os.WriteFile(copyPath, self, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd, _, stdout := startHelperFrom(t, copyPath, "stat")
	if !stdout.Scan() {
		t.Fatalf("helper: %v", stdout.Err())
	}
	if err := os.Remove(copyPath); err != nil {
		t.Fatal(err)
	}
	pid := uint32(cmd.Process.Pid)
	if link, _ := os.Readlink(filepath.Join("/proc", strconv.Itoa(int(pid)), "exe")); !strings.HasSuffix(link, " (deleted)") {
		t.Fatalf("/proc shows exe %q, want it marked deleted", link)
	}
	got, err := Read("", pid)
	if err != nil {
		t.Fatal(err)
	}
	if got.Filename != copyPath {
		t.Errorf("Filename = %q, want %q", got.Filename, copyPath)
	}
}

func TestReadRealZombieIsGone(t *testing.T) {
	cmd, _, _ := startHelper(t, "exit")
	pid := uint32(cmd.Process.Pid)
	// Not waited for: the child stays a zombie once it exits. Its leader
	// shows Z while the other threads are still leaving (exit_group); the
	// process is a zombie once the last one left.
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(int(pid)) + "/status")
		if err != nil {
			t.Fatal(err)
		}
		if s := string(b); strings.Contains(s, "\nState:\tZ") && strings.Contains(s, "\nThreads:\t1\n") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("helper never became a zombie")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := Read("/proc", pid); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Read(zombie) error = %v, want fs.ErrNotExist", err)
	}
	snaps, err := Scan("/proc")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range snaps {
		if s.ID.PID == pid {
			t.Errorf("Scan lists the zombie %d", pid)
		}
	}
}

func TestScanRealProc(t *testing.T) {
	snaps, err := Scan("")
	if err != nil {
		t.Fatal(err)
	}
	byPID := map[uint32]lineage.Snapshot{}
	for _, s := range snaps {
		byPID[s.ID.PID] = s
	}
	self, ok := byPID[uint32(os.Getpid())]
	if !ok {
		t.Fatalf("Scan misses this process (%d of %d snapshots)", os.Getpid(), len(snaps))
	}
	if self.PPID != uint32(os.Getppid()) || !slices.Equal(self.Argv, os.Args) {
		t.Errorf("self = %+v, want ppid %d argv %q", self, os.Getppid(), os.Args)
	}
	if _, ok := byPID[1]; !ok {
		t.Errorf("Scan misses PID 1")
	}
	now := BootTimeNow()
	for _, s := range snaps {
		if s.ID.Start > now {
			t.Errorf("%d started in the future: %d > %d", s.ID.PID, s.ID.Start, now)
		}
		if s.ID.Start%lineage.TickNS != 0 {
			t.Errorf("%d start %d not a whole tick", s.ID.PID, s.ID.Start)
		}
	}
	// Kernel threads: kthreadd is PID 2 unless we run in a PID namespace.
	if k, ok := byPID[2]; ok && k.Comm == "kthreadd" && (!k.Kernel || k.Argv != nil) {
		t.Errorf("kthreadd = %+v, want a kernel thread without argv", k)
	}
}

// USER_HZ as the kernel tells this process (AT_CLKTCK) must be what lineage.TickNS
// assumes.
func TestTickNSMatchesKernelClockTick(t *testing.T) {
	auxv, err := unix.Auxv()
	if err != nil {
		t.Skipf("auxv: %v", err)
	}
	const atClktck = 17
	for _, kv := range auxv {
		if kv[0] == atClktck {
			if hz := uint64(kv[1]); hz*lineage.TickNS != 1e9 {
				t.Errorf("AT_CLKTCK = %d, TickNS assumes 100", hz)
			}
			return
		}
	}
	t.Skip("no AT_CLKTCK in auxv")
}

// /proc/uptime counts CLOCK_BOOTTIME seconds.
func TestBootTimeNowMatchesUptime(t *testing.T) {
	b, err := os.ReadFile("/proc/uptime")
	if err != nil {
		t.Fatal(err)
	}
	up, err := strconv.ParseFloat(strings.Fields(string(b))[0], 64)
	if err != nil {
		t.Fatal(err)
	}
	now := float64(BootTimeNow()) / 1e9
	if d := now - up; d < -0.5 || d > 2 {
		t.Errorf("BootTimeNow = %.2fs, /proc/uptime %.2fs", now, up)
	}
}

// A real scan seeds a graph in which this process descends from PID 1.
func TestScanSeedsLineageGraph(t *testing.T) {
	readAt := BootTimeNow()
	snaps, err := Scan("/proc")
	if err != nil {
		t.Fatal(err)
	}
	g := lineage.New(lineage.Config{})
	g.Seed(snaps, readAt)
	self, ok := g.Lookup(uint32(os.Getpid()))
	if !ok || !self.CoarseStart || self.Gaps&lineage.GapSeeded == 0 {
		t.Fatalf("self = %+v, %v; want a seeded coarse node", self, ok)
	}
	anc := g.Ancestors(self.ID)
	if len(anc) < 2 {
		t.Fatalf("Ancestors(self) = %+v, want at least self and its creator", anc)
	}
	if top := anc[len(anc)-1]; top.ID.PID != 1 {
		t.Errorf("Ancestors(self) ends at %v (%s), want PID 1", top.ID, top.Comm)
	}
	if anc[1].ID.PID != uint32(os.Getppid()) {
		t.Errorf("creator of self = %v, want the parent %d", anc[1].ID, os.Getppid())
	}
	if s := g.Stats(); s.Tracked != len(snaps) || s.Alive != len(snaps) {
		t.Errorf("stats %+v after seeding %d snapshots", s, len(snaps))
	}
}

func TestParseStatusUIDs(t *testing.T) {
	cases := []struct {
		name    string
		status  string
		want    UIDs
		wantErr string
	}{
		{"four distinct ids", "Name:\tsudo\nTgid:\t7\nUid:\t1000\t0\t0\t0\nThreads:\t1\n", UIDs{Real: 1000, Effective: 0, Saved: 0, FS: 0}, ""},
		{"setuid exec keeps the real id", "Uid:\t65534\t0\t0\t0\n", UIDs{Real: 65534, Saved: 0}, ""},
		{"too few ids", "Uid:\t0\t0\n", UIDs{}, "4"},
		{"not a number", "Uid:\t0\tx\t0\t0\n", UIDs{}, "malformed Uid"},
		{"no Uid line", "Name:\tx\n", UIDs{}, "no Uid line"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ss, err := parseStatus([]byte(tc.status))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || ss.uids != tc.want || ss.uid != tc.want.Real {
				t.Fatalf("parseStatus = %+v, %v; want uids %+v", ss, err, tc.want)
			}
		})
	}
}

func TestReadUIDsOfARealProcessOfAnotherUser(t *testing.T) {
	if os.Geteuid() != 0 {
		// testenv imports procfs: its Missing cannot be called from here.
		if os.Getenv("MCPTRACE_REQUIRE_ALL") == "1" {
			t.Fatal("root is missing (starting a process as uid 65534 needs uid 0) and MCPTRACE_REQUIRE_ALL=1 requires it")
		}
		t.Skip("root is missing: starting a process as uid 65534 needs uid 0")
	}
	cmd := exec.Command("sleep", "100")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	got, err := ReadUIDs("", uint32(cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	if want := (UIDs{65534, 65534, 65534, 65534}); got != want {
		t.Errorf("ReadUIDs = %+v, want %+v", got, want)
	}
	cmd.Process.Kill()
	cmd.Wait()
	if _, err := ReadUIDs("", uint32(cmd.Process.Pid)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("ReadUIDs of a reaped process: %v, want fs.ErrNotExist", err)
	}
}

// The groups a process holds are the kernel's, whatever /etc/group says:
// a process given groups at exec (setgroups) has them, and a process that
// is gone, or another at its PID, has none.
func TestReadGroupsOfARealProcessAreTheKernels(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv("MCPTRACE_REQUIRE_ALL") == "1" {
			t.Fatal("root is missing (starting a process with other groups needs uid 0) and MCPTRACE_REQUIRE_ALL=1 requires it")
		}
		t.Skip("root is missing: starting a process with other groups needs uid 0")
	}
	// 4242 and 4343 are in no group database here: only setgroups gave them.
	cmd := exec.Command("sleep", "100")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{4343, 4242, 65534}}}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	snap, err := Read("", uint32(cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	got, err := ReadGroups("", snap.ID)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(got[1:])
	if want := []uint32{65534, 4242, 4343}; !slices.Equal(got, want) {
		t.Errorf("ReadGroups = %v, want the effective gid then the supplementary groups once each: %v", got, want)
	}
	other := snap.ID
	other.Start += lineage.TickNS
	if _, err := ReadGroups("", other); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("ReadGroups of another start at the same pid: %v, want fs.ErrNotExist", err)
	}
	cmd.Process.Kill()
	cmd.Wait()
	if _, err := ReadGroups("", snap.ID); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("ReadGroups of a reaped process: %v, want fs.ErrNotExist", err)
	}
}

func TestParseGroups(t *testing.T) {
	for _, tc := range []struct {
		name, status string
		want         []uint32
		err          string
	}{
		{"effective gid first, each group once", "Uid:\t1\t1\t1\t1\nGid:\t100\t999\t999\t999\nGroups:\t4 999 27 \n", []uint32{999, 4, 27}, ""},
		{"no supplementary groups", "Gid:\t5\t5\t5\t5\nGroups:\t\n", []uint32{5}, ""},
		{"Groups before Gid", "Groups:\t7\nGid:\t5\t6\t5\t5\n", []uint32{6, 7}, ""},
		{"no Gid line", "Groups:\t7\n", nil, "no Gid line"},
		{"a group that is not a number", "Gid:\t5\t5\t5\t5\nGroups:\t7 x\n", nil, "malformed Groups"},
		{"a gid beyond 32 bits", "Gid:\t5\t4294967296\t5\t5\n", nil, "malformed Gid"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseGroups([]byte(tc.status))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil || !slices.Equal(got, tc.want) {
				t.Fatalf("parseGroups = %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}

// Read says what a process's fd 0 and fd 1 are now, for processes older
// than the agent (roles reads servers from pipes and sockets on both).
func TestReadSaysWhatStdinAndStdoutAre(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	if err := cmd.Start(); err != nil { // stdout: /dev/null
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	s, err := Read(DefaultRoot, uint32(cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	if want := (lineage.Stdio{In: lineage.FilePipe, Out: lineage.FileChar}); s.Stdio != want {
		t.Errorf("stdio %+v, want %+v", s.Stdio, want)
	}
}
