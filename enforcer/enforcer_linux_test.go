package enforcer

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"slices"
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
	"github.com/mcptrace/mcptrace/procmatch"
)

// ignoreTERM ignores SIGTERM; the ignored disposition is inherited by its
// sleep children, which are session members too.
const ignoreTERM = `trap "" TERM; echo ready; exec >/dev/null; while :; do sleep 0.1; done`

func TestGracefulKillsEveryKindOfMemberAndSparesBystanders(t *testing.T) {
	// Long enough that on a loaded machine (go test ./... runs packages side
	// by side with VM guests) the first SIGTERM round starts within it.
	const grace = 1500 * time.Millisecond
	type started struct {
		roots   []lineage.ID
		watched []*proc               // must be dead after End
		want    map[*proc]unix.Signal // exit signal of started children
	}
	plain := func(r *rig, s *started) {
		p := r.start("sleep", "1000")
		s.roots = append(s.roots, p.id)
		s.watched = append(s.watched, p)
		s.want[p] = unix.SIGTERM
	}
	daemon := func(r *rig, s *started) {
		outer, d := r.startDaemon()
		s.roots = append(s.roots, outer.id, d.id)
		s.watched = append(s.watched, d)
	}
	pgroup := func(r *rig, s *started) {
		cmd := exec.Command("sleep", "1000")
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		p := r.startCmd(cmd)
		s.roots = append(s.roots, p.id)
		s.watched = append(s.watched, p)
		s.want[p] = unix.SIGTERM
	}
	nohup := func(r *rig, s *started) {
		p := r.start("nohup", "sleep", "1000")
		s.roots = append(s.roots, p.id)
		s.watched = append(s.watched, p)
		s.want[p] = unix.SIGTERM
	}
	stubborn := func(r *rig, s *started) {
		p := r.startTrapped(ignoreTERM)
		s.roots = append(s.roots, p.id)
		s.watched = append(s.watched, p)
		s.want[p] = unix.SIGKILL
	}
	cases := []struct {
		name       string
		start      []func(*rig, *started)
		ignoreTERM bool
	}{
		{name: "plain child", start: []func(*rig, *started){plain}},
		{name: "setsid double-forked daemon", start: []func(*rig, *started){daemon}},
		{name: "child in its own process group", start: []func(*rig, *started){pgroup}},
		{name: "nohup child", start: []func(*rig, *started){nohup}},
		{name: "process ignoring SIGTERM dies by SIGKILL after grace", start: []func(*rig, *started){stubborn}, ignoreTERM: true},
		{name: "all at once", start: []func(*rig, *started){plain, daemon, pgroup, nohup, stubborn}, ignoreTERM: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t)
			bystander := r.start("sleep", "1000")
			s := &started{want: map[*proc]unix.Signal{}}
			for _, f := range tc.start {
				f(r, s)
			}
			time.Sleep(150 * time.Millisecond) // let the stubborn shell get to its loop
			e := New(Config{Policy: PolicyGraceful, Grace: grace}, nil, testLogger(t))
			begin := time.Now()
			rep := e.End(t.Context(), Ending{Session: "s1", Reason: "root exited", Members: r.tree(s.roots...)})
			elapsed := time.Since(begin)

			if !rep.Empty || rep.Survivors != 0 || rep.Failed != 0 || rep.Refused != 0 {
				t.Fatalf("report: %+v", rep)
			}
			for _, p := range s.watched {
				if !p.waitDead(time.Second) {
					t.Errorf("member %v survived", p.id)
				}
			}
			for p, sig := range s.want {
				if got := p.exitSignal(t); got != sig {
					t.Errorf("member %v died by %v, want %v", p.id, got, sig)
				}
				rec := recordOf(t, rep, p.id)
				wantSig := "SIGTERM"
				if sig == unix.SIGKILL {
					wantSig = "SIGTERM+SIGKILL"
					if rec.Latency < grace {
						t.Errorf("stubborn member died after %v, before the grace %v", rec.Latency, grace)
					}
				} else if rec.Latency >= grace {
					t.Errorf("member %v took %v to die by SIGTERM", p.id, rec.Latency)
				}
				if rec.Result != ResultKilled || rec.Signal != wantSig || rec.Latency <= 0 {
					t.Errorf("record %+v, want killed by %s", rec, wantSig)
				}
			}
			if tc.ignoreTERM && elapsed < grace {
				t.Errorf("End took %v, less than the grace %v, with a member ignoring SIGTERM", elapsed, grace)
			}
			if !bystander.alive() {
				t.Fatal("the bystander was killed")
			}
			t.Logf("killed %d (escalated %d) in %v", rep.Killed, e.Stats().Escalated, elapsed)
		})
	}
}

func TestImmediateKillsWithSIGKILLAtOnce(t *testing.T) {
	r := newRig(t)
	bystander := r.start("sleep", "1000")
	plain := r.start("sleep", "1000")
	stubborn := r.startTrapped(ignoreTERM)
	time.Sleep(100 * time.Millisecond)

	e := New(Config{Policy: PolicyImmediate, Grace: 10 * time.Second}, nil, testLogger(t))
	ended := procfs.BootTimeNow() - uint64(500*time.Millisecond)
	begin := time.Now()
	rep := e.End(t.Context(), Ending{Session: "s1", EndedAt: ended, Reason: "destroy", Members: r.tree(plain.id, stubborn.id)})
	elapsed := time.Since(begin)

	if !rep.Empty || rep.Survivors != 0 || rep.Killed < 2 {
		t.Fatalf("report: %+v", rep)
	}
	if elapsed > 2*time.Second {
		t.Errorf("immediate End took %v", elapsed)
	}
	for _, p := range []*proc{plain, stubborn} {
		if got := p.exitSignal(t); got != unix.SIGKILL {
			t.Errorf("%v died by %v, want SIGKILL", p.id, got)
		}
		rec := recordOf(t, rep, p.id)
		if rec.Signal != "SIGKILL" || rec.Result != ResultKilled {
			t.Errorf("record %+v", rec)
		}
		if rec.Latency < 500*time.Millisecond {
			t.Errorf("latency %v does not count from the session end 500ms ago", rec.Latency)
		}
	}
	for _, rec := range rep.Records {
		if rec.Signal != "" && rec.Signal != "SIGKILL" {
			t.Errorf("immediate mode sent %s: %+v", rec.Signal, rec)
		}
	}
	if !bystander.alive() {
		t.Fatal("the bystander was killed")
	}
}

func TestAuditModeKillsNothingAndRecordsExactlyTheLiveMembers(t *testing.T) {
	for _, tc := range []struct {
		policy Policy
		signal string
	}{{PolicyGraceful, "SIGTERM"}, {PolicyImmediate, "SIGKILL"}} {
		t.Run(string(tc.policy), func(t *testing.T) {
			r := newRig(t)
			var live []*proc
			for i := range 3 {
				live = append(live, r.start("sleep", strconv.Itoa(1000+i)))
			}
			// A member that already exited while the graph still thinks it
			// is alive, and one the graph knows is gone.
			gone := r.start("true")
			<-gone.done
			lagging := lineage.Process{ID: gone.id, Comm: "true"}
			known := lineage.Process{ID: lineage.ID{PID: 999999, Start: 1}, Exited: true}
			members := []lineage.Process{lagging, known}
			for _, p := range live {
				members = append(members, liveProcess(t, int(p.id.PID)))
			}
			seq := 0
			doom := newFakeDoomer(&seq)
			var sent int
			setOnSend(func(uint32, unix.Signal) { sent++ })
			t.Cleanup(func() { setOnSend(nil) })

			e := New(Config{Mode: ModeAudit, Policy: tc.policy}, doom, testLogger(t))
			rep := e.End(t.Context(), Ending{Session: "s1", Reason: "root exited", Members: static(members...)})

			time.Sleep(200 * time.Millisecond)
			for _, p := range live {
				if !p.alive() {
					t.Errorf("audit mode killed %v", p.id)
				}
			}
			if sent != 0 {
				t.Errorf("audit mode sent %d signals", sent)
			}
			if n, _ := doom.calls(); n != 0 {
				t.Errorf("audit mode doomed %d processes", n)
			}
			var would []lineage.ID
			for _, rec := range rep.Records {
				if rec.Result == ResultWouldKill {
					would = append(would, rec.Process)
					if rec.Signal != tc.signal {
						t.Errorf("would-kill with %q, want %q", rec.Signal, tc.signal)
					}
				}
			}
			var want []lineage.ID
			for _, p := range live {
				want = append(want, p.id)
			}
			cmp := func(a, b lineage.ID) int { return int(a.PID) - int(b.PID) }
			slices.SortFunc(would, cmp)
			slices.SortFunc(want, cmp)
			if !slices.Equal(would, want) {
				t.Errorf("would-kill %v, want exactly the live members %v", would, want)
			}
			if rec := recordOf(t, rep, gone.id); rec.Result != ResultExitedBeforeSignal {
				t.Errorf("lagging member: %+v", rec)
			}
			if rep.WouldKill != 3 || rep.Killed != 0 || rep.Empty || rep.Survivors != 0 || len(rep.Records) != 4 {
				t.Errorf("report: %+v", rep)
			}
		})
	}
}

func TestPIDReuseLeavesTheNewOwnerAlone(t *testing.T) {
	r := newRig(t)
	old := r.start("sleep", "1000")
	stale := liveProcess(t, int(old.id.PID))
	_ = unix.PidfdSendSignal(old.fd, unix.SIGKILL, nil, 0)
	<-old.done
	// The identity check has tick precision: make sure the new owner
	// starts in a later tick than the member did.
	time.Sleep(30 * time.Millisecond)
	reuser := r.startOnPID(int(stale.ID.PID), "sleep", "1000")
	if reuser.id.Tick() == stale.ID.Tick() {
		t.Fatal("reuser started in the same tick")
	}

	e := New(Config{Policy: PolicyImmediate}, nil, testLogger(t))
	rep := e.End(t.Context(), Ending{Session: "s1", Reason: "root exited", Members: static(stale)})

	time.Sleep(100 * time.Millisecond)
	if !reuser.alive() {
		t.Fatal("the process that reused the member's pid was killed")
	}
	rec := recordOf(t, rep, stale.ID)
	if !strings.HasPrefix(rec.Result, "refused: identity mismatch") {
		t.Errorf("record %+v, want refused: identity mismatch", rec)
	}
	if rec.Signal != "" || rep.Killed != 0 || !rep.Empty {
		t.Errorf("report %+v", rep)
	}
}

func TestNeverSignalsInitTheAgentKernelThreadsOrAncestors(t *testing.T) {
	r := newRig(t)
	var thread lineage.Process
	ents, _ := os.ReadDir("/proc/self/task")
	for _, ent := range ents {
		tid, _ := strconv.Atoi(ent.Name())
		if tid != selfPID {
			thread = lineage.Process{ID: lineage.ID{PID: uint32(tid), Start: identity(t, selfPID).Start}}
			break
		}
	}
	if thread.ID.PID == 0 {
		t.Fatal("the test process has no second thread")
	}
	kthreadd := liveProcess(t, 2)
	kthreadd.Kernel = false // make the check at signal time do the work
	kworker := liveProcess(t, 3)
	kworker.Kernel = true
	parent := liveProcess(t, os.Getppid())
	unknown := r.start("sleep", "1000")

	cases := []struct {
		name string
		p    lineage.Process
		why  string
	}{
		{"pid 0", lineage.Process{ID: lineage.ID{PID: 0, Start: 1}}, "pid 0"},
		{"pid 1", liveProcess(t, 1), "pid 1"},
		{"the test process itself", liveProcess(t, selfPID), "the agent itself"},
		{"a thread of the test process", thread, "thread of the agent"},
		{"kthreadd seen as a user process", kthreadd, "kernel thread"},
		{"a kernel thread", kworker, "kernel thread"},
		{"the test's parent", parent, "ancestor of the agent"},
		{"unknown start", lineage.Process{ID: lineage.ID{PID: unknown.id.PID}}, "start time unknown"},
		{"start in the future", lineage.Process{ID: lineage.ID{PID: unknown.id.PID, Start: procfs.BootTimeNow() + uint64(time.Hour)}}, "in the future"},
	}
	var members []lineage.Process
	for _, c := range cases {
		members = append(members, c.p)
	}
	e := New(Config{Policy: PolicyImmediate}, nil, testLogger(t))
	rep := e.End(t.Context(), Ending{Session: "s1", Reason: "root exited", Members: static(members...)})
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rec := recordOf(t, rep, c.p.ID)
			if !strings.HasPrefix(rec.Result, ResultRefused+": ") || !strings.Contains(rec.Result, c.why) {
				t.Errorf("result %q, want refused: …%s…", rec.Result, c.why)
			}
			if rec.Signal != "" {
				t.Errorf("signal %q sent", rec.Signal)
			}
		})
	}
	if rep.Refused != len(cases) || rep.Killed != 0 || !rep.Empty {
		t.Errorf("report %+v", rep)
	}
	if !unknown.alive() {
		t.Error("a member with an unknown start was killed")
	}
}

func TestSpareRuleExemptsMember(t *testing.T) {
	cases := []struct {
		name string
		rule procmatch.Rule
	}{
		{"comm", procmatch.Rule{Comm: procmatch.Patterns{"sleep"}}},
		{"exe glob on base name", procmatch.Rule{Exe: procmatch.Patterns{"sl*p"}}},
		{"exe glob on path", procmatch.Rule{Exe: procmatch.Patterns{"/*/*/sleep"}}},
		{"argv regexp", procmatch.Rule{Argv: procmatch.Patterns{`^sleep 1001$`}}},
		{"comm and argv", procmatch.Rule{Comm: procmatch.Patterns{"sleep"}, Argv: procmatch.Patterns{`1001`}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t)
			keep := r.start("sleep", "1001")
			victim := r.start("tail", "-f", "/dev/null")
			seq := 0
			doom := newFakeDoomer(&seq)
			e := New(Config{Policy: PolicyImmediate, Spare: []procmatch.Rule{tc.rule}}, doom, testLogger(t))
			rep := e.End(t.Context(), Ending{Session: "s1", Reason: "root exited", Members: r.tree(keep.id, victim.id)})
			if rec := recordOf(t, rep, keep.id); rec.Result != ResultSpared || rec.Signal != "" {
				t.Errorf("kept member: %+v", rec)
			}
			if rec := recordOf(t, rep, victim.id); rec.Result != ResultKilled {
				t.Errorf("victim: %+v", rec)
			}
			if !victim.waitDead(time.Second) {
				t.Error("victim survived")
			}
			time.Sleep(50 * time.Millisecond)
			if !keep.alive() {
				t.Error("spared member was killed")
			}
			if _, ok := doom.doom[keep.id]; ok {
				t.Error("spared member was doomed")
			}
			if !rep.Empty || rep.Spared != 1 || rep.Killed != 1 {
				t.Errorf("report %+v", rep)
			}
		})
	}
}

func TestSweepCatchesMembersForkingWhileBeingKilled(t *testing.T) {
	// The host's 20 trials shake out races; a guest's 6 prove the path on
	// its kernel. The sweep's own bound is scaled as every wait is: a
	// guest starved by a busy host took 12.8 s to send its first signal
	// (5.10 and 6.1 guests of a loaded CI dry run) and ran out of 10 s.
	trials := testenv.Sized(20, 6)
	total := 0
	for i := range trials {
		policy := PolicyGraceful
		if i%2 == 1 {
			policy = PolicyImmediate
		}
		r := newRig(t)
		bystander := r.start("sleep", "1000")
		root := r.start("sh", "-c", "while :; do sleep 100 & done")
		time.Sleep(30 * time.Millisecond)
		e := New(Config{Policy: policy, Grace: 200 * time.Millisecond, SweepTimeout: testenv.Bound(10 * time.Second)}, nil, testLogger(t))
		rep := e.End(t.Context(), Ending{Session: fmt.Sprintf("trial-%d", i), Reason: "root exited", Members: r.tree(root.id)})
		if !rep.Empty || rep.Survivors != 0 {
			t.Fatalf("trial %d (%s): report %+v", i, policy, summary(rep))
		}
		// Nothing the session created is left: the only live descendant
		// of the test process is the bystander.
		for pid, st := range scanProc() {
			if st.State != 'Z' && descendantOfTest(pid) && pid != bystander.id.PID {
				t.Fatalf("trial %d (%s): pid %d (%s) survived; report %+v", i, policy, pid, st.Comm, summary(rep))
			}
		}
		if !bystander.alive() {
			t.Fatalf("trial %d: the bystander was killed", i)
		}
		total += rep.Killed
		t.Logf("trial %d (%s): killed %d, exited %d in %v", i, policy, rep.Killed, rep.ExitedBeforeSignal, rep.Duration)
		r.cleanup()
	}
	t.Logf("%d trials, %d processes killed, 0 survivors", trials, total)
}

func summary(rep Report) Report {
	rep.Records = nil
	return rep
}

func TestDoomsEveryMemberBeforeSIGKILLAndNoneBeforeSIGTERM(t *testing.T) {
	for _, policy := range []Policy{PolicyGraceful, PolicyImmediate} {
		t.Run(string(policy), func(t *testing.T) {
			r := newRig(t)
			var roots []lineage.ID
			for range 3 {
				roots = append(roots, r.start("sleep", "1000").id)
			}
			roots = append(roots, r.start("sh", "-c", "sleep 1000 & sleep 1000 & wait").id)
			// Ignores SIGTERM: under the graceful policy it reaches the
			// SIGKILL phase.
			stubborn := r.startTrapped(ignoreTERM)
			roots = append(roots, stubborn.id)
			time.Sleep(100 * time.Millisecond)

			seq := 0
			doom := newFakeDoomer(&seq)
			type send struct {
				pid uint32
				sig unix.Signal
				seq int
			}
			var mu sync.Mutex
			var sends []send
			setOnSend(func(pid uint32, sig unix.Signal) {
				guardMu.Lock()
				seq++
				n := seq
				guardMu.Unlock()
				mu.Lock()
				sends = append(sends, send{pid, sig, n})
				mu.Unlock()
			})
			t.Cleanup(func() { setOnSend(nil) })

			members := r.tree(roots...)
			e := New(Config{Policy: policy, Grace: 300 * time.Millisecond}, doom, testLogger(t))
			rep := e.End(t.Context(), Ending{Session: "s1", Reason: "root exited", Members: members})
			if !rep.Empty || rep.Killed < len(roots) {
				t.Fatalf("report %+v", summary(rep))
			}
			doomedAt := func(pid uint32) (int, bool) {
				doom.mu.Lock()
				defer doom.mu.Unlock()
				for id, n := range doom.doom {
					if id.PID == pid {
						return n, true
					}
				}
				return 0, false
			}
			kills := 0
			for _, s := range sends {
				n, doomed := doomedAt(s.pid)
				switch s.sig {
				case unix.SIGKILL:
					kills++
					if !doomed || n > s.seq {
						t.Errorf("pid %d sent SIGKILL (#%d) without being doomed first", s.pid, s.seq)
					}
				case unix.SIGTERM:
					if doomed && n < s.seq {
						t.Errorf("pid %d doomed (#%d) before its SIGTERM (#%d): it could not fork or exec in its grace", s.pid, n, s.seq)
					}
				}
			}
			if kills == 0 {
				t.Fatal("no SIGKILL sent")
			}
			if _, ok := doomedAt(stubborn.id.PID); !ok {
				t.Error("the member that ignored SIGTERM was not doomed before its SIGKILL")
			}
			for id := range doom.doom {
				if doom.undoom[id] != 1 {
					t.Errorf("%v doomed but undoomed %d times", id, doom.undoom[id])
				}
			}
		})
	}
}

func TestConcurrentSessions(t *testing.T) {
	r := newRig(t)
	const sessions = 4
	roots := make([][]lineage.ID, sessions)
	for i := range sessions {
		for range 3 {
			roots[i] = append(roots[i], r.start("sleep", "1000").id)
		}
	}
	e := New(Config{Policy: PolicyGraceful, Grace: 200 * time.Millisecond}, nil, testLogger(t))
	reps := make([]Report, sessions)
	var wg sync.WaitGroup
	for i := range sessions {
		wg.Go(func() {
			reps[i] = e.End(context.Background(), Ending{Session: fmt.Sprintf("s%d", i), Reason: "root exited", Members: r.tree(roots[i]...)})
		})
	}
	wg.Wait()
	for i, rep := range reps {
		if !rep.Empty || rep.Killed != 3 {
			t.Errorf("session %d: %+v", i, summary(rep))
		}
	}
	if got := e.Stats(); got.Sessions != sessions || got.Killed != 3*sessions {
		t.Errorf("stats %+v", got)
	}
	if got := len(e.Records()); got != 3*sessions {
		t.Errorf("%d records: %+v", got, e.Records())
	}
}

func TestTimeoutReportsSurvivors(t *testing.T) {
	r := newRig(t)
	p := r.start("sleep", "1000")
	// A member the enforcer cannot signal: the guard refuses it (EPERM),
	// as it would refuse a process the test did not start.
	real := sendSignal
	sendSignal = func(int, uint32, unix.Signal) error { return unix.EPERM }
	t.Cleanup(func() { sendSignal = real })
	e := New(Config{Policy: PolicyImmediate, SweepTimeout: 300 * time.Millisecond}, nil, testLogger(t))
	rep := e.End(t.Context(), Ending{Session: "s1", Reason: "root exited", Members: r.tree(p.id)})
	if rep.Empty || rep.Survivors != 1 || rep.Failed != 1 {
		t.Fatalf("report %+v", rep)
	}
	if rec := recordOf(t, rep, p.id); !strings.Contains(rec.Result, "still alive") {
		t.Errorf("record %+v", rec)
	}
	if st := e.Stats(); st.Timeouts != 1 || st.Survivors != 1 {
		t.Errorf("stats %+v", st)
	}
}

// TestRecordsRedactArgvAndLogsCarryNone: a kill record holds the member's
// argv redacted (for the API, which shows it to whom may see it); the
// log names the member without any argv (docs/SECURITY.md: the agent
// never logs argv).
func TestRecordsRedactArgvAndLogsCarryNone(t *testing.T) {
	r := newRig(t)
	p := r.start("sh", "-c", "sleep 1000; :", "sh", "--token=hunter2secret")
	var logs strings.Builder
	var mu sync.Mutex
	log := slog.New(slog.NewTextHandler(writerFunc(func(b []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return logs.Write(b)
	}), &slog.HandlerOptions{Level: slog.LevelDebug}))
	e := New(Config{Policy: PolicyImmediate}, nil, log)
	rep := e.End(t.Context(), Ending{Session: "s1", Reason: "root exited", Members: r.tree(p.id)})
	rec := recordOf(t, rep, p.id)
	if !slices.Contains(rec.Argv, "--token=<redacted>") {
		t.Errorf("argv %q, want the token redacted", rec.Argv)
	}
	for _, rec := range e.Records() {
		if strings.Contains(strings.Join(rec.Argv, " "), "hunter2") {
			t.Fatalf("argv not redacted in Records: %q", rec.Argv)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if strings.Contains(logs.String(), "hunter2") {
		t.Fatalf("raw argv logged:\n%s", logs.String())
	}
	if strings.Contains(logs.String(), "argv") || strings.Contains(logs.String(), "redacted") || strings.Contains(logs.String(), "sleep 1000") {
		t.Fatalf("the kill was logged with its argv:\n%s", logs.String())
	}
	if !strings.Contains(logs.String(), fmt.Sprintf("msg=killed session=s1 owner_uid=0 pid=%d", p.id.PID)) {
		t.Fatalf("the kill was not logged:\n%s", logs.String())
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }
