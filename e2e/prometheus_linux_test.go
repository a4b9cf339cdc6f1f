package e2e_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mcptrace/mcptrace/agent"
	"github.com/mcptrace/mcptrace/enforcer"
	"github.com/mcptrace/mcptrace/internal/agenttest"
	"github.com/mcptrace/mcptrace/internal/testenv"
	"github.com/mcptrace/mcptrace/lineage"
	"github.com/mcptrace/mcptrace/procfs"
)

const (
	// stubbornServer is the identity, and the npm package, of the server
	// in testdata/mcphost/stubborn-server, which outlives its stdin.
	stubbornServer = "mcptrace-e2e-stubborn-server"
	// filesystemServer is the identity of the server the host starts
	// through npx on `start`.
	filesystemServer = "@modelcontextprotocol/server-filesystem"
	// stubbornSecret goes into the stubborn server's argv, and must not
	// come out in the metrics.
	stubbornSecret = "sk-live-7Hq2ZpX4mV9cR1tLw8Nb3KdF"
)

// startMetricsAgent starts an agent with enforcer config ec serving
// /metrics on a free loopback port, resampling every 500ms.
func startMetricsAgent(t *testing.T, ec enforcer.Config) *agent.Agent {
	t.Helper()
	a := agenttest.Start(t, agent.Options{
		Enforcer:       ec,
		MetricsAddress: "127.0.0.1:0",
		SampleInterval: 500 * time.Millisecond,
	})
	if a.MetricsAddress() == "" {
		t.Fatal("the agent serves no metrics")
	}
	return a
}

// stubbornProcesses lists the live processes of the test (by its
// environment marker) whose command line names the stubborn server: the
// server and its wrappers (npx, sh -c), read from /proc, independently of
// the agent.
func stubbornProcesses(marker string) []lineage.Snapshot {
	ents, _ := os.ReadDir("/proc")
	var out []lineage.Snapshot
	for _, e := range ents {
		pid, err := strconv.ParseUint(e.Name(), 10, 32)
		if err != nil {
			continue
		}
		env, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err != nil || !bytes.Contains(env, []byte(marker+"\x00")) {
			continue
		}
		cmdline, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if !bytes.Contains(cmdline, []byte(stubbornServer)) {
			continue
		}
		if s, err := procfs.Read("/proc", uint32(pid)); err == nil {
			out = append(out, s)
		}
	}
	return out
}

// serverOf returns the server process among procs: the one whose children
// are none of procs (the wrappers each run the next).
func serverOf(procs []lineage.Snapshot) (lineage.Snapshot, bool) {
	for _, p := range procs {
		if !slices.ContainsFunc(procs, func(c lineage.Snapshot) bool { return c.PPID == p.ID.PID }) {
			return p, true
		}
	}
	return lineage.Snapshot{}, false
}

func describe(procs []lineage.Snapshot) string {
	var lines []string
	for _, p := range procs {
		lines = append(lines, fmt.Sprintf("%d (parent %d) %s", p.ID.PID, p.PPID, strings.Join(p.Argv, " ")))
	}
	return strings.Join(lines, "\n")
}

// A host killed in audit mode leaves a server that outlives its stdin
// running: MCPOrphanedProcesses fires for it. An ended session's leftovers
// are not ended again automatically (in audit mode the enforcer only
// records what it would have killed), so ending the leak is the operator's
// action on the alert, which the test takes; then the alert resolves.
func TestOrphanedServerAlertFiresInPrometheusAndResolves(t *testing.T) {
	a := startMetricsAgent(t, enforcer.Config{Mode: enforcer.ModeAudit})
	addr := a.MetricsAddress()
	prom := startPrometheus(t, addr)
	const session = "prom-orphan"
	marker := fmt.Sprintf("MCPTRACE_E2E=%s-%d", session, os.Getpid())
	h := startHost(t, session, marker, a.Socket())
	t.Cleanup(func() {
		for _, p := range stubbornProcesses(marker) {
			syscall.Kill(int(p.ID.PID), syscall.SIGKILL)
		}
	})

	h.say(t, "start-stubborn --api-key="+stubbornSecret, "ready")
	waitSample(t, addr, `mcptrace_servers{host_kind="run",server="`+stubbornServer+`"}`, 1)

	// The host dies without ending its servers. The session ends; in audit
	// mode nothing is killed; the filesystem servers leave when their
	// stdin ends, the stubborn server stays.
	h.cmd.Process.Kill()
	h.cmd.Wait()
	labels := prom.alertLabels("MCPOrphanedProcesses", "warning", "run", stubbornServer)
	fired := prom.waitFiring(t, labels)
	t.Logf("fired: %v\n  %s", fired, fired.Annotations["summary"])

	procs := stubbornProcesses(marker)
	server, ok := serverOf(procs)
	if !ok {
		t.Fatalf("the alert fired but /proc shows no stubborn server (processes: %v)", procs)
	}
	if st, err := procfs.ReadStat("/proc", server.ID.PID); err != nil || st.State == 'Z' {
		t.Fatalf("stubborn server %d is not alive: %+v %v", server.ID.PID, st, err)
	}
	if !slices.Contains(server.Argv, "--api-key="+stubbornSecret) {
		t.Fatalf("the stubborn server's argv %q lacks the secret the test looks for in the metrics", server.Argv)
	}
	t.Logf("the orphaned processes, from /proc:\n%s", describe(procs))

	// What the agent serves lints clean and carries no argv.
	text := scrape(t, addr)
	promtoolCheckMetrics(t, text)
	if strings.Contains(text, stubbornSecret) {
		t.Errorf("the agent's /metrics contains the secret from the server's argv")
	}
	servers := prom.labelValues(t, "server")
	if !slices.Contains(servers, stubbornServer) {
		t.Errorf("Prometheus stored server values %q, want %q among them", servers, stubbornServer)
	}
	for _, v := range servers {
		if strings.Contains(v, stubbornSecret) {
			t.Errorf("Prometheus stored server=%q", v)
		}
	}
	if body := prom.rawGet(t, `/api/v1/series?match[]={job="mcptrace"}`); strings.Contains(body, stubbornSecret) {
		t.Errorf("a series Prometheus stored has the secret")
	}

	// The operator ends the leak.
	for _, p := range procs {
		syscall.Kill(int(p.ID.PID), syscall.SIGTERM)
	}
	deadline := time.Now().Add(promWait)
	for left := stubbornProcesses(marker); len(left) > 0; left = stubbornProcesses(marker) {
		if time.Now().After(deadline) {
			t.Fatalf("stubborn processes left %v after SIGTERM:\n%s", promWait, describe(left))
		}
		time.Sleep(50 * time.Millisecond)
	}
	start := time.Now()
	prom.waitResolved(t, labels)
	t.Logf("resolved %v after the leak ended", time.Since(start).Round(time.Millisecond))
}

// A live host that starts the filesystem server again and again (three
// extra instances) fires MCPDuplicateServers; its destroy marker ends the
// older instances, and with one instance left the alert resolves.
func TestDuplicateServersAlertFiresForAHostThatRestartsAServer(t *testing.T) {
	a := startMetricsAgent(t, enforcer.Config{Mode: enforcer.ModeEnforce, Policy: enforcer.PolicyGraceful, Grace: time.Second})
	addr := a.MetricsAddress()
	prom := startPrometheus(t, addr)
	const session = "prom-dup"
	marker := fmt.Sprintf("MCPTRACE_E2E=%s-%d", session, os.Getpid())
	h := startHost(t, session, marker, a.Socket())
	h.say(t, "start", "ready")
	h.say(t, "start", "ready")
	if len(h.servers) != 4 {
		t.Fatalf("servers %v, want four sets", h.servers)
	}
	waitSample(t, addr, `mcptrace_duplicate_servers{host_kind="run",server="`+filesystemServer+`"}`, 3)

	labels := prom.alertLabels("MCPDuplicateServers", "warning", "run", filesystemServer)
	// The alert fires at the first duplicate Prometheus scraped (the
	// third instance may have come a scrape later); its value follows
	// the scrapes to 3.
	fired := prom.waitFiring(t, labels)
	for deadline := time.Now().Add(promWait); ; time.Sleep(200 * time.Millisecond) {
		v, err := strconv.ParseFloat(fired.Value, 64)
		if err == nil && v == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("alert value %q after %v, want 3 (four instances under one host)", fired.Value, promWait)
			break
		}
		fired = prom.waitFiring(t, labels)
	}
	t.Logf("fired: %v\n  %s", fired, fired.Annotations["summary"])

	if line := h.say(t, "mark", "marked"); line != "marked 0" {
		t.Fatalf("the host's `mcptrace mark destroy` ended %q, want exit code 0", line)
	}
	waitReport(t, a, session, 1)
	h.say(t, "start", "ready")
	waitSample(t, addr, `mcptrace_servers{host_kind="run",server="`+filesystemServer+`"}`, 1)
	waitSample(t, addr, `mcptrace_duplicate_servers{host_kind="run",server="`+filesystemServer+`"}`, 0)
	start := time.Now()
	prom.waitResolved(t, labels)
	t.Logf("resolved %v after one instance was left", time.Since(start).Round(time.Millisecond))
}

// promtoolCheckMetrics fails the test on every problem `promtool check
// metrics` finds in the exposition text.
func promtoolCheckMetrics(t *testing.T, text string) {
	t.Helper()
	bin, err := exec.LookPath("promtool")
	if err != nil {
		testenv.Missing(t, "promtool", "Debian package prometheus; make setup-test installs it")
	}
	cmd := exec.Command(bin, "check", "metrics")
	cmd.Stdin = strings.NewReader(text)
	out, err := cmd.CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}
}
