package e2e_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/mcptrace/mcptrace/internal/agenttest"
	"github.com/mcptrace/mcptrace/internal/testenv"
	"github.com/mcptrace/mcptrace/lineage"
	"github.com/mcptrace/mcptrace/procfs"
)

// The hostile-users test's bounds (issue 31, docs/SECURITY.md).
const (
	hostileFor     = 60 * time.Second
	hostileP99     = 50 * time.Millisecond // root's API requests
	hostileRSS     = 256 << 20             // the agent's resident memory at most
	hostileHistory = 6 << 20               // history.max-bytes: the flood fills it several times
	hostileGap     = 2 * time.Second       // longest time between two of Prometheus' scrapes
)

// hostileHelper is one hostile client of another uid, run as uid 65534
// for $MCPTRACE_HOSTILE_FOR: it holds as many keep-alive connections to
// the metrics port as it can, asking / on each every 500 ms (issue 31:
// 8 such blocked every scrape), and asks the API in a loop for what
// costs the agent most or writes its log: orphans and their dry-run
// ending, the history, `tree PID --at`, root's session, its end and a
// marker it may not send. It prints what it got.
func hostileHelper() {
	until := time.Now().Add(mustDuration(os.Getenv("MCPTRACE_HOSTILE_FOR")))
	metrics, socket := os.Getenv("MCPTRACE_HOSTILE_METRICS"), os.Getenv("MCPTRACE_HOSTILE_SOCKET")
	var held, refused, answered atomic.Int64
	var wg sync.WaitGroup
	for range 12 {
		wg.Go(func() {
			for time.Now().Before(until) {
				c, err := net.DialTimeout("tcp", metrics, time.Second)
				if err != nil {
					refused.Add(1)
					time.Sleep(50 * time.Millisecond)
					continue
				}
				held.Add(1)
				keepAsking(c, until, 500*time.Millisecond, func(int) string { return "GET / HTTP/1.1\r\nHost: x\r\n\r\n" })
				held.Add(-1)
				refused.Add(1)
			}
		})
	}
	// As a member of the engine's group, under the name docker: `POST /`
	// lines at the engine's socket as fast as it answers (issue 31: they
	// used up the kernel's request budget, and root's session claimed
	// none of its containers).
	var posted atomic.Int64
	if engine := os.Getenv("MCPTRACE_HOSTILE_ENGINE"); engine != "" {
		for range 1 {
			wg.Go(func() {
				for time.Now().Before(until) {
					c, err := net.Dial("unix", engine)
					if err != nil {
						time.Sleep(50 * time.Millisecond)
						continue
					}
					posted.Add(int64(keepAsking(c, until, 0, func(n int) string {
						return fmt.Sprintf("POST /v1.41/containers/hostile-%d/start HTTP/1.1\r\nHost: docker\r\nContent-Length: 0\r\n\r\n", n)
					})))
				}
			})
		}
	}
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socket)
		}}}
	at := url.QueryEscape(os.Getenv("MCPTRACE_HOSTILE_AT"))
	reqs := [][2]string{
		{"POST", "/v1/orphans/end"}, {"GET", "/v1/orphans"}, {"GET", "/v1/history"},
		{"GET", "/v1/tree/" + os.Getenv("MCPTRACE_HOSTILE_PID") + "?at=" + at},
		{"GET", "/v1/sessions/hostile-root-0?owner=0"}, {"POST", "/v1/sessions/hostile-root-0/end"},
		{"POST", "/v1/mark"},
	}
	bodies := map[string]string{"/v1/orphans/end": `{"dry_run":true,"include_likely":true}`, "/v1/mark": `{"session":"hostile-root-0"}`, "/v1/sessions/hostile-root-0/end": "{}"}
	for range 2 { // 8 API connections of uid 65534 in all, as issue 31 used
		wg.Go(func() {
			for n := 0; time.Now().Before(until); n++ {
				r := reqs[n%len(reqs)]
				req, _ := http.NewRequest(r[0], "http://mcptrace"+r[1], strings.NewReader(bodies[r[1]]))
				resp, err := client.Do(req)
				if err != nil {
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				answered.Add(1)
			}
		})
	}
	wg.Wait()
	fmt.Printf("api answers %d, metrics connections closed or refused %d, engine requests %d\n", answered.Load(), refused.Load(), posted.Load())
	os.Exit(0)
}

// keepAsking sends request(n) on c and reads its answer, again and
// again with pause between, until the time is up or c fails; it closes c
// and returns how many were answered.
func keepAsking(c net.Conn, until time.Time, pause time.Duration, request func(n int) string) int {
	defer c.Close()
	r := bufio.NewReader(c)
	n := 0
	for ; time.Now().Before(until); n++ {
		c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.WriteString(c, request(n)); err != nil {
			break
		}
		resp, err := http.ReadResponse(r, nil)
		if err != nil {
			break
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		time.Sleep(pause)
	}
	return n
}

func mustDuration(s string) time.Duration {
	d, err := time.ParseDuration(s)
	if err != nil {
		panic(err)
	}
	return d
}

// TestHostileUsersSwitchNothingOff: issue 31's attacks at once, for
// 60 s, on loopback: four hostile clients of uid 65534, members of the
// engine's group and named docker (hostileHelper: keep-alive connections
// held on the metrics port, API requests that cost the most or write the
// log, `POST /` lines at Debian's dockerd) and two exec loops of uid
// 65534 with a 4,000-byte argv (filling the history several times),
// while root's sessions start and end every few seconds, one of them
// starting 3 containers, root asks the API every 50 ms, and Debian's
// Prometheus scrapes every second. Then: no session left a survivor (its
// containers included), Prometheus missed no scrape for longer than 2 s,
// root's requests p99 is within 50 ms, root's session recorded before the
// attack is unchanged in the history, the agent's RSS stayed under
// 256 MiB, and every flood was counted.
func TestHostileUsersSwitchNothingOff(t *testing.T) {
	const engineGroup = 4242
	ag, eng := containerAgent(t, "--sessions.retention=1s", "--lineage.retention=1s", fmt.Sprintf("--history.max-bytes=%d", hostileHistory))
	engineSocketFor(t, eng, engineGroup)
	t.Cleanup(func() { engineSocketFor(t, eng, 0) })
	metrics := strings.TrimSuffix(strings.TrimPrefix(ag.MetricsURL(), "http://"), "/metrics")
	prom := startPrometheus(t, metrics)

	// Root's session before the attack, ended and in the history.
	first := rootSession(t, ag, "hostile-root-0")
	first.end(t)
	before := agenttest.Recorded(t, ag, "hostile-root-0")
	at := time.Now().Add(-2 * time.Second).UTC().Format(time.RFC3339Nano)

	// The attack.
	start := time.Now()
	self := testenv.SelfForEveryone(t)
	docker := filepath.Join(filepath.Dir(self), "docker") // the kernel reads the requests of programs named so
	if err := os.Symlink(self, docker); err != nil {
		t.Fatal(err)
	}
	var helpers []*exec.Cmd
	var outs []*strings.Builder
	for range 4 {
		c := exec.Command(docker)
		c.Env = testenv.HelperEnv("hostile", "MCPTRACE_HOSTILE_FOR="+hostileFor.String(), "MCPTRACE_HOSTILE_METRICS="+metrics,
			"MCPTRACE_HOSTILE_SOCKET="+ag.Socket, "MCPTRACE_HOSTILE_AT="+at, "MCPTRACE_HOSTILE_PID="+strconv.Itoa(int(first.root)),
			"MCPTRACE_HOSTILE_ENGINE="+eng.Socket)
		c.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody, Groups: []uint32{engineGroup}}}
		out := &strings.Builder{}
		c.Stdout, c.Stderr = out, out
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		helpers, outs = append(helpers, c), append(outs, out)
	}
	stopLoops := agenttest.ExecFlood(t, nobody, 2)
	t.Cleanup(func() {
		for _, c := range helpers {
			c.Process.Kill()
			c.Wait()
		}
	})

	// Root's side, until the attack ends.
	deadline := start.Add(hostileFor)
	var latencies []time.Duration
	var probeErrs []string
	var rss uint64
	var mu sync.Mutex
	var wg sync.WaitGroup
	wg.Go(func() {
		c := ag.Client()
		for time.Now().Before(deadline) {
			t0 := time.Now()
			_, err := c.Status(context.Background())
			if err == nil {
				_, err = c.Sessions(context.Background())
			}
			d := time.Since(t0) / 2
			mu.Lock()
			latencies = append(latencies, d)
			if err != nil {
				probeErrs = append(probeErrs, err.Error())
			}
			mu.Unlock()
			time.Sleep(50 * time.Millisecond)
		}
	})
	st, err := procfs.ReadStat("", uint32(ag.PID()))
	if err != nil {
		t.Fatal(err)
	}
	agentID := lineage.ID{PID: st.PID, Start: st.StartTicks * lineage.TickNS}
	wg.Go(func() {
		var ur procfs.UsageReader
		for time.Now().Before(deadline) {
			if u, err := ur.Read(agentID); err == nil {
				mu.Lock()
				rss = max(rss, u.RSSBytes)
				mu.Unlock()
			} else {
				t.Errorf("reading the agent's RSS: %v", err)
				return
			}
			time.Sleep(time.Second)
		}
	})
	// Root's session of three containers, in the flood's fifth second.
	time.Sleep(time.Until(start.Add(5 * time.Second)))
	w := startWrapper(t, ag, eng, "hostile-containers",
		`for i in 1 2 3; do "$DOCKER" run -d --rm --network none "$IMAGE" sleep 600 >/dev/null || exit 1; done; exec sleep 600`)
	var ids []string
	waitFor(t, containerWait, "root's three containers attributed in the flood", func() (bool, string) {
		d, err := sessionOf(ag, "hostile-containers", 0)
		if err != nil {
			return false, err.Error()
		}
		ids = ids[:0]
		for _, c := range d.Containers {
			if c.Attribution == "attributed" && c.Running {
				ids = append(ids, c.ID)
			}
		}
		return len(ids) == 3, fmt.Sprintf("%+v", d.Containers)
	})
	// The engine's own pace under the flood: a container of no session,
	// stopped with `docker stop -t GRACE` as the session ends. The hostile
	// clients are in the engine's group and keep it busy on purpose; what
	// the agent answers for is the time beyond that (stopBound's 10 s).
	control := eng.RunContainer(t, "--rm", eng.Image, "sleep", "600")
	stopped := time.Now()
	w.kill(syscall.SIGTERM)
	controlTook := stopControl(t, eng, control, stopped, 30*time.Second)
	var took []time.Duration
	for _, id := range ids {
		took = append(took, gone(t, eng, id, stopped, 30*time.Second))
	}
	ctook := <-controlTook
	bound := paceBound(ctook)
	if d, err := sessionOf(ag, "hostile-containers", 0); err == nil && d.Session.EndedAt != 0 {
		ref := time.Now() // d.Now is when the answer was made, or when the history recorded it
		if !d.Recorded.IsZero() {
			ref = d.Recorded
		}
		ended := ref.Add(-time.Duration(d.Now - d.Session.EndedAt))
		t.Logf("root's session seen to end %s after its wrapper's SIGTERM", ended.Sub(stopped).Round(time.Millisecond))
	}
	t.Logf("root's containers gone %v after the SIGTERM; the control's docker stop took %s, so the bound is %s", took, ctook.Round(time.Millisecond), bound.Round(time.Millisecond))
	for i, id := range ids {
		if took[i] > bound {
			t.Errorf("root's container %s gone %s after its session ended, want within %s", id[:12], took[i], bound)
		}
	}
	ended := 1
	for n := 1; time.Until(deadline) > 10*time.Second; n++ {
		s := rootSession(t, ag, fmt.Sprintf("hostile-root-%d", n))
		time.Sleep(2 * time.Second)
		s.end(t)
		ended++
	}
	wg.Wait()
	stopLoops()
	for i, c := range helpers {
		if err := c.Wait(); err != nil {
			t.Errorf("hostile client %d: %v\n%s", i, err, outs[i])
		}
		t.Logf("hostile client %d: %s", i, strings.TrimSpace(outs[i].String()))
	}

	// Root's requests.
	slices.Sort(latencies)
	p99 := latencies[len(latencies)*99/100]
	t.Logf("root: %d sessions ended with no survivor; %d API requests, median %s, p99 %s, max %s; agent RSS at most %d MiB",
		ended, 2*len(latencies), latencies[len(latencies)/2], p99, latencies[len(latencies)-1], rss>>20)
	if len(probeErrs) > 0 {
		t.Errorf("%d of root's requests failed, first: %s", len(probeErrs), probeErrs[0])
	}
	if p99 > hostileP99 {
		t.Errorf("root's API requests: p99 %s, bound %s", p99, hostileP99)
	}
	if rss > hostileRSS {
		t.Errorf("the agent's RSS reached %d MiB, bound %d MiB", rss>>20, hostileRSS>>20)
	}

	// Prometheus' scrapes: every one up, none more than 2 s after the last.
	var res struct {
		Result []struct {
			Values [][2]any `json:"values"`
		} `json:"result"`
	}
	window := int(time.Since(start).Seconds()) - 1
	if err := prom.get("/api/v1/query?query="+url.QueryEscape(fmt.Sprintf(`up{job="mcptrace"}[%ds]`, window)), &res); err != nil || len(res.Result) != 1 {
		t.Fatalf("Prometheus' samples of up: %v %+v", err, res)
	}
	var last float64
	scrapes, gaps := 0, 0
	for _, v := range res.Result[0].Values {
		ts, _ := v[0].(float64)
		if v[1] != "1" {
			t.Errorf("a scrape at %s failed (up %v)", time.Unix(int64(ts), 0).Format(time.TimeOnly), v[1])
		}
		if last != 0 && ts-last > hostileGap.Seconds() {
			gaps++
			t.Errorf("no scrape for %.1f s before %s", ts-last, time.Unix(int64(ts), 0).Format(time.TimeOnly))
		}
		last = ts
		scrapes++
	}
	t.Logf("Prometheus: %d scrapes in the last %d s, %d gaps over %s", scrapes, window, gaps, hostileGap)
	if scrapes < window*3/4 {
		t.Errorf("Prometheus scraped %d times in %d s", scrapes, window)
	}

	// Root's history: the session recorded before is as it was.
	after := agenttest.Recorded(t, ag, "hostile-root-0")
	if len(after.Processes) != len(before.Processes) || len(after.Kills) != len(before.Kills) || after.Session.Began != before.Session.Began {
		t.Errorf("root's recorded session changed in the attack: %d processes and %d kills, before %d and %d",
			len(after.Processes), len(after.Kills), len(before.Processes), len(before.Kills))
	}

	// Every flood counted.
	body := scrape(t, metrics)
	for _, series := range []string{
		`mcptrace_metrics_refused_total{reason="peer-cap"}`,
		`mcptrace_history_records_total{result="evicted"}`,
		`mcptrace_container_claims_total{result="over-uid-budget"}`,
	} {
		if v, ok := sample(body, series); !ok || v == 0 {
			t.Errorf("%s: %v (found %v), want it counted", series, v, ok)
		}
	}
	status, err := ag.Client().Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if hs := status.History.Stats; hs == nil || hs.Evicted[0] != 0 {
		t.Errorf("root's history records were evicted: %+v", hs)
	}
	if !strings.Contains(ag.Logs(), "held_back_logs") {
		t.Errorf("the API's log bound never held a line back: the flood proved nothing")
	}
}

// hostileSession is one of root's sessions: a host and a server.
type hostileSession struct {
	id   string
	root uint32
	cmd  *exec.Cmd
	env  string
}

// rootSession starts root's session id (a shell whose child sleeps) and
// returns once the agent has both as members.
func rootSession(t *testing.T, ag *agenttest.Process, id string) *hostileSession {
	t.Helper()
	s := &hostileSession{id: id, env: fmt.Sprintf("MCPTRACE_HOSTILE_SESSION=%s-%d", id, os.Getpid())}
	s.cmd = exec.Command(ag.Bin, "run", "--session", id, "--", "sh", "-c", "sleep 1000 & exec sleep 1001")
	s.cmd.Env = append(os.Environ(), s.env)
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s.root = uint32(s.cmd.Process.Pid)
	t.Cleanup(func() {
		for _, p := range agenttest.WithEnv(s.env) {
			p.Kill()
		}
		s.cmd.Process.Kill()
		s.cmd.Wait()
	})
	testenv.Eventually(t, "session "+id+" with its two processes", func() (bool, string) {
		d, err := ag.Client().Session(context.Background(), id, nil)
		if err != nil {
			return false, err.Error()
		}
		return len(d.Processes) >= 2, fmt.Sprint(len(d.Processes), " members")
	})
	return s
}

// end kills the session's root and waits until the agent killed the rest:
// no process of the session is left.
func (s *hostileSession) end(t *testing.T) {
	t.Helper()
	s.cmd.Process.Kill()
	s.cmd.Wait()
	testenv.Eventually(t, "no survivor of session "+s.id, func() (bool, string) {
		left := agenttest.WithEnv(s.env)
		return len(left) == 0, fmt.Sprint(left)
	})
}
