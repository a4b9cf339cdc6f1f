package deploy_test

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mcptrace/mcptrace/exporter"
	"github.com/mcptrace/mcptrace/internal/testenv"
	"github.com/mcptrace/mcptrace/roles"
)

const (
	rulesFile     = "prometheus/mcptrace.rules.yml"
	rulesTestFile = "prometheus/mcptrace.rules.test.yml"
	configFile    = "prometheus/prometheus.yml"
	// fleetConfigFile scrapes many nodes (file_sd), naming each.
	fleetConfigFile = "prometheus/fleet.yml"
	dashboardFile   = "grafana/mcptrace.json"
)

// promtool returns the path of promtool, or skips the test (fails it under
// MCPTRACE_REQUIRE_ALL=1) when it is not installed.
func promtool(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("promtool")
	if err != nil {
		testenv.Missing(t, "promtool", "Debian package prometheus; scripts/setup.sh test installs it")
	}
	return path
}

// runPromtool runs promtool with args in dir and fails the test with its
// output when it does not succeed.
func runPromtool(t *testing.T, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command(promtool(t), args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

func TestAlertRulesPassTheirPromtoolUnitTests(t *testing.T) {
	runPromtool(t, filepath.Dir(rulesTestFile), "test", "rules", filepath.Base(rulesTestFile))
}

func TestAlertRulesAndExampleConfigPassPromtoolCheck(t *testing.T) {
	t.Run("rules", func(t *testing.T) {
		runPromtool(t, filepath.Dir(rulesFile), "check", "rules", filepath.Base(rulesFile))
	})
	// kubernetes.yml is not among them: Debian's promtool is built without
	// Kubernetes discovery and refuses kubernetes_sd_configs. e2e/ runs it
	// in Prometheus with that discovery swapped for the pods' metadata.
	for _, config := range []string{configFile, fleetConfigFile} {
		t.Run(filepath.Base(config), func(t *testing.T) {
			runPromtool(t, filepath.Dir(config), "check", "config", filepath.Base(config))
		})
	}
}

// TestDashboardQueriesPassPromtoolCheck parses every query of the
// dashboard with Prometheus's own parser: each becomes a recording rule of
// a rules file that promtool checks, with Grafana's variables replaced by
// values they may take.
func TestDashboardQueriesPassPromtoolCheck(t *testing.T) {
	var b strings.Builder
	b.WriteString("groups:\n  - name: dashboard\n    rules:\n")
	for i, q := range readDashboard(t).queries(t) {
		fmt.Fprintf(&b, "      # %s\n      - record: dashboard:query_%d\n        expr: %s\n", q.where, i, strconv.Quote(grafanaVars.ReplaceAllStringFunc(q.expr, grafanaValue)))
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the dashboard's queries as rules:\n%s", b.String())
		}
	})
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "dashboard.rules.yml"), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	runPromtool(t, dir, "check", "rules", "dashboard.rules.yml")
}

var grafanaVars = regexp.MustCompile(`\$\{?[A-Za-z_]+\}?`)

func grafanaValue(v string) string {
	switch strings.Trim(v, "${}") {
	case "__rate_interval", "__interval", "__range":
		return "1m"
	}
	return ".*" // $instance, $host_kind: in regex matchers
}

func TestDashboardAndRulesUseOnlyKnownMetrics(t *testing.T) {
	served := servedNames(t)
	rules, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	queries := readDashboard(t).queries(t)
	for _, expr := range ruleExprs(t, string(rules)) {
		queries = append(queries, query{rulesFile, expr})
	}

	used := map[string]bool{}
	for _, q := range queries {
		for _, name := range metricName.FindAllString(q.expr, -1) {
			base := name
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				if b, ok := strings.CutSuffix(name, suffix); ok && served[b] == "histogram" {
					base = b
				}
			}
			used[base] = true
			if _, ok := served[base]; !ok {
				t.Errorf("%s: %s is not a metric mcptrace serves, in %q", q.where, name, q.expr)
			}
		}
	}
	if len(used) < 15 {
		t.Errorf("found %d distinct mcptrace metrics in the dashboard and the rules, want at least 15: %v", len(used), slices.Sorted(maps.Keys(used)))
	}
}

var metricName = regexp.MustCompile(`\bmcptrace_[a-z0-9_]+`)

// ruleExprs returns the expr of every rule in a rules file: plain scalars
// on the key's line, or block scalars (| or >) on the more indented lines
// below it. It fails the test unless it found one expr per rule.
func ruleExprs(t *testing.T, rules string) []string {
	t.Helper()
	lines := strings.Split(rules, "\n")
	var exprs []string
	nRules := 0
	for i, line := range lines {
		key := strings.TrimSpace(line)
		if strings.HasPrefix(key, "- alert:") || strings.HasPrefix(key, "- record:") {
			nRules++
		}
		value, ok := strings.CutPrefix(key, "expr:")
		if !ok {
			continue
		}
		value = strings.TrimSpace(value)
		if value == "" || value[0] == '|' || value[0] == '>' {
			var block []string
			for _, next := range lines[i+1:] {
				if strings.TrimSpace(next) != "" && indent(next) <= indent(line) {
					break
				}
				block = append(block, strings.TrimSpace(next))
			}
			value = strings.Join(block, "\n")
		}
		exprs = append(exprs, value)
	}
	if nRules == 0 || len(exprs) != nRules {
		t.Fatalf("found %d exprs for %d rules in %s", len(exprs), nRules, rulesFile)
	}
	return exprs
}

func indent(line string) int { return len(line) - len(strings.TrimLeft(line, " ")) }

// TestDashboardIsWellFormed checks what Grafana needs to import the
// dashboard on any Prometheus data source.
func TestDashboardIsWellFormed(t *testing.T) {
	d := readDashboard(t)
	if d.SchemaVersion != 39 {
		t.Errorf("schemaVersion %d, want 39", d.SchemaVersion)
	}
	ids := map[int]string{}
	var walk func([]panel)
	walk = func(panels []panel) {
		for _, p := range panels {
			if p.Title == "" {
				t.Errorf("panel %d (%s) has no title", p.ID, p.Type)
			}
			if p.Datasource.UID != datasourceVar {
				t.Errorf("panel %q: datasource %+v, want uid %s", p.Title, p.Datasource, datasourceVar)
			}
			if other, ok := ids[p.ID]; ok {
				t.Errorf("panels %q and %q share id %d", other, p.Title, p.ID)
			}
			ids[p.ID] = p.Title
			if p.Type != "row" && len(p.Targets) == 0 {
				t.Errorf("panel %q has no queries", p.Title)
			}
			for _, tg := range p.Targets {
				if tg.Expr == "" {
					t.Errorf("panel %q: a target without expr", p.Title)
				}
				if tg.Datasource != nil && tg.Datasource.UID != datasourceVar {
					t.Errorf("panel %q: target datasource %+v, want uid %s", p.Title, tg.Datasource, datasourceVar)
				}
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)

	vars := map[string]variable{}
	for _, v := range d.Templating.List {
		vars[v.Name] = v
	}
	if v := vars["datasource"]; v.Type != "datasource" || string(v.Query) != `"prometheus"` {
		t.Errorf("variable datasource: type %q, query %s; want a prometheus data source variable", v.Type, v.Query)
	}
	for _, name := range []string{"instance", "host_kind"} {
		v, ok := vars[name]
		if !ok {
			t.Errorf("no variable %s", name)
			continue
		}
		if v.Type != "query" || v.Datasource.UID != datasourceVar {
			t.Errorf("variable %s: type %q, datasource %+v; want a query on %s", name, v.Type, v.Datasource, datasourceVar)
		}
	}
	if q := vars["instance"].query(t); q != "label_values(mcptrace_build_info, instance)" {
		t.Errorf("variable instance queries %q", q)
	}
}

const datasourceVar = "${datasource}"

type dashboard struct {
	SchemaVersion int     `json:"schemaVersion"`
	Panels        []panel `json:"panels"`
	Templating    struct {
		List []variable `json:"list"`
	} `json:"templating"`
}

type panel struct {
	ID         int        `json:"id"`
	Type       string     `json:"type"`
	Title      string     `json:"title"`
	Datasource datasource `json:"datasource"`
	Targets    []struct {
		Expr       string      `json:"expr"`
		Datasource *datasource `json:"datasource"`
	} `json:"targets"`
	Panels []panel `json:"panels"` // of a collapsed row
}

type datasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type variable struct {
	Name       string          `json:"name"`
	Type       string          `json:"type"`
	Datasource datasource      `json:"datasource"`
	Query      json.RawMessage `json:"query"`
}

// query returns a query variable's PromQL (or label_values) query, which
// Grafana stores as a string or as {"query": ...}.
func (v variable) query(t *testing.T) string {
	t.Helper()
	var s string
	if json.Unmarshal(v.Query, &s) == nil {
		return s
	}
	var q struct {
		Query string `json:"query"`
	}
	if err := json.Unmarshal(v.Query, &q); err != nil {
		t.Fatalf("variable %s: query %s: %v", v.Name, v.Query, err)
	}
	return q.Query
}

// A query is a PromQL expression and where it was found.
type query struct{ where, expr string }

// queries returns the expr of every panel target, and the query of every
// query variable: the series selector in label_values(selector, label).
func (d dashboard) queries(t *testing.T) []query {
	t.Helper()
	var qs []query
	var walk func([]panel)
	walk = func(panels []panel) {
		for _, p := range panels {
			for _, tg := range p.Targets {
				qs = append(qs, query{"panel " + strconv.Quote(p.Title), tg.Expr})
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		q := v.query(t)
		if m := labelValues.FindStringSubmatch(q); m != nil {
			q = m[1]
		}
		qs = append(qs, query{"variable " + v.Name, q})
	}
	return qs
}

// labelValues matches Grafana's label_values(selector, label).
var labelValues = regexp.MustCompile(`^label_values\((.+),\s*[a-zA-Z_][a-zA-Z0-9_]*\)$`)

func readDashboard(t *testing.T) dashboard {
	t.Helper()
	data, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("%s is not a dashboard's JSON: %v", dashboardFile, err)
	}
	return d
}

// servedNames returns the metric families the agent's exporter serves,
// name to type (gauge, counter, histogram), gathered from the exporter's
// own registry over a node where every metric has a series: a live
// server, an idle duplicate, an orphan, kills, an ending, a map.
func servedNames(t *testing.T) map[string]string {
	t.Helper()
	fs := "@modelcontextprotocol/server-filesystem"
	pic := exporter.Build([]exporter.SessionView{{Active: true, HostKind: "codex", Members: []exporter.MemberView{
		{Role: roles.Host, Alive: true},
		{Role: roles.Server, Server: fs, Alive: true, RSSBytes: 1},
		{Role: roles.Server, Server: fs, Alive: true, RSSBytes: 1, Idle: true},
		{Role: roles.Server, Server: "mcp-server-time", Alive: true, Orphaned: true, RSSBytes: 1},
	}}})
	pic.At = time.Now()
	pic.Unowned = map[exporter.UnownedKey]exporter.UnownedStats{{HostKind: "unknown", Kind: "host-gone", Confidence: "certain"}: {Servers: 1, Processes: 3, RSSBytes: 1}}
	h := exporter.Health{
		Gaps: map[string]uint64{"seeded": 1}, Removed: map[string]uint64{"retired": 1},
		Events: map[string]uint64{"fork": 1}, Lost: map[string]uint64{"fork": 0}, Recovered: map[string]uint64{"fork": 0},
		Maps: []exporter.MapUsage{{Name: "doomed", Entries: 1, Max: 2}}, Requests: map[string]uint64{"GET /v1/sessions": 1},
		Refused: map[string]uint64{"gone": 0}, Kills: map[exporter.KillKey]uint64{{Reason: "root-exit", Result: "killed"}: 1},
		Endings: exporter.Histogram{Bounds: []float64{1}, Counts: []uint64{1, 0}, Count: 1, Sum: 0.5},
	}
	mfs, err := exporter.NewRegistry(func() (exporter.Picture, exporter.Health) { return pic, h }).Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]string{}
	for _, mf := range mfs {
		names[mf.GetName()] = strings.ToLower(mf.GetType().String())
	}
	return names
}
