package agent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mcptrace/mcptrace/api"
	"github.com/mcptrace/mcptrace/enforcer"
	"github.com/mcptrace/mcptrace/history"
	"github.com/mcptrace/mcptrace/internal/agenttest"
	"github.com/mcptrace/mcptrace/internal/testenv"
	"github.com/mcptrace/mcptrace/lineage"
	"github.com/mcptrace/mcptrace/sessions"
	"github.com/mcptrace/mcptrace/state"
)

// checkSessionA checks the history's answer for sessionA after its root
// was killed: every member, the dead wrapper among them, and a kill
// record for the daemon and the child.
func checkSessionA(t *testing.T, d api.SessionDetail, s *sessionA) {
	t.Helper()
	var procs []string
	seen := map[uint32]bool{}
	wrapper := false
	for _, p := range d.Processes {
		procs = append(procs, fmt.Sprintf("%d %s exited=%v", p.ID.PID, p.Comm, p.Exited))
		seen[p.ID.PID] = true
		if p.Comm == "sh" && p.Exited {
			wrapper = true
		}
	}
	for _, p := range s.all {
		if !seen[p.PID] {
			t.Errorf("the history's session lacks %s; it has %s", p, strings.Join(procs, "; "))
		}
	}
	if !wrapper {
		t.Errorf("the history's session lacks the exited sh wrapper: %s", strings.Join(procs, "; "))
	}
	killed := map[uint32]bool{}
	for _, k := range d.Kills {
		if k.Result == enforcer.ResultKilled {
			killed[k.Process.PID] = true
		}
	}
	if !killed[s.daemon.PID] || !killed[s.child.PID] {
		t.Errorf("kill records %+v lack the daemon %d or the child %d", d.Kills, s.daemon.PID, s.child.PID)
	}
	if d.Session.State != sessions.Ended || d.Session.Enforcement == nil {
		t.Errorf("the history's session: state %s, enforcement %+v", d.Session.State, d.Session.Enforcement)
	}
}

// TestHistoryAnswersForSessionsTheAgentForgotAndAcrossARestart: a
// session that ended and left the agent's memory (sessions.retention),
// and the same after a SIGKILL and restart of the agent, is shown by
// tree --session with its dead wrapper, its members and kill records;
// another user's session is neither listed nor shown to a user, and its
// secrets are nowhere on disk.
func TestHistoryAnswersForSessionsTheAgentForgotAndAcrossARestart(t *testing.T) {
	ag := agenttest.StartProcess(t, "--sessions.retention=1s", "--lineage.retention=1s")
	s := startSessionA(t, ag, "hist-a")

	// A session of nobody's with a secret on its command line.
	const nobody = 65534
	const secret = "s3cr3tHistoryValue42"
	env := fmt.Sprintf("MCPTRACE_HISTORY_TEST=%d", os.Getpid())
	theirs := exec.Command(ag.Bin, "run", "--session", "hist-n", "--", "sh", "-c", "sleep 1003 & exec sleep 1004", "sh", "--token", secret)
	theirs.Env = append(os.Environ(), env)
	theirs.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	if err := theirs.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, p := range agenttest.WithEnv(env) {
			p.Kill()
		}
		theirs.Process.Kill()
		theirs.Wait()
	})
	testenv.Eventually(t, "nobody's session with its two processes", func() (bool, string) {
		d, err := ag.Client().Session(context.Background(), "hist-n", ptr(uint32(nobody)))
		if err != nil {
			return false, err.Error()
		}
		return len(d.Processes) >= 2, fmt.Sprint(len(d.Processes), " members")
	})

	aliveAt := time.Now()
	time.Sleep(50 * time.Millisecond) // the session's members are seconds old by then: aliveAt is within their lives
	s.root.Kill()
	s.rootCmd.Wait()
	s.waitNoSurvivor(t, "session hist-a's members dead")
	theirs.Process.Kill()
	theirs.Wait()
	testenv.Eventually(t, "nobody's members dead", func() (bool, string) {
		left := agenttest.WithEnv(env)
		return len(left) == 0, fmt.Sprint(left)
	})

	d := agenttest.Recorded(t, ag, "hist-a")
	checkSessionA(t, d, s)
	out, err := ag.CLI("tree", "--session", "hist-a")
	t.Logf("tree --session hist-a from the history:\n%s", out)
	if err != nil || !strings.Contains(out, "from the history") {
		t.Fatalf("tree --session from the history: %v\n%s", err, out)
	}

	// The daemon and its dead wrapper's place, as they were when alive.
	past, err := ag.Client().TreeAt(context.Background(), s.root.PID, aliveAt)
	if err != nil {
		t.Fatalf("tree %d --at: %v", s.root.PID, err)
	}
	var alive []uint32
	for _, p := range past.Processes {
		if !p.Exited {
			alive = append(alive, p.ID.PID)
		}
	}
	for _, p := range s.all {
		if !slices.Contains(alive, p.PID) {
			t.Errorf("tree %d --at %s: alive %v, lacks %s", s.root.PID, aliveAt.Format(time.RFC3339Nano), alive, p)
		}
	}
	if _, err := ag.Client().TreeAt(context.Background(), s.root.PID, aliveAt.Add(-time.Hour)); err == nil {
		t.Errorf("tree %d --at an hour before it was born answered", s.root.PID)
	}

	// The timeline of the past session: a row per member, a cross per kill.
	svg, err := ag.CLI("tree", "--session", "hist-a", "--format", "svg")
	if err != nil {
		t.Fatalf("tree --format svg: %v\n%s", err, svg)
	}
	if rows, kills := strings.Count(svg, `<g class="proc"`), strings.Count(svg, `<g class="kill"`); rows != len(d.Processes) || kills != 2 {
		t.Errorf("the timeline has %d rows and %d kills, want %d and 2", rows, kills, len(d.Processes))
	}

	ag.Stop(syscall.SIGKILL)
	ag.Start()
	d = agenttest.Recorded(t, ag, "hist-a")
	checkSessionA(t, d, s)
	out, err = ag.CLI("history")
	t.Logf("history after a restart:\n%s", out)
	if err != nil || !strings.Contains(out, "hist-a") || !strings.Contains(out, "hist-n") {
		t.Fatalf("root's history lacks a session: %v\n%s", err, out)
	}

	// nobody sees its own session only, from the history too, redacted.
	code, out := agenttest.CLIAs(t, ag.Socket, nobody, "history", "--json")
	var list api.HistoryList
	if code != 0 || json.Unmarshal([]byte(out), &list) != nil {
		t.Fatalf("history as nobody: exit %d\n%s", code, out)
	}
	var ids []string
	for _, hs := range list.Sessions {
		ids = append(ids, hs.ID)
	}
	if !slices.Equal(ids, []string{"hist-n"}) {
		t.Errorf("nobody's history lists %v, want its own hist-n only", ids)
	}
	if code, out := agenttest.CLIAs(t, ag.Socket, nobody, "tree", "--session", "hist-a", "--owner", "0"); code == 0 || strings.Contains(out, "sleep") {
		t.Errorf("nobody was shown root's past session: exit %d\n%s", code, out)
	}
	code, out = agenttest.CLIAs(t, ag.Socket, nobody, "tree", "--session", "hist-n")
	if code != 0 || !strings.Contains(out, "sleep") || !strings.Contains(out, "recorded") {
		t.Errorf("nobody's own past session: exit %d\n%s", code, out)
	}
	if strings.Contains(out, secret) {
		t.Errorf("the history showed nobody its own secret unredacted:\n%s", out)
	}
	// The secret never reached the disk: not the store, not the events'
	// segments.
	var b []byte
	err = filepath.WalkDir(ag.HistoryDir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		f, err := os.ReadFile(path)
		b = append(b, f...)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), secret) {
		t.Errorf("the history's files hold the secret %q", secret)
	}
	if !strings.Contains(string(b), "sleep") {
		t.Errorf("the history's files hold no command line at all (%d bytes): the secret check proves nothing", len(b))
	}
}

func ptr[T any](v T) *T { return &v }

// TestHistoryLosesNothingWhenTheAgentIsKilledInALoop: a storm of execs
// runs while the agent is SIGKILLed and started again 20 times (5 in an
// emulated guest). Each time the store opens; in the end it holds every
// exec of the storm: what a kill took from the history's queue came back
// from the state journal's replay, what happened while the agent was
// down from the kernel's buffer.
func TestHistoryLosesNothingWhenTheAgentIsKilledInALoop(t *testing.T) {
	rounds := testenv.Sized(10, 5)
	ag := agenttest.StartProcess(t)
	stop := filepath.Join(t.TempDir(), "stop")
	storm := exec.Command("bash", "-c", `i=0; while [ ! -e "$1" ]; do /bin/true "storm-$i"; i=$((i+1)); done; echo $i`, "bash", stop)
	var out strings.Builder
	storm.Stdout = &out
	if err := storm.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { storm.Process.Kill(); storm.Wait() })
	for r := range rounds {
		time.Sleep(time.Duration(50+r*37%250) * time.Millisecond)
		ag.Stop(syscall.SIGKILL)
		ag.Start()
		st, err := ag.Client().Status(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if st.History.Stats == nil || st.History.Stats.MovedAside != "" || st.History.Stats.Corrupt {
			t.Fatalf("round %d: the history after a SIGKILL: %+v", r, st.History)
		}
	}
	if err := os.WriteFile(stop, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := storm.Wait(); err != nil {
		t.Fatal(err)
	}
	var n int
	fmt.Sscan(out.String(), &n)
	// The agent has applied the storm's last exec before it stops.
	testenv.Eventually(t, "the agent to see the storm's last exec", func() (bool, string) {
		l, err := ag.Client().Tree(context.Background(), uint32(os.Getpid()))
		if err != nil {
			return false, err.Error()
		}
		for _, p := range l.Processes {
			if im := p.Current(); len(im.Argv) == 2 && im.Argv[1] == fmt.Sprintf("storm-%d", n-1) {
				return true, ""
			}
		}
		return false, "not yet"
	})
	st, _ := ag.Client().Status(context.Background())
	ag.Stop(syscall.SIGTERM)

	j, err := history.Open(history.Options{Dir: ag.HistoryDir})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	seen := make([]bool, n)
	execs, dups := 0, 0
	err = j.EventsBetween(time.Time{}, time.Now().Add(time.Hour), func(_ time.Time, data []byte) bool {
		ev, err := state.DecodeEvent(data)
		if err != nil {
			t.Fatalf("a record of the history does not decode: %v", err)
		}
		if ev.Kind == lineage.KindExec && len(ev.Argv) == 2 && ev.Argv[0] == "/bin/true" {
			var i int
			if _, err := fmt.Sscanf(ev.Argv[1], "storm-%d", &i); err == nil && i < n {
				if seen[i] {
					// While an agent takes over its predecessor's programs
					// both sets report, microseconds apart; the graph
					// merges the two, the history keeps what the kernel said.
					dups++
				}
				seen[i] = true
				execs++
			}
		}
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	var missing []int
	for i, ok := range seen {
		if !ok {
			missing = append(missing, i)
		}
	}
	t.Logf("%d rounds of SIGKILL and start; the storm ran %d execs; the history holds %d records of them (%d twice, as the kernel reported them); the kernel lost %v",
		rounds, n, execs, dups, st.Lost)
	if len(missing) > 0 {
		t.Errorf("the history lacks %d of the storm's %d execs (first: %v)", len(missing), n, missing[:min(len(missing), 10)])
	}
}

// TestHistoryUsageGoesOnAcrossARestart: the usage columns of a session's
// record (PEAK RSS, CPU, KILLED RSS) go on from what an earlier agent
// recorded after a clean restart. An ended session the agent still lists
// is recorded again by the next agent, whose samples never saw its
// members: before, its columns then read "-". It waits for the history's
// writer (a record every few seconds) twice, hence its ~8 s on the host.
func TestHistoryUsageGoesOnAcrossARestart(t *testing.T) {
	ag := agenttest.StartProcess(t, "--metrics.sample-interval=100ms")
	env := fmt.Sprintf("MCPTRACE_HISTORY_USAGE_TEST=%d", os.Getpid())
	// A member (not the root: the host's own usage is not the
	// session's) that burns some CPU, then waits. It is a server: started
	// on the host's stdin and stdout, pipes (roles: a process on
	// /dev/null is no server, and sh gives a background job /dev/null
	// before its own redirections: the pipe is kept as fd 3 for it).
	root := exec.Command(ag.Bin, "run", "--session", "hist-use", "--", "sh", "-c",
		`exec 3<&0; (i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done; exec sleep 1000 3<&-) <&3 & exec sleep 1001 3<&-`)
	root.Env = append(os.Environ(), env)
	inR, inW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	root.Stdin, root.Stdout = inR, outW
	if err := root.Start(); err != nil {
		t.Fatal(err)
	}
	inR.Close()
	outW.Close()
	t.Cleanup(func() {
		inW.Close()
		outR.Close()
		for _, p := range agenttest.WithEnv(env) {
			p.Kill()
		}
		root.Process.Kill()
		root.Wait()
	})
	c := ag.Client()
	testenv.Eventually(t, "the session's member done with its CPU, sleeping", func() (bool, string) {
		d, err := c.Session(context.Background(), "hist-use", nil)
		if err != nil {
			return false, err.Error()
		}
		n := 0
		for _, p := range d.Processes {
			if p.Comm == "sleep" && !p.Exited {
				n++
			}
		}
		return n == 2, fmt.Sprint(n, " sleeping")
	})
	seen := time.Now()
	testenv.Eventually(t, "a metrics sample of the sleeping member", func() (bool, string) {
		st, err := c.Status(context.Background())
		if err != nil {
			return false, err.Error()
		}
		age := time.Duration(st.Metrics.SampleAgeSeconds * float64(time.Second))
		return st.Metrics.SampleAgeSeconds > 0 && age < time.Since(seen), fmt.Sprint("last sample ", age, " ago")
	})
	root.Process.Kill()
	root.Wait()
	record := func() (history.Session, error) {
		list, err := c.History(context.Background(), api.HistoryQuery{ID: "hist-use", From: time.Now().Add(-time.Hour)})
		if err != nil {
			return history.Session{}, err
		}
		if len(list.Sessions) != 1 {
			return history.Session{}, fmt.Errorf("%d records", len(list.Sessions))
		}
		return list.Sessions[0], nil
	}
	var before history.Session
	testenv.Eventually(t, "the record of the session's end, with its usage", func() (bool, string) {
		var err error
		before, err = record()
		if err != nil {
			return false, err.Error()
		}
		return !before.Ended.IsZero() && before.PeakRSS > 0 && before.CPUSeconds > 0 && before.KilledRSS > 0,
			fmt.Sprintf("ended %v, peak %d, cpu %v, killed rss %d", before.Ended, before.PeakRSS, before.CPUSeconds, before.KilledRSS)
	})

	ag.Stop(syscall.SIGTERM)
	restarted := time.Now()
	ag.Start()
	var after history.Session
	testenv.Eventually(t, "the ended session recorded again by the restarted agent", func() (bool, string) {
		var err error
		after, err = record()
		if err != nil {
			return false, err.Error()
		}
		return after.Written.After(restarted), fmt.Sprintf("written %v, restarted %v", after.Written, restarted)
	})
	if after.PeakRSS != before.PeakRSS || after.CPUSeconds != before.CPUSeconds || after.KilledRSS != before.KilledRSS {
		t.Errorf("after the restart: peak %d, cpu %v, killed rss %d; before: peak %d, cpu %v, killed rss %d",
			after.PeakRSS, after.CPUSeconds, after.KilledRSS, before.PeakRSS, before.CPUSeconds, before.KilledRSS)
	}
	out, err := ag.CLI("history", "--id", "hist-use")
	// The usage columns follow ENDED BY: none of them reads "-" (SERVERS
	// does: sleep names no server).
	_, usage, _ := strings.Cut(out, "root-exit")
	usage, _, _ = strings.Cut(usage, "\n")
	if err != nil || !strings.Contains(out, "KILLED RSS") || strings.Contains(out, "LEAKED") || usage == "" || strings.Contains(usage+" ", " - ") {
		t.Errorf("history --id hist-use: %v\n%s", err, out)
	}
	t.Logf("history --id hist-use after a restart:\n%s", out)
}

// TestAnExecFloodOfNobodysLeavesRootsHistory: issue 31's flood, with
// real processes: two exec loops of uid 65534, each /bin/true with a
// 4,000-byte argv, write several times the store's size (4 MiB here).
// Root's ended session stays in the history as it was, and only uid
// 65534's records are evicted, counted under its uid and in the metrics.
// Before per-uid retention root's session was gone after 70 s at 256 MiB.
func TestAnExecFloodOfNobodysLeavesRootsHistory(t *testing.T) {
	const maxBytes = 4 << 20
	ag := agenttest.StartProcess(t, "--sessions.retention=1s", "--lineage.retention=1s", fmt.Sprintf("--history.max-bytes=%d", maxBytes))
	s := startSessionA(t, ag, "hist-flood")
	s.root.Kill()
	s.rootCmd.Wait()
	s.waitNoSurvivor(t, "session hist-flood's members dead")
	before := agenttest.Recorded(t, ag, "hist-flood")
	checkSessionA(t, before, s)

	const nobody = 65534
	stop := agenttest.ExecFlood(t, nobody, 2)
	// Until uid 65534 has written three times the store, 90 s at most
	// (an emulated guest execs slower).
	var st api.Status
	start := time.Now()
	deadline := start.Add(90 * time.Second)
	for {
		var err error
		if st, err = ag.Client().Status(context.Background()); err != nil {
			t.Fatal(err)
		}
		if hs := st.History.Stats; hs != nil && hs.Pruned > 0 && hs.Evicted[nobody] > 0 && hs.Events*4000 > 3*maxBytes {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("uid 65534's exec loops did not fill the history in 90 s: %+v", st.History.Stats)
		}
		time.Sleep(500 * time.Millisecond)
	}
	stop()
	hs := st.History.Stats
	t.Logf("in %s: %d events written, %d records evicted by uid %v, store %d bytes (bound %d)",
		time.Since(start).Round(time.Second), hs.Events, hs.Pruned, hs.Evicted, hs.FileBytes, maxBytes)
	for uid := range hs.Evicted {
		if uid != nobody {
			t.Errorf("records of uid %d were evicted for a flood of uid %d's: %v", uid, nobody, hs.Evicted)
		}
	}
	if hs.FileBytes > maxBytes {
		t.Errorf("the store takes %d bytes, bound %d", hs.FileBytes, maxBytes)
	}
	after := agenttest.Recorded(t, ag, "hist-flood")
	checkSessionA(t, after, s)
	if len(after.Processes) != len(before.Processes) || len(after.Kills) != len(before.Kills) {
		t.Errorf("root's session changed in the flood: %d processes and %d kills, before %d and %d",
			len(after.Processes), len(after.Kills), len(before.Processes), len(before.Kills))
	}
	body := scrape(t, strings.TrimSuffix(strings.TrimPrefix(ag.MetricsURL(), "http://"), "/metrics"))
	if !regexp.MustCompile(`(?m)^mcptrace_history_records_total\{result="evicted"\} [1-9]`).MatchString(body) {
		t.Errorf("the metrics count no eviction after %d:\n%s", hs.Evicted[nobody], grepLines(body, "mcptrace_history_records_total"))
	}
}
