package agent_test

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mcptrace/mcptrace/agent"
	"github.com/mcptrace/mcptrace/enforcer"
	"github.com/mcptrace/mcptrace/internal/testenv"
	"github.com/mcptrace/mcptrace/lineage"
	"github.com/mcptrace/mcptrace/redact"
)

// chainVar holds the argvs of the links a "chain" helper starts below
// itself, as JSON: the first is its child, the rest that child's chain.
const chainVar = "MCPTRACE_TEST_CHAIN"

// copiesVar says how many times the host of a chain starts it.
const copiesVar = "MCPTRACE_TEST_COPIES"

// chainHelper is one link of a process chain whose argv the test chose
// (npx …, node …/index.js …): it prints its pid, starts the rest of the
// chain (copies times at the top) on a stdin pipe it holds, as a host
// starts a server it speaks MCP with, and waits to be killed.
func chainHelper() {
	fmt.Println(os.Getpid())
	var rest [][]string
	json.Unmarshal([]byte(os.Getenv(chainVar)), &rest)
	copies, _ := strconv.Atoi(os.Getenv(copiesVar))
	for range max(copies, 1) {
		if len(rest) == 0 {
			break
		}
		next, _ := json.Marshal(rest[1:])
		self, _ := os.Executable()
		cmd := &exec.Cmd{Path: self, Args: rest[0], Stdout: os.Stdout, Stderr: os.Stderr,
			Env: append(testenv.HelperEnv("chain"), chainVar+"="+string(next), copiesVar+"=1")}
		if _, err := cmd.StdinPipe(); err != nil { // held until this link is killed
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		if err := cmd.Start(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	// Not select{}: a program whose only goroutine blocks forever is a
	// deadlock to the Go runtime, which ends it.
	time.Sleep(time.Hour)
}

// startChain starts a host (the test binary as "mcp-host") that starts
// copies of chain below it, and returns the host and every pid printed.
func startChain(t *testing.T, copies int, chain ...[]string) (*exec.Cmd, []int) {
	t.Helper()
	js, _ := json.Marshal(chain)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := &exec.Cmd{Path: self, Args: []string{"mcp-host"},
		Env: append(testenv.HelperEnv("chain"), chainVar+"="+string(js), copiesVar+"="+strconv.Itoa(copies))}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	sc := bufio.NewScanner(out)
	var pids []int
	for len(pids) < 1+copies*len(chain) && sc.Scan() {
		pid, err := strconv.Atoi(sc.Text())
		if err != nil {
			t.Fatalf("chain printed %q", sc.Text())
		}
		pids = append(pids, pid)
	}
	if len(pids) < 1+copies*len(chain) {
		t.Fatalf("chain printed %d pids, want %d", len(pids), 1+copies*len(chain))
	}
	// Every link, by identity: the host's death ends the session, but
	// the agent may stop before its enforcer got to them.
	for _, pid := range pids[1:] {
		p := procOf(t, uint32(pid), "a link of the chain")
		t.Cleanup(p.kill)
	}
	return cmd, pids
}

func scrape(t *testing.T, addr string) string {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %s %v\n%s", resp.Status, err, b)
	}
	return string(b)
}

func TestMetricsNameServersAndDuplicatesAndNeverShowASecretFromArgv(t *testing.T) {
	a := startAgent(t, agent.Options{MetricsAddress: "127.0.0.1:0", SampleInterval: time.Hour,
		Enforcer: enforcer.Config{Mode: enforcer.ModeEnforce, Policy: enforcer.PolicyImmediate}})
	const (
		apiKey = "sk-live-0123456789abcdefghijklmnop"
		token  = "ghp_0123456789abcdefghijABCDEFGHIJ0123"
	)
	host, _ := startChain(t, 2,
		[]string{"npx", "-y", "@acme/server-demo@1.2.0", "--api-key=" + apiKey},
		[]string{"node", "/opt/n/node_modules/@acme/server-demo/dist/index.js", "--token", token})
	if _, err := a.client.Begin(context.Background(), uint32(host.Process.Pid), "metrics-secret"); err != nil {
		t.Fatal(err)
	}
	// A package named like a token is no name a metric may carry.
	secretHost, _ := startChain(t, 1, []string{"npx", "-y", token}, []string{"node", "/opt/n/node_modules/.bin/x", "--token", token})
	if _, err := a.client.Begin(context.Background(), uint32(secretHost.Process.Pid), "metrics-secret-2"); err != nil {
		t.Fatal(err)
	}
	if err := a.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	pic := a.Sample()
	body := scrape(t, a.MetricsAddress())
	if st, err := a.client.Status(context.Background()); err != nil || st.Metrics.Address != a.MetricsAddress() || st.Metrics.SampleSeconds == 0 {
		t.Errorf("status says metrics %+v (%v), want address %s and a sample", st.Metrics, err, a.MetricsAddress())
	}
	for _, secret := range []string{apiKey, token, "sk-live", "ghp_"} {
		if strings.Contains(body, secret) {
			t.Errorf("/metrics shows %q from a command line", secret)
		}
	}
	for _, want := range []string{
		`mcptrace_servers{host_kind="api",server="@acme/server-demo"} 2`,
		`mcptrace_duplicate_servers{host_kind="api",server="@acme/server-demo"} 1`,
		`mcptrace_session_members{host_kind="api",role="wrapper"} 3`,
		`mcptrace_session_members{host_kind="api",role="server"} 3`,
		`mcptrace_session_members{host_kind="api",role="host"} 2`,
		`mcptrace_sessions{host_kind="api",state="active"} 2`,
		`mcptrace_servers{host_kind="api",server="` + redact.Marker + `"} 1`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if t.Failed() {
		t.Logf("picture: %+v\n/metrics:\n%s", pic, body)
	}
}

// With metrics.server-names off (HideServerNames), /metrics counts the
// same servers under "hidden" and names none of them; the API still
// names them to the session's owner.
func TestMetricsWithServerNamesOffNameNoServer(t *testing.T) {
	a := startAgent(t, agent.Options{MetricsAddress: "127.0.0.1:0", SampleInterval: time.Hour, HideServerNames: true,
		Enforcer: enforcer.Config{Mode: enforcer.ModeEnforce, Policy: enforcer.PolicyImmediate}})
	host, _ := startChain(t, 2, []string{"npx", "-y", "@acme/merger-globex"},
		[]string{"node", "/opt/n/node_modules/@acme/merger-globex/dist/index.js"})
	if _, err := a.client.Begin(context.Background(), uint32(host.Process.Pid), "metrics-hidden"); err != nil {
		t.Fatal(err)
	}
	if err := a.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	a.Sample()
	body := scrape(t, a.MetricsAddress())
	if strings.Contains(body, "merger-globex") || !strings.Contains(body, `mcptrace_servers{host_kind="api",server="hidden"} 2`) {
		t.Errorf("/metrics with server names off:\n%s", grepLines(body, "mcptrace_servers"))
	}
	d, err := a.client.Session(context.Background(), "metrics-hidden", nil)
	named := false
	for _, r := range d.Roles {
		named = named || r.Server == "@acme/merger-globex"
	}
	if err != nil || !named {
		t.Errorf("the API no longer names the server to its owner: %v %+v", err, d.Roles)
	}
}

// grepLines is the lines of s that contain sub.
func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

func TestReapingEndsOnlyTheOlderIdleInstanceOfAServerItsHostStartedAgain(t *testing.T) {
	a := startAgent(t, agent.Options{SampleInterval: 100 * time.Millisecond, ReapSupersededAfter: time.Second,
		Enforcer: enforcer.Config{Mode: enforcer.ModeEnforce, Policy: enforcer.PolicyImmediate}})
	server := []string{"node", "/opt/n/node_modules/@acme/server-demo/dist/index.js"}
	host, _ := startChain(t, 2, []string{"npx", "-y", "@acme/server-demo"}, server)
	lone, _ := startChain(t, 1, []string{"npx", "-y", "@acme/server-demo"}, server)
	// Two servers only their basename names ("index"): the same name may
	// be any two programs, so neither supersedes the other.
	unnamed, _ := startChain(t, 2, []string{"node", "/srv/app/build/index.js"})
	if err := a.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	servers := nodesUnder(t, a, host.Process.Pid)
	if len(servers) != 2 {
		t.Fatalf("%d servers under the host, want 2", len(servers))
	}
	older, newer := procOf(t, servers[0].PID, "older server"), procOf(t, servers[1].PID, "newer server")
	alone := procOf(t, nodesUnder(t, a, lone.Process.Pid)[0].PID, "a server with no newer instance")
	var basenamed []proc
	for _, id := range nodesUnder(t, a, unnamed.Process.Pid) {
		basenamed = append(basenamed, procOf(t, id.PID, "a server named by its basename"))
	}
	if len(basenamed) != 2 {
		t.Fatalf("%d basename-named servers, want 2", len(basenamed))
	}
	for _, h := range []*exec.Cmd{host, lone, unnamed} {
		if _, err := a.client.Begin(context.Background(), uint32(h.Process.Pid), ""); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "the older server reaped", func() (bool, string) { return !older.alive(), "" })
	time.Sleep(2 * time.Second) // more samples past the threshold
	if !newer.alive() || !alone.alive() {
		t.Fatalf("reaping ended the newer instance (alive %v) or a server with no newer one (alive %v)", newer.alive(), alone.alive())
	}
	for _, p := range basenamed {
		if !p.alive() {
			t.Errorf("reaping ended %s %d", p.what, p.PID)
		}
	}
	st := a.Enforcer().Stats()
	if n := st.Kills[enforcer.KillKey(agent.ReasonSuperseded, enforcer.ClassKilled)]; n != 1 {
		t.Errorf("kills by reason superseded = %d (all: %v), want 1", n, st.Kills)
	}
}

// nodesUnder returns the live processes below pid whose argv[0] is
// "node", oldest first.
func nodesUnder(t *testing.T, a *testAgent, pid int) []lineage.ID {
	t.Helper()
	p, ok := a.Graph().Lookup(uint32(pid))
	if !ok {
		t.Fatalf("pid %d is not in the graph", pid)
	}
	var out []lineage.ID
	for _, d := range a.Graph().Descendants(p.ID) { // pre-order, siblings by start
		if argv := d.Current().Argv; !d.Exited && len(argv) > 0 && argv[0] == "node" {
			out = append(out, d.ID)
		}
	}
	slices.SortFunc(out, func(x, y lineage.ID) int { return cmp.Compare(x.Start, y.Start) })
	return out
}
