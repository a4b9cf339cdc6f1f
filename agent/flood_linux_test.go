package agent_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/mcptrace/mcptrace/agent"
	"github.com/mcptrace/mcptrace/enforcer"
	"github.com/mcptrace/mcptrace/internal/testenv"
	"github.com/mcptrace/mcptrace/sessions"
)

// The flood: how long the clients hammer the API, how many there are, and
// the bounds the agent must keep meanwhile (docs/SECURITY.md).
const (
	floodClients  = 8 // half as root (in this process), half as uid 65534 (helper processes)
	floodBigBody  = 64 << 20
	floodHeapMax  = 256 << 20 // the test process's heap: the agent, its graph and the root clients
	floodProbeMax = 2 * time.Second
	floodLogMax   = 200 // log lines the agent may write in the whole flood
)

// floodFor is how long the clients hammer the API: 20 s on the host (the
// issue's flood was 60 s; every bound the test checks is reached within
// the first seconds, and the session ends in the flood's second half),
// 10 s in an emulated guest, where the kernel-dependent
// part (the caller's identity bound at accept, with or without
// SO_PEERPIDFD) is proven by the first seconds and the rest would only
// repeat it ten times slower.
func floodFor() time.Duration {
	return time.Duration(testenv.Sized(20, 10)) * time.Second
}

// floodMinAnswers is how many answers each client must have had for the
// flood to count as one: 100 on the host, 20 in an emulated guest (ten
// times slower, and eight clients share its two CPUs with the agent).
func floodMinAnswers() int {
	return testenv.Sized(100, 20)
}

// floodEnv names the helper's socket; the helper is this test binary run
// as another uid with MCPTRACE_TEST_HELPER=api-flood.
const floodEnv = "AGENT_TEST_FLOOD_SOCKET"

// floodClient hammers every endpoint of the agent at socket until
// deadline: reads of the whole node, of sessions it does not own
// (including the victim's), begins, ends and markers it has no right to,
// malformed paths and bodies, and (big) a body of floodBigBody bytes,
// streamed so the client itself allocates nothing. It returns the number
// of requests answered and how many big bodies it sent.
func floodClient(socket string, id int, deadline time.Time, big bool) (answered, bigSent int) {
	client := &http.Client{
		Timeout: 20 * time.Second,
		Transport: &http.Transport{
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, "unix", socket)
			},
			MaxIdleConnsPerHost: 2,
		},
	}
	pid := strconv.Itoa(os.Getpid())
	type req struct{ method, path, body string }
	reqs := []req{
		{"GET", "/v1/processes", ""},
		{"GET", "/v1/tree/1", ""},
		{"GET", "/v1/tree/" + pid, ""},
		{"GET", "/v1/ancestors/" + pid, ""},
		{"GET", "/v1/tree/99999999999999999999", ""},
		{"GET", "/v1/tree/%2e%2e%2f", ""},
		{"GET", "/v1/status", ""},
		{"GET", "/v1/sessions", ""},
		{"GET", "/v1/sessions/flood-victim", ""},
		{"GET", "/v1/sessions/claude-" + pid, ""},
		{"POST", "/v1/sessions", fmt.Sprintf(`{"pid":%s,"id":"flood-%d-%%d"}`, pid, id)},
		{"POST", "/v1/sessions", `{"pid":1,"id":"flood-victim"}`},
		{"POST", "/v1/sessions", `{"pid":`},
		{"POST", "/v1/sessions/nope-%d/end", "{}"},
		{"POST", "/v1/mark", `{"session":"nope-%d"}`},
		{"POST", "/v1/mark", `{"session":"` + strings.Repeat("x", 60<<10) + `"}`},
		{"POST", "/v1/mark", `[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[`},
	}
	if os.Getuid() != 0 {
		// Only another uid may try to end the victim: root could.
		// And ask for orphans and their (dry-run) ending over and over:
		// issue 31 saw 72,097 log lines in 10 s from 8 such clients.
		reqs = append(reqs,
			req{"POST", "/v1/sessions/flood-victim/end", "{}"},
			req{"POST", "/v1/mark", `{"session":"flood-victim"}`},
			req{"GET", "/v1/orphans", ""},
			req{"POST", "/v1/orphans/end", `{"dry_run":true,"include_likely":true}`})
	}
	for n := 0; time.Now().Before(deadline); n++ {
		var body io.Reader
		var r req
		if big && n%16 == 0 {
			r = req{"POST", "/v1/mark", ""}
			body = io.LimitReader(zeros{}, floodBigBody)
			bigSent++
		} else {
			r = reqs[n%len(reqs)]
			r.path = strings.ReplaceAll(r.path, "%d", strconv.Itoa(n))
			body = strings.NewReader(strings.ReplaceAll(r.body, "%d", strconv.Itoa(n)))
		}
		hr, err := http.NewRequest(r.method, "http://mcptrace"+r.path, body)
		if err != nil {
			continue
		}
		if r.body == "" && r.method == "POST" {
			hr.ContentLength = floodBigBody
		}
		resp, err := client.Do(hr)
		if err != nil {
			continue // refused, closed: the agent is allowed to
		}
		io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<20))
		resp.Body.Close()
		answered++
	}
	return answered, bigSent
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

// floodHelper is the body of a flood client of another uid: it floods
// until the deadline in its argument and prints "answered N big M".
func floodHelper() {
	deadline, _ := strconv.ParseInt(os.Getenv("AGENT_TEST_FLOOD_UNTIL"), 10, 64)
	id, _ := strconv.Atoi(os.Getenv("AGENT_TEST_FLOOD_ID"))
	answered, big := floodClient(os.Getenv(floodEnv), id, time.Unix(0, deadline), id%4 == 1)
	fmt.Printf("answered %d big %d\n", answered, big)
	os.Exit(0)
}

// TestAPIFloodStopsNoSessionFromEnding: eight local clients, half of them
// another uid, hammer every endpoint (and send 64 MiB bodies) for floodFor()
// while a session with a forking member ends. The agent's heap stays under
// a bound, it answers root's own requests within a bound, it loses no
// kernel event, and the session ends with no survivor.
func TestAPIFloodStopsNoSessionFromEnding(t *testing.T) {
	logs := &countingHandler{}
	a := startAgent(t, agent.Options{
		Enforcer: enforcer.Config{Mode: enforcer.ModeEnforce, Policy: enforcer.PolicyGraceful, Grace: 500 * time.Millisecond},
		Logger:   slog.New(logs),
	})
	lostBefore := lostEvents(t, a)
	h := startHost(t, "flood-victim", `
sh -c 'while :; do sleep 0.05; done' </dev/null & echo forker $!
sleep 300 </dev/null & echo server $!
setsid sleep 300 </dev/null & echo daemon $!
echo ready
read line; exit 0`, "forker", "server", "daemon")
	var members []proc
	for name, p := range h.procs {
		if name != "host" {
			members = append(members, p)
		}
	}
	waitFor(t, "session active", func() (bool, string) {
		s, ok := a.Sessions().Find("flood-victim")
		return ok && s.State == sessions.Active, fmt.Sprintf("%+v", s)
	})

	deadline := time.Now().Add(floodFor())
	self := testenv.SelfForEveryone(t)
	var wg sync.WaitGroup
	results := make([]string, floodClients)
	for i := 0; i < floodClients; i++ {
		wg.Add(1)
		if i%2 == 0 { // root, in this process
			go func() {
				defer wg.Done()
				n, big := floodClient(a.Socket(), i, deadline, false)
				results[i] = fmt.Sprintf("answered %d big %d", n, big)
			}()
			continue
		}
		cmd := exec.Command(self, "-test.run=^$")
		cmd.Env = testenv.HelperEnv("api-flood", floodEnv+"="+a.Socket(),
			"AGENT_TEST_FLOOD_UNTIL="+strconv.FormatInt(deadline.UnixNano(), 10), "AGENT_TEST_FLOOD_ID="+strconv.Itoa(i))
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		out, _ := cmd.StdoutPipe()
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatalf("start flood client as uid 65534: %v", err)
		}
		go func() {
			defer wg.Done()
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				results[i] = sc.Text()
			}
			cmd.Wait()
		}()
		t.Cleanup(func() { cmd.Process.Kill() })
	}

	// Root's own requests, and the agent's heap, sampled through the flood.
	var latencies []time.Duration
	var heapMax uint64
	ended := false
	for time.Now().Before(deadline) {
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_, err1 := a.client.Status(ctx)
		_, err2 := a.client.Session(ctx, "flood-victim", nil)
		cancel()
		latencies = append(latencies, time.Since(start))
		if err1 != nil || err2 != nil {
			t.Errorf("root's own request failed during the flood: %v / %v", err1, err2)
		}
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		heapMax = max(heapMax, ms.HeapInuse)
		if !ended && time.Until(deadline) < floodFor()/2 {
			h.say(t, "exit") // the session ends in the middle of the flood
			ended = true
		}
		time.Sleep(100 * time.Millisecond)
	}
	h.cmd.Wait()
	waitDead(t, members...)
	wg.Wait()

	slices.Sort(latencies)
	median, worst := latencies[len(latencies)/2], latencies[len(latencies)-1]
	t.Logf("flood of %d clients for %v: root's requests median %v, max %v (%d probes); heap in use max %d MiB; %d log lines; clients: %q",
		floodClients, floodFor(), median, worst, len(latencies), heapMax>>20, logs.n.Load(), results)
	if worst > testenv.Bound(floodProbeMax) {
		t.Errorf("root's own request took %v during the flood, want at most %v", worst, testenv.Bound(floodProbeMax))
	}
	if heapMax > floodHeapMax {
		t.Errorf("heap in use reached %d MiB during the flood, want at most %d MiB", heapMax>>20, floodHeapMax>>20)
	}
	for i, r := range results {
		var n, big int
		if _, err := fmt.Sscanf(r, "answered %d big %d", &n, &big); err != nil || n < floodMinAnswers() {
			t.Errorf("flood client %d reported %q: want at least %d answered requests (else the flood did not happen)", i, r, floodMinAnswers())
		}
		if i%4 == 1 && big == 0 {
			t.Errorf("flood client %d sent no 64 MiB body", i)
		}
	}
	if n := logs.n.Load(); n > floodLogMax {
		t.Errorf("the agent logged %d lines during the flood (first: %q), want at most %d: a flood must not push its logs into journald's rate limit",
			n, logs.first(), floodLogMax)
	}
	if lost := lostEvents(t, a) - lostBefore; lost != 0 {
		t.Errorf("the agent lost %d kernel events during the flood", lost)
	}
	s, ok := a.Sessions().Find("flood-victim")
	if !ok || s.State != sessions.Ended {
		t.Errorf("session flood-victim after the flood: %+v, want ended", s)
	}
}

// lostEvents is the agent's count of kernel events lost, over the API.
func lostEvents(t *testing.T, a *testAgent) (n uint64) {
	t.Helper()
	st, err := a.client.Status(context.Background())
	if err != nil {
		t.Fatalf("status: %v", err)
	}
	for _, v := range st.Lost {
		n += v
	}
	return n
}

// countingHandler counts the agent's log records at Info and above and
// keeps the first few.
type countingHandler struct {
	n    atomic.Int64
	mu   sync.Mutex
	head []string
}

func (h *countingHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelInfo }
func (h *countingHandler) Handle(_ context.Context, r slog.Record) error {
	if h.n.Add(1) <= 5 {
		h.mu.Lock()
		h.head = append(h.head, r.Message)
		h.mu.Unlock()
	}
	return nil
}
func (h *countingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *countingHandler) WithGroup(string) slog.Handler      { return h }
func (h *countingHandler) first() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.head)
}
