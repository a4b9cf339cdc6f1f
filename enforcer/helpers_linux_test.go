package enforcer

import (
	"bufio"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mcptrace/mcptrace/internal/testenv"
	"github.com/mcptrace/mcptrace/lineage"
	"github.com/mcptrace/mcptrace/procfs"
)

// The tests signal only processes they started. Three things make sure of
// it beyond the enforcer's own checks:
//
//   - TestMain makes the test process a child subreaper, so every orphan of
//     a process a test started (daemons, children of killed shells) is
//     reparented to the test process rather than to init, where it can be
//     found and killed.
//   - sendSignal, the enforcer's only way to signal, is wrapped by a guard
//     that refuses (EPERM) and records a violation for any process that is
//     not a descendant of the test process; every test fails on a violation.
//   - every test kills what it started by its own handles in t.Cleanup, and
//     then every remaining descendant of the test process.

var (
	selfPID = os.Getpid()

	guardMu    sync.Mutex
	violations []string
	// onSend, when set, observes every signal the guard lets through.
	onSend func(pid uint32, sig unix.Signal)

	// registered are the pids of children started through rig.start whose
	// exec.Cmd has not been waited for yet; everything else that is a child
	// of the test process is an adopted orphan.
	regMu      sync.Mutex
	registered = map[int]bool{}
)

func TestMain(m *testing.M) {
	testenv.RunHelper(map[string]func(){"setuid": setuidHelper, "leader-exits": leaderExits})
	if os.Geteuid() == 0 {
		if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
			fmt.Fprintln(os.Stderr, "PR_SET_CHILD_SUBREAPER:", err)
			os.Exit(2)
		}
	}
	real := sendSignal
	sendSignal = func(fd int, pid uint32, sig unix.Signal) error {
		// A process that already exited (its pidfd is readable) gets no
		// signal whoever it was: answer as the kernel would, instead of
		// judging a /proc chain that is gone (a `sleep 0.1` member can end
		// between the enforcer's check and this one).
		exited := func() bool {
			pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
			n, err := unix.Poll(pfd, 0)
			return err == nil && n > 0
		}
		if exited() {
			return unix.ESRCH
		}
		if !descendantOfTest(pid) {
			if exited() { // it ended while its chain was read
				return unix.ESRCH
			}
			guardMu.Lock()
			violations = append(violations, fmt.Sprintf("enforcer tried to send %s to pid %d, which the test did not start (%s)", unix.SignalName(sig), pid, chain(pid)))
			guardMu.Unlock()
			return unix.EPERM
		}
		guardMu.Lock()
		obs := onSend
		guardMu.Unlock()
		if obs != nil {
			obs(pid, sig)
		}
		return real(fd, pid, sig)
	}
	os.Exit(m.Run())
}

// descendantOfTest reports whether pid's parent chain reaches the test
// process (and pid is not the test process). A chain can break for a
// moment while a parent exits (its ppid reads 0 while it is released, then
// its /proc entry is gone) before its children show their new parent, the
// subreaper: a broken chain is read again for up to 100ms.
func descendantOfTest(pid uint32) bool {
	for try := 0; ; try++ {
		ok, broken := walkToTest(pid)
		if ok || !broken || try == 100 {
			return ok
		}
		time.Sleep(time.Millisecond)
	}
}

// walkToTest follows pid's parent chain. broken: it ended in a process
// that could not be read, or that had no parent and is not a root (init,
// kthreadd).
func walkToTest(pid uint32) (ok, broken bool) {
	if pid <= 1 || int(pid) == selfPID {
		return false, false
	}
	for range 64 {
		st, err := procfs.ReadStat("", pid)
		switch {
		case err != nil:
			return false, true
		case int(st.PPID) == selfPID:
			return true, false
		case st.PPID == 0:
			return false, pid > 2
		case st.PPID == 1:
			return false, false
		}
		pid = st.PPID
	}
	return false, false
}

func chain(pid uint32) string {
	var b strings.Builder
	for range 10 {
		st, err := procfs.ReadStat("", pid)
		fmt.Fprintf(&b, "%d:%+v:%v ", pid, st, err)
		if err != nil || st.PPID <= 1 {
			break
		}
		pid = st.PPID
	}
	return b.String()
}

func setOnSend(f func(pid uint32, sig unix.Signal)) {
	guardMu.Lock()
	onSend = f
	guardMu.Unlock()
}

// rig is one test's process fixture.
type rig struct {
	t          *testing.T
	violations int // len(violations) at the start
}

func newRig(t *testing.T) *rig {
	t.Helper()
	testenv.Root(t)
	guardMu.Lock()
	r := &rig{t: t, violations: len(violations)}
	guardMu.Unlock()
	t.Cleanup(r.cleanup)
	return r
}

// cleanup runs after every proc's own cleanup (t.Cleanup is LIFO): it kills
// and reaps every remaining descendant of the test process, then fails the
// test if the guard saw a signal to a foreign process.
func (r *rig) cleanup() {
	for round := 0; ; round++ {
		left := killDescendants()
		reapOrphans()
		if left == 0 {
			break
		}
		if round == 100 {
			r.t.Errorf("cleanup: %d descendants of the test process would not die", left)
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	guardMu.Lock()
	defer guardMu.Unlock()
	for _, v := range violations[r.violations:] {
		r.t.Errorf("GUARD: %s", v)
	}
}

// killDescendants sends SIGKILL (through an identity-checked pidfd) to every
// live descendant of the test process and returns how many it found.
func killDescendants() int {
	n := 0
	for pid, st := range scanProc() {
		if st.State == 'Z' || st.State == 'X' || !descendantOfTest(pid) {
			continue
		}
		n++
		fd, err := unix.PidfdOpen(int(pid), 0)
		if err != nil {
			continue
		}
		if now, err := procfs.ReadStat("", pid); err == nil && now.StartTicks == st.StartTicks {
			_ = unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0)
		}
		unix.Close(fd)
	}
	return n
}

// reapOrphans reaps zombie children of the test process that no exec.Cmd
// waits for (orphans the subreaper adopted).
func reapOrphans() {
	for pid, st := range scanProc() {
		if int(st.PPID) != selfPID || st.State != 'Z' {
			continue
		}
		regMu.Lock()
		mine := registered[int(pid)]
		regMu.Unlock()
		if !mine {
			var ws unix.WaitStatus
			_, _ = unix.Wait4(int(pid), &ws, unix.WNOHANG, nil)
		}
	}
}

// scanProc reads /proc/PID/stat of every process.
func scanProc() map[uint32]procfs.Stat {
	ents, _ := os.ReadDir("/proc")
	out := make(map[uint32]procfs.Stat, len(ents))
	for _, e := range ents {
		pid, err := strconv.ParseUint(e.Name(), 10, 32)
		if err != nil {
			continue
		}
		if st, err := procfs.ReadStat("", uint32(pid)); err == nil {
			out[uint32(pid)] = st
		}
	}
	return out
}

// processOf builds the lineage.Process the graph would hold for a process
// seeded from /proc: coarse start (ticks * 1e7 ns).
func processOf(pid uint32, st procfs.Stat) lineage.Process {
	now, _ := procfs.Read("", pid) // a zombie has no image left to read
	return lineage.Process{
		ID:          lineage.ID{PID: pid, Start: st.StartTicks * lineage.TickNS},
		Parent:      lineage.ID{PID: st.PPID},
		CoarseStart: true,
		Comm:        st.Comm,
		Images:      []lineage.Image{{Filename: now.Filename, Argv: now.Argv, Source: lineage.SourceProc}},
		Exited:      st.State == 'Z' || st.State == 'X',
	}
}

// waitArgv waits until /proc shows pid's argv. cmd.Start returns once
// the child's exec has begun (its close-on-exec pipe closed, its comm
// already the new program's), before the kernel has set up the new argv:
// a member judged in that window (a spare rule on argv) would be judged
// on an empty command line, a window a slow emulated guest makes wide.
// It gives up when the process is gone or after testenv.Bound(5s).
func waitArgv(pid uint32) {
	deadline := time.Now().Add(testenv.Bound(5 * time.Second))
	for time.Now().Before(deadline) {
		if now, err := procfs.Read("", pid); err != nil || len(now.Argv) > 0 {
			return
		}
		time.Sleep(time.Millisecond)
	}
}

// identity reads pid's lineage ID from /proc.
func identity(t testing.TB, pid int) lineage.ID {
	t.Helper()
	st, err := procfs.ReadStat("", uint32(pid))
	if err != nil {
		t.Fatalf("identity of %d: %v", pid, err)
	}
	return lineage.ID{PID: uint32(pid), Start: st.StartTicks * lineage.TickNS}
}

// proc is a process a test started (cmd != nil) or found (a daemon), held
// by a pidfd opened while its identity was known.
type proc struct {
	id   lineage.ID
	fd   int
	cmd  *exec.Cmd
	done chan struct{}
}

// alive reports whether the process has not exited.
func (p *proc) alive() bool { return !pidfdDead(p.fd) }

// waitDead waits up to d for the process to exit.
func (p *proc) waitDead(d time.Duration) bool {
	pfd := []unix.PollFd{{Fd: int32(p.fd), Events: unix.POLLIN}}
	deadline := time.Now().Add(d)
	for {
		ms := int(time.Until(deadline) / time.Millisecond)
		if ms < 0 {
			ms = 0
		}
		n, err := unix.Poll(pfd, ms)
		if err == unix.EINTR {
			continue
		}
		return n > 0 && err == nil
	}
}

// exitSignal is the signal that killed a started child (0 if it exited).
func (p *proc) exitSignal(t testing.TB) syscall.Signal {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
		t.Fatalf("pid %d was not reaped", p.id.PID)
	}
	ws, _ := p.cmd.ProcessState.Sys().(syscall.WaitStatus)
	if !ws.Signaled() {
		return 0
	}
	return ws.Signal()
}

// start starts a child and registers its cleanup.
func (r *rig) start(name string, args ...string) *proc {
	r.t.Helper()
	return r.startCmd(exec.Command(name, args...))
}

func (r *rig) startCmd(cmd *exec.Cmd) *proc {
	r.t.Helper()
	regMu.Lock()
	err := cmd.Start()
	if err == nil {
		registered[cmd.Process.Pid] = true
	}
	regMu.Unlock()
	if err != nil {
		r.t.Fatalf("start %v: %v", cmd.Args, err)
	}
	return r.adopt(cmd)
}

// adopt finishes the bookkeeping of a started, registered cmd.
func (r *rig) adopt(cmd *exec.Cmd) *proc {
	r.t.Helper()
	pid := cmd.Process.Pid
	p := &proc{cmd: cmd, done: make(chan struct{}), fd: -1}
	// Not yet reaped, so /proc/PID is this child, even if it already exited.
	p.id = identity(r.t, pid)
	waitArgv(uint32(pid))
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		r.t.Fatalf("pidfd_open %d: %v", pid, err)
	}
	p.fd = fd
	go func() {
		_ = cmd.Wait()
		regMu.Lock()
		delete(registered, pid)
		regMu.Unlock()
		close(p.done)
	}()
	r.t.Cleanup(func() {
		_ = unix.PidfdSendSignal(p.fd, unix.SIGKILL, nil, 0)
		select {
		case <-p.done:
		case <-time.After(5 * time.Second):
			r.t.Errorf("cleanup: pid %d not reaped", pid)
		}
		unix.Close(p.fd)
	})
	return p
}

// watch holds a process the test did not start directly (a daemon) by a
// pidfd, after checking it is a descendant of the test.
func (r *rig) watch(pid int) *proc {
	r.t.Helper()
	if !descendantOfTest(uint32(pid)) {
		r.t.Fatalf("pid %d is not a descendant of the test", pid)
	}
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		r.t.Fatalf("pidfd_open %d: %v", pid, err)
	}
	p := &proc{id: identity(r.t, pid), fd: fd}
	r.t.Cleanup(func() {
		_ = unix.PidfdSendSignal(p.fd, unix.SIGKILL, nil, 0)
		unix.Close(p.fd)
	})
	return p
}

// startDaemon starts `sh -c 'setsid -f sh -c "echo $$; exec sleep 1000"'`:
// the outer shell forks setsid, which forks again into a new session; the
// daemon prints its pid and becomes sleep, and both parents exit. The
// daemon is reparented to the test process (the subreaper).
func (r *rig) startDaemon() (outer, daemon *proc) {
	r.t.Helper()
	cmd := exec.Command("sh", "-c", `setsid -f sh -c 'echo $$; exec sleep 1000 </dev/null >/dev/null 2>&1'`)
	// An os.File as Stdout is passed as is: Wait does not close our end.
	out, w, err := os.Pipe()
	if err != nil {
		r.t.Fatal(err)
	}
	defer out.Close()
	cmd.Stdout = w
	outer = r.startCmd(cmd)
	w.Close()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		r.t.Fatalf("reading daemon pid: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		r.t.Fatalf("daemon pid %q: %v", line, err)
	}
	// Wait for the exec to sleep so the member has its final image.
	for range 200 {
		if st, err := procfs.ReadStat("", uint32(pid)); err == nil && st.Comm == "sleep" {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	return outer, r.watch(pid)
}

// tree returns a MembersFunc that reads the session from /proc: every
// process whose parent chain reaches one of roots (checked by identity),
// plus every orphan the test process adopted and its descendants (the
// session's reparented processes: a test's only other children are its
// registered bystanders). A root that is gone is returned as exited.
// Descendants of a daemon reparented to init would be lost this way; the
// subreaper keeps them here.
func (r *rig) tree(roots ...lineage.ID) MembersFunc {
	return func() []lineage.Process {
		reapOrphans()
		// Hold the registry across the scan: a registered child reaped
		// during the scan must still count as registered, not as an orphan.
		regMu.Lock()
		defer regMu.Unlock()
		snap := scanProc()
		kids := map[uint32][]uint32{}
		for pid, st := range snap {
			kids[st.PPID] = append(kids[st.PPID], pid)
		}
		seen := map[uint32]bool{}
		var out []lineage.Process
		var walk func(pid uint32)
		walk = func(pid uint32) {
			if seen[pid] {
				return
			}
			seen[pid] = true
			out = append(out, processOf(pid, snap[pid]))
			for _, k := range kids[pid] {
				walk(k)
			}
		}
		for _, root := range roots {
			if st, ok := snap[root.PID]; ok && st.StartTicks == root.Tick() {
				walk(root.PID)
				continue
			}
			out = append(out, lineage.Process{ID: root, Exited: true})
		}
		for _, pid := range kids[uint32(selfPID)] {
			if !registered[int(pid)] {
				walk(pid)
			}
		}
		return out
	}
}

// static returns a MembersFunc that always returns ps.
func static(ps ...lineage.Process) MembersFunc {
	return func() []lineage.Process { return ps }
}

// liveProcess is the Process of a live pid as /proc shows it.
func liveProcess(t testing.TB, pid int) lineage.Process {
	t.Helper()
	st, err := procfs.ReadStat("", uint32(pid))
	if err != nil {
		t.Fatalf("stat %d: %v", pid, err)
	}
	return processOf(uint32(pid), st)
}

// startOnPID starts name args so that it gets exactly pid, by writing
// ns_last_pid = pid-1 right before the fork. Other forks on the machine
// (and new Go runtime threads) can take the pid first; it retries.
func (r *rig) startOnPID(pid int, name string, args ...string) *proc {
	r.t.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	for try := 0; try < 500; try++ {
		cmd := exec.Command(name, args...)
		regMu.Lock()
		err := os.WriteFile("/proc/sys/kernel/ns_last_pid", []byte(strconv.Itoa(pid-1)), 0)
		if err == nil {
			err = cmd.Start()
		}
		if err == nil {
			registered[cmd.Process.Pid] = true
		}
		regMu.Unlock()
		if err != nil {
			r.t.Fatalf("start on pid %d: %v", pid, err)
		}
		p := r.adopt(cmd)
		if cmd.Process.Pid == pid {
			r.t.Logf("pid %d reused after %d tries", pid, try+1)
			return p
		}
		_ = unix.PidfdSendSignal(p.fd, unix.SIGKILL, nil, 0)
		<-p.done
	}
	r.t.Fatalf("could not start a process on pid %d", pid)
	return nil
}

// fakeDoomer records Doom and Undoom calls in one sequence shared with the
// signals the guard observes.
type fakeDoomer struct {
	mu     sync.Mutex
	seq    *int
	doom   map[lineage.ID]int // ID → sequence number of its Doom
	undoom map[lineage.ID]int
}

func newFakeDoomer(seq *int) *fakeDoomer {
	return &fakeDoomer{seq: seq, doom: map[lineage.ID]int{}, undoom: map[lineage.ID]int{}}
}

func (d *fakeDoomer) Doom(id lineage.ID) error {
	guardMu.Lock()
	*d.seq++
	n := *d.seq
	guardMu.Unlock()
	d.mu.Lock()
	d.doom[id] = n
	d.mu.Unlock()
	return nil
}

func (d *fakeDoomer) Undoom(id lineage.ID) error {
	d.mu.Lock()
	d.undoom[id]++
	d.mu.Unlock()
	return nil
}

func (d *fakeDoomer) calls() (doom, undoom int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.doom), len(d.undoom)
}

// testLogger logs through t.Log.
func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tWriter struct{ t testing.TB }

func (w tWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(b), "\n"))
	return len(b), nil
}

// recordOf returns the record of id in rep.
func recordOf(t testing.TB, rep Report, id lineage.ID) KillRecord {
	t.Helper()
	for _, rec := range rep.Records {
		if rec.Process.SameTick(id) {
			return rec
		}
	}
	t.Fatalf("no record for %v in %+v", id, rep.Records)
	return KillRecord{}
}
