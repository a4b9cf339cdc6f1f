package e2e_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mcptrace/mcptrace/internal/testenv"
)

// promWait bounds every wait on the agent's metrics and on Prometheus:
// alerts fire after a few seconds here, so reaching it means they never
// will.
const promWait = 60 * time.Second

// rulesFile is the alert rules the tests load, as shipped.
const rulesFile = "../deploy/prometheus/mcptrace.rules.yml"

// promServer is a real Prometheus server scraping one agent.
type promServer struct {
	url    string // http://127.0.0.1:PORT
	target string // the agent's metrics address: the alerts' instance
	stderr *testenv.LockedBuffer
}

// startPrometheus runs Debian's prometheus until the test ends, on a free
// loopback port with its storage in a temporary directory, scraping target
// (host:port) every second as job mcptrace and evaluating the shipped
// rules every second, with every `for:` cut to 3s. It returns once
// Prometheus is ready; its log is shown when the test fails.
func startPrometheus(t *testing.T, target string) *promServer {
	t.Helper()
	dir := t.TempDir()
	writeRules(t, dir)
	config := fmt.Sprintf(`global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
rule_files:
  - mcptrace.rules.yml
scrape_configs:
  - job_name: mcptrace
    static_configs:
      - targets: [%q]
`, target)
	configFile := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(configFile, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	return runPrometheus(t, configFile, target)
}

// intervalLine is a scrape or evaluation interval of a configuration.
var intervalLine = regexp.MustCompile(`(?m)^(\s+(?:scrape|evaluation)_interval:\s*)\S+\s*$`)

// startShippedPrometheus runs Prometheus with a shipped configuration
// (deploy/prometheus/NAME), as shipped but for its intervals, cut to one
// second, the rules' `for:`s (writeRules), and what edit, if not nil,
// changes in it; the rules and whatever files (target files) write puts
// into the directory are beside it. It returns once Prometheus is ready.
func startShippedPrometheus(t *testing.T, name string, edit func(config []byte) []byte, write func(dir string)) *promServer {
	t.Helper()
	config, err := os.ReadFile(filepath.Join("../deploy/prometheus", name))
	if err != nil {
		t.Fatal(err)
	}
	if edit != nil {
		config = edit(config)
	}
	if len(intervalLine.FindAll(config, -1)) == 0 {
		t.Fatalf("%s: no interval to shorten", name)
	}
	config = intervalLine.ReplaceAll(config, []byte("${1}1s"))
	dir := t.TempDir()
	writeRules(t, dir)
	write(dir)
	configFile := filepath.Join(dir, name)
	if err := os.WriteFile(configFile, config, 0o644); err != nil {
		t.Fatal(err)
	}
	return runPrometheus(t, configFile, "")
}

// writeRules writes the shipped rules into dir with every `for:` cut to
// 3s: the alerts wait 3s instead of their real durations, so the tests
// run in seconds; the promtool unit tests in deploy/ test the real ones.
func writeRules(t *testing.T, dir string) {
	t.Helper()
	rules, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	forLine := regexp.MustCompile(`(?m)^(\s+for:\s*)\S+\s*$`)
	if len(forLine.FindAll(rules, -1)) == 0 {
		t.Fatalf("%s: no `for:` to shorten", rulesFile)
	}
	rules = forLine.ReplaceAll(rules, []byte("${1}3s"))
	if err := os.WriteFile(filepath.Join(dir, "mcptrace.rules.yml"), rules, 0o644); err != nil {
		t.Fatal(err)
	}
}

// runPrometheus runs Debian's prometheus with configFile until the test
// ends (storage beside the file, a free loopback port) and returns once
// it is ready. target is the alerts' instance for alertLabels, if one.
func runPrometheus(t *testing.T, configFile, target string) *promServer {
	t.Helper()
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		testenv.Missing(t, "prometheus", "Debian package prometheus; make setup-test installs it")
	}
	dir := filepath.Dir(configFile)
	addr := freePort(t)
	p := &promServer{url: "http://" + addr, target: target, stderr: &testenv.LockedBuffer{}}
	cmd := exec.Command(bin,
		"--config.file="+configFile,
		"--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr,
	)
	cmd.Stdout = p.stderr
	cmd.Stderr = p.stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start prometheus: %v", err)
	}
	exited := make(chan struct{})
	var waitErr error
	go func() {
		waitErr = cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			t.Errorf("prometheus did not stop 10s after SIGTERM; killing it")
			cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("prometheus log:\n%s", p.stderr)
		}
	})

	deadline := time.Now().Add(promWait)
	last := ""
	for {
		select {
		case <-exited:
			t.Fatalf("prometheus exited before it was ready: %v", waitErr)
		default:
		}
		resp, err := http.Get(p.url + "/-/ready")
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p
			}
			last = fmt.Sprintf("%s: %s", resp.Status, strings.TrimSpace(string(body)))
		} else {
			last = err.Error()
		}
		if time.Now().After(deadline) {
			t.Fatalf("prometheus not ready after %v: %s", promWait, last)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// freePort returns a loopback address no one listens on now.
func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// alert is an entry of Prometheus' /api/v1/alerts.
type alert struct {
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
	State       string            `json:"state"`
	ActiveAt    time.Time         `json:"activeAt"`
	Value       string            `json:"value"`
}

func (a alert) String() string {
	keys := slices.Sorted(maps.Keys(a.Labels))
	var b strings.Builder
	b.WriteString("{")
	for i, k := range keys {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s=%q", k, a.Labels[k])
	}
	fmt.Fprintf(&b, "} %s value %s", a.State, a.Value)
	return b.String()
}

// get fetches a JSON API path of Prometheus into v (its data field).
func (p *promServer) get(path string, v any) error {
	resp, err := http.Get(p.url + path)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	var r struct {
		Status string          `json:"status"`
		Error  string          `json:"error"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return fmt.Errorf("GET %s: %s: %w", path, resp.Status, err)
	}
	if r.Status != "success" {
		return fmt.Errorf("GET %s: %s: %s", path, r.Status, r.Error)
	}
	return json.Unmarshal(r.Data, v)
}

func (p *promServer) alerts() ([]alert, error) {
	var data struct {
		Alerts []alert `json:"alerts"`
	}
	err := p.get("/api/v1/alerts", &data)
	return data.Alerts, err
}

// alertLabels is the label set the shipped rules give alert name for a
// host kind and server of the agent p scrapes: the rule's `sum by
// (instance, host_kind, server)` keeps those three, the rule adds
// severity.
func (p *promServer) alertLabels(name, severity, hostKind, server string) map[string]string {
	return map[string]string{
		"alertname": name,
		"instance":  p.target,
		"host_kind": hostKind,
		"server":    server,
		"severity":  severity,
	}
}

// waitFiring polls /api/v1/alerts until an alert with exactly labels is
// firing, and returns it.
func (p *promServer) waitFiring(t *testing.T, labels map[string]string) alert {
	t.Helper()
	var found alert
	p.waitAlerts(t, fmt.Sprintf("alert %v firing", labels), func(all []alert) bool {
		for _, a := range all {
			if a.State == "firing" && maps.Equal(a.Labels, labels) {
				found = a
				return true
			}
		}
		return false
	})
	return found
}

// waitResolved polls /api/v1/alerts until no alert (pending or firing)
// has exactly labels: resolved alerts leave the list.
func (p *promServer) waitResolved(t *testing.T, labels map[string]string) {
	t.Helper()
	p.waitAlerts(t, fmt.Sprintf("alert %v to resolve", labels), func(all []alert) bool {
		return !slices.ContainsFunc(all, func(a alert) bool { return maps.Equal(a.Labels, labels) })
	})
}

func (p *promServer) waitAlerts(t *testing.T, what string, done func([]alert) bool) {
	t.Helper()
	deadline := time.Now().Add(promWait)
	for {
		all, err := p.alerts()
		if err == nil && done(all) {
			return
		}
		if time.Now().After(deadline) {
			var last strings.Builder
			if err != nil {
				fmt.Fprintf(&last, "\n  error: %v", err)
			}
			for _, a := range all {
				fmt.Fprintf(&last, "\n  %v", a)
			}
			if len(all) == 0 && err == nil {
				last.WriteString(" none")
			}
			t.Fatalf("timed out after %v waiting for %s; last alerts:%s\ntargets: %s", promWait, what, last.String(), p.targets())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// targets describes Prometheus' scrape targets, for failures.
func (p *promServer) targets() string {
	var data struct {
		ActiveTargets []struct {
			ScrapeURL  string `json:"scrapeUrl"`
			Health     string `json:"health"`
			LastError  string `json:"lastError"`
			LastScrape string `json:"lastScrape"`
		} `json:"activeTargets"`
	}
	if err := p.get("/api/v1/targets", &data); err != nil {
		return err.Error()
	}
	var out []string
	for _, tg := range data.ActiveTargets {
		out = append(out, fmt.Sprintf("%s %s (last %s) %s", tg.ScrapeURL, tg.Health, tg.LastScrape, tg.LastError))
	}
	return strings.Join(out, "; ")
}

// labelValues returns the values Prometheus stored for label name.
func (p *promServer) labelValues(t *testing.T, name string) []string {
	t.Helper()
	var vals []string
	if err := p.get("/api/v1/label/"+url.PathEscape(name)+"/values", &vals); err != nil {
		t.Fatal(err)
	}
	return vals
}

// rawGet returns the body of a GET of Prometheus' path, as it came.
func (p *promServer) rawGet(t *testing.T, path string) string {
	t.Helper()
	resp, err := http.Get(p.url + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(body)
}

// scrape returns the agent's /metrics at addr.
func scrape(t *testing.T, addr string) string {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatalf("scrape the agent: %v", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape the agent: %s %v", resp.Status, err)
	}
	return string(body)
}

// sample returns the value of series (name{labels} as the text format
// writes it) in the exposition text, and whether it is there.
func sample(text, series string) (float64, bool) {
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), series+" ")
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(strings.Fields(rest)[0], 64)
		return v, err == nil
	}
	return 0, false
}

// waitSample polls the agent's /metrics at addr until series has value
// want, and returns that scrape.
func waitSample(t *testing.T, addr, series string, want float64) string {
	t.Helper()
	deadline := time.Now().Add(promWait)
	for {
		text := scrape(t, addr)
		if v, ok := sample(text, series); ok && v == want {
			return text
		}
		if time.Now().After(deadline) {
			var related []string
			name, _, _ := strings.Cut(series, "{")
			for _, l := range strings.Split(text, "\n") {
				if strings.HasPrefix(l, name) {
					related = append(related, l)
				}
			}
			t.Fatalf("timed out after %v waiting for %s %v in the agent's metrics; its %s series:\n%s",
				promWait, series, want, name, strings.Join(related, "\n"))
		}
		time.Sleep(100 * time.Millisecond)
	}
}
