package enforcer

import (
	"bufio"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mcptrace/mcptrace/internal/testenv"
	"github.com/mcptrace/mcptrace/lineage"
	"github.com/mcptrace/mcptrace/procfs"
	"github.com/mcptrace/mcptrace/procmatch"
	"github.com/mcptrace/mcptrace/sensor"
)

// setuidHelper is the test binary as the setuid-root helper (test helper
// "setuid"): installed setuid root and started by an unprivileged uid, it
// takes root as every one of its uids (setresuid(0, 0, 0)), then becomes
// `sleep 1000`.
func setuidHelper() {
	if err := syscall.Setresuid(0, 0, 0); err != nil {
		os.Stderr.WriteString("setuid helper: setresuid(0,0,0): " + err.Error() + "\n")
		os.Exit(3)
	}
	sleep, err := exec.LookPath("sleep")
	if err == nil {
		err = syscall.Exec(sleep, []string{"sleep", "1000"}, []string{"PATH=/usr/bin:/bin"})
	}
	os.Stderr.WriteString("setuid helper: exec sleep: " + err.Error() + "\n")
	os.Exit(3)
}

// installSetuidHelper copies the test binary, owned by root and setuid,
// into a directory every user may enter, on a file system that honours
// setuid bits.
func installSetuidHelper(t *testing.T) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	var dir string
	for _, parent := range []string{os.TempDir(), "/var/tmp", filepath.Dir(self)} {
		var st unix.Statfs_t
		if unix.Statfs(parent, &st) == nil && st.Flags&unix.ST_NOSUID == 0 {
			if dir, err = os.MkdirTemp(parent, "mcptrace-setuid-"); err == nil {
				break
			}
		}
		dir = ""
	}
	if dir == "" {
		testenv.Missing(t, "a writable file system without nosuid", "the setuid-root helper must be installed on one")
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	helper := filepath.Join(dir, "setuid-helper")
	testenv.CopyFile(t, self, helper, 0o700)
	// chmod after chown: chown clears the setuid bit.
	if err := os.Chown(helper, 0, 0); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(helper, 0o4755|os.ModeSetuid); err != nil {
		t.Fatal(err)
	}
	return helper
}

// asUID runs cmd as uid (and gid) with no supplementary groups.
func asUID(cmd *exec.Cmd, uid uint32) *exec.Cmd {
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid, NoSetGroups: true}}
	return cmd
}

// waitUIDs waits until pid runs comm with these uids.
func waitUIDs(t *testing.T, pid uint32, comm string, want procfs.UIDs) {
	t.Helper()
	testenv.Eventually(t, "pid "+strconv.Itoa(int(pid))+" to run "+comm, func() (bool, string) {
		st, err := procfs.ReadStat("", pid)
		u, err2 := procfs.ReadUIDs("", pid)
		return err == nil && err2 == nil && st.Comm == comm && u == want, st.Comm
	})
}

// startTrapped starts sh -c script args... and returns once the script
// has said "ready" (after installing its traps: a slow guest may take
// longer than any fixed sleep).
func (r *rig) startTrapped(script string, args ...string) *proc {
	r.t.Helper()
	cmd := exec.Command("sh", append([]string{"-c", script}, args...)...)
	out, w, err := os.Pipe()
	if err != nil {
		r.t.Fatal(err)
	}
	// Open until the test ends: a member whose stdout is still the pipe
	// when a signal's trap runs (between its "ready" and what follows)
	// must not die of SIGPIPE. A CI dry run saw the spared program a
	// member exec's in its SIGTERM trap die so ("broken pipe").
	r.t.Cleanup(func() { out.Close() })
	cmd.Stdout = w
	p := r.startCmd(cmd)
	w.Close()
	if line, err := bufio.NewReader(out).ReadString('\n'); line != "ready\n" {
		r.t.Fatalf("the member said %q (%v), want ready", line, err)
	}
	return p
}

// otherUID is a non-root uid no account uses, for a member of another
// user than the session's owner.
const otherUID = 42424

func TestNonRootOwnerEndsOnlyWhatItCouldSignalItself(t *testing.T) {
	const owner = 65534
	cases := []struct {
		name     string
		owner    uint32
		crossUID bool
		spared   bool // the setuid-root helper and the other user's member
	}{
		{"non-root owner spares the setuid helper and another user's process", owner, false, true},
		{"cross-uid enforcement ends them all", owner, true, false},
		{"a root-owned session ends them all", 0, false, false},
	}
	helper := installSetuidHelper(t)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t)
			bystander := r.start("sleep", "1000")
			// The session's root, uid 65534, starts the setuid helper
			// and a plain sleep, says their pids and exits; both are
			// reparented to the test process (the subreaper).
			cmd := asUID(exec.Command("sh", "-c", `"$0" & echo $!; sleep 1000 & echo $!`, helper), owner)
			cmd.Env = testenv.HelperEnv("setuid")
			outR, outW, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			cmd.Stdout = outW
			root := r.startCmd(cmd)
			outW.Close()
			br := bufio.NewReader(outR)
			var pids []int
			for range 2 {
				line, err := br.ReadString('\n')
				pid, err2 := strconv.Atoi(strings.TrimSpace(line))
				if err != nil || err2 != nil {
					t.Fatalf("reading pids: %q %v %v", line, err, err2)
				}
				pids = append(pids, pid)
			}
			outR.Close()
			<-root.done
			waitUIDs(t, uint32(pids[0]), "sleep", procfs.UIDs{})
			waitUIDs(t, uint32(pids[1]), "sleep", procfs.UIDs{Real: owner, Effective: owner, Saved: owner, FS: owner})
			setuid, same := r.watch(pids[0]), r.watch(pids[1])
			// A process of another non-root user the members include.
			other := r.startCmd(asUID(exec.Command("sleep", "1000"), otherUID))

			seq := 0
			doom := newFakeDoomer(&seq)
			e := New(Config{Policy: PolicyImmediate, CrossUID: tc.crossUID}, doom, testLogger(t))
			members := r.tree(root.id, other.id)
			rep := e.End(t.Context(), Ending{Session: "s1", Reason: "root exited", Owner: tc.owner, Members: members})
			if !rep.Empty || rep.Survivors != 0 {
				t.Fatalf("report %+v", summary(rep))
			}
			if !same.waitDead(time.Second) {
				t.Error("the owner's own member survived")
			}
			for _, p := range []*proc{setuid, other} {
				rec := recordOf(t, rep, p.id)
				if tc.spared {
					time.Sleep(50 * time.Millisecond)
					if !p.alive() {
						t.Errorf("%v, beyond the owner's authority, was killed", p.id)
					}
					if !strings.HasPrefix(rec.Result, ResultSparedPrivilege+": ") || rec.Signal != "" {
						t.Errorf("record %+v, want %s", rec, ResultSparedPrivilege)
					}
					if _, ok := doom.doom[p.id]; ok {
						t.Errorf("%v, spared across a privilege boundary, was doomed", p.id)
					}
					continue
				}
				if !p.waitDead(time.Second) || rec.Result != ResultKilled {
					t.Errorf("%v: record %+v, want killed", p.id, rec)
				}
			}
			want := 0
			if tc.spared {
				want = 2
			}
			if rep.SparedPrivilege != want || rep.Spared != want || e.Stats().SparedPrivilege != uint64(want) {
				t.Errorf("spared across the boundary: report %d (spared %d), stats %d; want %d",
					rep.SparedPrivilege, rep.Spared, e.Stats().SparedPrivilege, want)
			}
			if !bystander.alive() {
				t.Error("the bystander was killed")
			}
		})
	}
}

func uids(real, eff, saved, fs uint32) procfs.UIDs {
	return procfs.UIDs{Real: real, Effective: eff, Saved: saved, FS: fs}
}

func TestMemberThatBecomesRootDuringTheGraceIsSpared(t *testing.T) {
	const owner = 65534
	helper := installSetuidHelper(t)
	r := newRig(t)
	// A member of the owner's session that, on SIGTERM, execs the
	// setuid-root helper: at the SIGKILL phase it is root's process.
	cmd := asUID(exec.Command("sh", "-c", `trap 'exec "$0"' TERM; echo ready; exec >/dev/null; while :; do sleep 0.05; done`, helper), owner)
	cmd.Env = testenv.HelperEnv("setuid")
	out, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	cmd.Stdout = w
	member := r.startCmd(cmd)
	w.Close()
	if line, _ := bufio.NewReader(out).ReadString('\n'); line != "ready\n" {
		t.Fatalf("member said %q", line)
	}
	seq := 0
	doom := newFakeDoomer(&seq)
	e := New(Config{Policy: PolicyGraceful, Grace: testenv.Bound(time.Second)}, doom, testLogger(t))
	rep := e.End(t.Context(), Ending{Session: "s1", Reason: "root exited", Owner: owner, Members: r.tree(member.id)})
	if !rep.Empty || rep.Survivors != 0 {
		t.Fatalf("report %+v", summary(rep))
	}
	time.Sleep(50 * time.Millisecond)
	if !member.alive() {
		t.Fatalf("the member that became root's process was killed (%v)", member.exitSignal(t))
	}
	waitUIDs(t, member.id.PID, "sleep", procfs.UIDs{})
	rec := recordOf(t, rep, member.id)
	if !strings.HasPrefix(rec.Result, ResultSparedPrivilege+": ") || rec.Signal != "SIGTERM" {
		t.Errorf("record %+v, want SIGTERM then %s", rec, ResultSparedPrivilege)
	}
	if _, ok := doom.doom[member.id]; ok {
		t.Error("the member beyond the owner's reach was doomed")
	}
}

func TestMayKillFollowsKill2(t *testing.T) {
	cases := []struct {
		name  string
		owner uint32
		uids  procfs.UIDs
		want  bool
	}{
		{"same user", 1000, uids(1000, 1000, 1000, 1000), true},
		{"setuid program still has the owner as real uid", 1000, uids(1000, 0, 0, 0), true},
		{"dropped privileges keep the owner as saved uid", 1000, uids(0, 0, 1000, 0), true},
		{"effective uid alone does not count", 1000, uids(0, 1000, 0, 1000), false},
		{"setresuid to root", 1000, procfs.UIDs{}, false},
		{"another user", 1000, uids(1001, 1001, 1001, 1001), false},
		{"root may signal anyone", 0, uids(1001, 1001, 1001, 1001), true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := mayKill(tc.owner, tc.uids); got != tc.want {
				t.Errorf("mayKill(%d, %+v) = %v, want %v", tc.owner, tc.uids, got, tc.want)
			}
		})
	}
}

// realDoomer opens the sensor: the kernel's doom, as the agent uses it.
func realDoomer(t *testing.T) *sensor.Sensor {
	t.Helper()
	s, err := sensor.Open(sensor.Options{Logger: testLogger(t)})
	var ferr *sensor.FeatureError
	if errors.As(err, &ferr) {
		testenv.Missing(t, ferr.Feature, ferr.Error())
	}
	if err != nil {
		t.Fatalf("open sensor: %v", err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			if _, err := s.Read(); errors.Is(err, sensor.ErrClosed) {
				return
			}
		}
	}()
	t.Cleanup(func() {
		s.Close()
		<-done
	})
	return s
}

func TestSIGTERMTrapThatForksFinishesItsCleanupWithinTheGrace(t *testing.T) {
	r := newRig(t)
	doom := realDoomer(t)
	done := filepath.Join(t.TempDir(), "DONE")
	// The trap forks (sleep, touch) during the grace: with doom before
	// SIGTERM the kernel killed the shell at its first fork.
	member := r.startTrapped(`trap 'sleep 0.2; touch "$0"; exit 0' TERM; echo ready; exec >/dev/null; while :; do sleep 0.05; done`, done)
	grace := testenv.Bound(2 * time.Second)
	e := New(Config{Policy: PolicyGraceful, Grace: grace}, doom, testLogger(t))
	rep := e.End(t.Context(), Ending{Session: "s1", Reason: "root exited", Members: r.tree(member.id)})
	if !rep.Empty || rep.Survivors != 0 {
		t.Fatalf("report %+v", summary(rep))
	}
	if sig := member.exitSignal(t); sig != 0 || member.cmd.ProcessState.ExitCode() != 0 {
		t.Fatalf("the member ended by signal %v, exit code %d; want its trap to finish and exit 0",
			sig, member.cmd.ProcessState.ExitCode())
	}
	if _, err := os.Stat(done); err != nil {
		t.Fatalf("the trap's cleanup did not finish: %v", err)
	}
	rec := recordOf(t, rep, member.id)
	if rec.Result != ResultKilled || rec.Signal != "SIGTERM" || rec.Latency >= grace {
		t.Errorf("record %+v, want ended by SIGTERM within the grace", rec)
	}
}

func TestSparedProgramExecdByAMemberLives(t *testing.T) {
	spare := []procmatch.Rule{{Name: "kept", Comm: procmatch.Patterns{"tail"}}}
	t.Run("exec'd in the SIGTERM handler", func(t *testing.T) {
		r := newRig(t)
		doom := realDoomer(t)
		member := r.startTrapped(`trap 'exec tail -f /dev/null' TERM; echo ready; exec >/dev/null; while :; do sleep 0.05; done`)
		e := New(Config{Policy: PolicyGraceful, Grace: testenv.Bound(time.Second), Spare: spare}, doom, testLogger(t))
		rep := e.End(t.Context(), Ending{Session: "s1", Reason: "root exited", Members: r.tree(member.id)})
		if !rep.Empty || rep.Survivors != 0 {
			t.Fatalf("report %+v", summary(rep))
		}
		time.Sleep(100 * time.Millisecond)
		if !member.alive() {
			t.Fatalf("the spared program the member exec'd was killed (%v)", member.exitSignal(t))
		}
		if st, _ := procfs.ReadStat("", member.id.PID); st.Comm != "tail" {
			t.Fatalf("the member runs %q, want tail", st.Comm)
		}
		if rec := recordOf(t, rep, member.id); rec.Result != ResultSpared {
			t.Errorf("record %+v, want spared", rec)
		}
	})
	t.Run("exec'd while doomed", func(t *testing.T) {
		r := newRig(t)
		doom := realDoomer(t)
		cmd := exec.Command("sh", "-c", `read go; exec tail -f /dev/null`)
		in, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		member := r.startCmd(cmd)
		time.Sleep(50 * time.Millisecond)
		// Its SIGKILL fails: the sweep gives up and leaves it doomed, a
		// survivor the kernel kills at its next fork or exec.
		real := sendSignal
		sendSignal = func(fd int, pid uint32, sig unix.Signal) error {
			if pid == member.id.PID {
				return unix.EPERM
			}
			return real(fd, pid, sig)
		}
		e := New(Config{Policy: PolicyImmediate, SweepTimeout: 300 * time.Millisecond, Spare: spare}, doom, testLogger(t))
		rep := e.End(t.Context(), Ending{Session: "s1", Reason: "root exited", Members: r.tree(member.id)})
		sendSignal = real
		if rep.Survivors != 1 {
			t.Fatalf("report %+v, want the member to survive", summary(rep))
		}
		before, _ := doom.DoomKills()
		io.WriteString(in, "go\n")
		testenv.Eventually(t, "the member to exec tail (or die)", func() (bool, string) {
			st, err := procfs.ReadStat("", member.id.PID)
			return !member.alive() || err == nil && st.Comm == "tail", st.Comm
		})
		time.Sleep(100 * time.Millisecond)
		if !member.alive() {
			t.Fatalf("the kernel killed the spared program a doomed member exec'd (%v)", member.exitSignal(t))
		}
		after, _ := doom.DoomKills()
		if after.SparedExecs <= before.SparedExecs {
			t.Errorf("doom counters %+v → %+v, want a spared exec", before, after)
		}
		// Ending the session again (as the agent resumes it) spares it.
		rep = e.End(context.Background(), Ending{Session: "s1", Reason: "root exited", Members: r.tree(member.id)})
		if rec := recordOf(t, rep, member.id); rec.Result != ResultSpared || !member.alive() {
			t.Errorf("record %+v (alive %v), want spared", rec, member.alive())
		}
	})
}

func TestInterruptedEndingDoomsItsLiveMembers(t *testing.T) {
	r := newRig(t)
	stubborn := r.startTrapped(ignoreTERM)
	time.Sleep(100 * time.Millisecond)
	seq := 0
	doom := newFakeDoomer(&seq)
	e := New(Config{Policy: PolicyGraceful, Grace: time.Minute}, doom, testLogger(t))
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	rep := e.End(ctx, Ending{Session: "s1", Reason: "root exited", Members: r.tree(stubborn.id)})
	if !rep.Interrupted {
		t.Fatalf("report %+v, want interrupted", summary(rep))
	}
	if _, ok := doom.doom[stubborn.id]; !ok {
		t.Error("the live member of an interrupted ending was left undoomed: nothing holds it until an agent resumes")
	}
	if doom.undoom[stubborn.id] != 0 {
		t.Error("the live member was undoomed")
	}
	if !stubborn.alive() {
		t.Error("the member was killed before its grace ended")
	}
}

// Ending.Verify is asked before a member is admitted and before every
// signal and doom, with /proc read through the held pidfd: a member it
// refuses from the start is never signalled; one that execs another
// program on SIGTERM is refused at the SIGKILL phase and never doomed;
// one it accepts is ended.
func TestVerifyRefusesAMemberBeforeAdmissionAndBeforeEverySignal(t *testing.T) {
	r := newRig(t)
	refused := r.start("sleep", "301")
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sh", "-c", `trap 'exec "$0" 302' TERM; echo ready; exec >/dev/null; while :; do sleep 0.05; done`, sleep)
	out, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	cmd.Stdout = w
	swapped := r.startCmd(cmd)
	w.Close()
	if line, _ := bufio.NewReader(out).ReadString('\n'); line != "ready\n" {
		t.Fatalf("member said %q", line)
	}
	ended := r.start("sleep", "303")
	shell, err := procfs.Read("", swapped.id.PID)
	if err != nil {
		t.Fatal(err)
	}
	var asked int
	verify := func(p lineage.Process, now lineage.Snapshot, uids procfs.UIDs) string {
		asked++
		switch {
		case p.ID == refused.id:
			return "not listed"
		case p.ID == swapped.id && now.Filename != shell.Filename:
			return "another program now"
		}
		return ""
	}
	seq := 0
	doom := newFakeDoomer(&seq)
	e := New(Config{Policy: PolicyGraceful, Grace: testenv.Bound(time.Second)}, doom, testLogger(t))
	rep := e.End(t.Context(), Ending{Session: "s1", Reason: "orphan", Owner: 0, Verify: verify, Members: r.tree(refused.id, swapped.id, ended.id)})
	if rec := recordOf(t, rep, refused.id); rec.Result != ResultRefused+": not listed" || rec.Signal != "" || !refused.alive() {
		t.Errorf("the member refused from the start: %+v (alive %v)", rec, refused.alive())
	}
	if rec := recordOf(t, rep, swapped.id); rec.Result != ResultRefused+": another program now" || rec.Signal != "SIGTERM" || !swapped.alive() {
		t.Errorf("the member that exec'd another program on SIGTERM: %+v (alive %v)", rec, swapped.alive())
	}
	if _, ok := doom.doom[swapped.id]; ok {
		t.Error("the member refused at the SIGKILL phase was doomed")
	}
	if rec := recordOf(t, rep, ended.id); rec.Result != ResultKilled {
		t.Errorf("the member verified: %+v", rec)
	}
	if asked < 4 {
		t.Errorf("Verify asked %d times, want at admission and before each signal", asked)
	}
}
