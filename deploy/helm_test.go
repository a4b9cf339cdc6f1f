package deploy_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/mcptrace/mcptrace/config"
	"github.com/mcptrace/mcptrace/internal/daemonset"
	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

var update = flag.Bool("update", false, "rewrite the Helm chart's generated files (and, with MCPTRACE_HELM=1, the rendered goldens)")

const (
	chartDir = "helm/mcptrace"
	// helmModule is the Helm that renders the goldens: the Go module
	// proxy's, since Debian 12 has no helm package.
	helmModule = "helm.sh/helm/v3/cmd/helm@v3.22.0"
	// helmRelease and helmNamespace are the release the goldens render.
	helmRelease   = "mcptrace"
	helmNamespace = "mcptrace"
)

// chartCopies are files of the chart that are copies of what deploy/
// ships elsewhere (Helm reads no file outside its chart).
var chartCopies = map[string]string{
	"files/config.yaml":        "kubernetes/config.yaml",
	"files/mcptrace.rules.yml": rulesFile,
	"files/mcptrace.json":      dashboardFile,
}

// The chart's DaemonSet template is the kustomize base's daemonset.yaml
// with what an operator chooses turned into values, and its files are the
// rules, dashboard and configuration deploy/ ships: nothing about the
// agent's privileges is written twice.
func TestHelmChartIsMadeFromTheKustomizeBase(t *testing.T) {
	base, err := os.ReadFile(filepath.Join(kustomizeBase, "daemonset.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	tmpl, err := daemonset.HelmDaemonSet(base)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]byte{"templates/daemonset.yaml": tmpl}
	for copy, orig := range chartCopies {
		b, err := os.ReadFile(orig)
		if err != nil {
			t.Fatal(err)
		}
		want[copy] = b
	}
	for name, b := range want {
		path := filepath.Join(chartDir, name)
		if *update {
			if err := os.WriteFile(path, b, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(path)
		if err != nil || !bytes.Equal(got, b) {
			t.Errorf("deploy/%s is not what deploy/ ships (err %v): run\n  go test ./deploy/ -run %s -update", path, err, t.Name())
		}
	}
}

// A golden is what `helm template` rendered of the chart with a values
// file, committed with the hash of the chart and values it rendered.
type golden struct {
	name   string // testdata/NAME.yaml
	values string // a values file, "" for the chart's defaults
}

var goldens = []golden{
	{"default", ""},
	{"all-on", "helm/testdata/all-on.values.yaml"},
}

func (g golden) path() string { return filepath.Join("helm/testdata", g.name+".yaml") }

// helmArgs are the arguments of `helm template` for g, from deploy/.
func (g golden) helmArgs() []string {
	// The chart needs 1.30 (the container's appArmorProfile field);
	// helm template assumes 1.20 unless told.
	args := []string{"template", helmRelease, chartDir, "--namespace", helmNamespace, "--kube-version", "1.30.0"}
	if g.values != "" {
		args = append(args, "--values", g.values)
	}
	return args
}

// header is the golden's first lines: how it was made, and the hash of
// every file of the chart and of the values file.
func (g golden) header(t *testing.T) string {
	t.Helper()
	h := sha256.New()
	err := filepath.WalkDir(chartDir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		fmt.Fprintf(h, "%s\x00%d\x00", path, len(b))
		h.Write(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if g.values != "" {
		b, err := os.ReadFile(g.values)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(h, "%s\x00%d\x00", g.values, len(b))
		h.Write(b)
	}
	return fmt.Sprintf("# helm %s (%s), from deploy/\n# chart and values sha256 %s\n", strings.Join(g.helmArgs(), " "), helmModule, hex.EncodeToString(h.Sum(nil)))
}

// renderedGolden returns what `helm template` rendered for g, failing
// the test when the chart or its values changed since: the golden must
// be rendered again.
func renderedGolden(t *testing.T, g golden) []byte {
	t.Helper()
	b, err := os.ReadFile(g.path())
	if err != nil {
		t.Fatal(err)
	}
	head := g.header(t)
	body, ok := bytes.CutPrefix(b, []byte(head))
	if !ok {
		t.Fatalf("deploy/%s was rendered from another chart or values than deploy/%s has now: render it again with\n  MCPTRACE_HELM=1 go test ./deploy/ -run 'TestHelm' -update", g.path(), chartDir)
	}
	return body
}

// The goldens are what Helm renders now: the chart and values they were
// rendered from are the ones here (by hash), and with MCPTRACE_HELM=1
// Helm renders them again, byte for byte (-update rewrites them). Helm
// is not run in CI: it is a 3-minute build of most of client-go on a
// cold cache (and 170 more packages in the tests' build if its engine
// were imported); the hash check costs nothing, and the other tests read
// what Helm rendered.
func TestHelmTemplateRendersTheGoldens(t *testing.T) {
	for _, g := range goldens {
		t.Run(g.name, func(t *testing.T) {
			if os.Getenv("MCPTRACE_HELM") != "1" {
				renderedGolden(t, g)
				return
			}
			out := runHelm(t, g.helmArgs()...)
			want := g.header(t) + string(out)
			if *update {
				if err := os.WriteFile(g.path(), []byte(want), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			if got, err := os.ReadFile(g.path()); err != nil || string(got) != want {
				t.Errorf("deploy/%s is not what helm renders now (err %v): run with -update", g.path(), err)
			}
		})
	}
	if os.Getenv("MCPTRACE_HELM") == "1" {
		if out := runHelm(t, "lint", "--strict", chartDir, "--values", goldens[1].values); !bytes.Contains(out, []byte("0 chart(s) failed")) {
			t.Errorf("helm lint:\n%s", out)
		}
	}
}

// runHelm runs the Go module proxy's Helm with args in deploy/.
func runHelm(t *testing.T, args ...string) []byte {
	t.Helper()
	cmd := exec.Command("go", append([]string{"run", helmModule}, args...)...)
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+t.TempDir(), "HELM_CONFIG_HOME="+t.TempDir(), "HELM_DATA_HOME="+t.TempDir())
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go run %s %s: %v\n%s%s", helmModule, strings.Join(args, " "), err, out, stderr.String())
	}
	return out
}

// decodeGolden decodes what Helm rendered for g strictly into the
// Kubernetes API types (and the Prometheus Operator's).
func decodeGolden(t *testing.T, g golden) *daemonset.Objects {
	t.Helper()
	objs, err := daemonset.Decode(g.path(), renderedGolden(t, g))
	if err != nil {
		t.Fatal(err)
	}
	if objs.Namespace.Name != "" {
		t.Errorf("the chart makes Namespace %s: Helm installs into the release's namespace", objs.Namespace.Name)
	}
	return objs
}

// dockerRun is the `docker run` translation of a pod, as the container
// image tests run it: its privileges, namespaces, environment and
// mounts, then its image and arguments.
func dockerRun(t *testing.T, objs *daemonset.Objects) []string {
	t.Helper()
	args, err := daemonset.DockerRunArgs(objs, daemonset.DockerOptions{
		ConfigMapDirs: map[string]string{"config": "/etc/mcptrace"},
		Fields:        map[string]string{"status.hostIP": "192.0.2.1"},
	})
	if err != nil {
		t.Fatal(err)
	}
	return args
}

// With its defaults, the chart's pod is the kustomize base's: the same
// privileges, namespaces, mounts, environment, probes, resources,
// scheduling, image and arguments, as Helm rendered it and decoded
// strictly; only names and labels differ.
func TestHelmChartsPodIsTheKustomizeBasesPod(t *testing.T) {
	base := render(t)
	chart := decodeGolden(t, goldens[0])
	ds := chart.DaemonSet
	if ds.Namespace != helmNamespace {
		t.Errorf("DaemonSet in namespace %q, want the release's %q", ds.Namespace, helmNamespace)
	}
	if got, want := dockerRun(t, chart), dockerRun(t, base); !slices.Equal(got, want) {
		t.Errorf("the chart's pod runs as\n  %q\nthe base's as\n  %q", got, want)
	}
	// The whole pod spec, but for the ConfigMap's name.
	bp, cp := base.DaemonSet.Spec.Template.Spec.DeepCopy(), ds.Spec.Template.Spec.DeepCopy()
	for _, p := range []*corev1.PodSpec{bp, cp} {
		for i := range p.Volumes {
			if p.Volumes[i].ConfigMap != nil {
				p.Volumes[i].ConfigMap.Name = "(config)"
			}
		}
	}
	if !reflect.DeepEqual(bp, cp) {
		a, _ := yaml.Marshal(bp)
		b, _ := yaml.Marshal(cp)
		t.Errorf("the chart's pod spec differs from the base's:\nbase:\n%s\nchart:\n%s", a, b)
	}
	if !reflect.DeepEqual(base.DaemonSet.Spec.UpdateStrategy, ds.Spec.UpdateStrategy) {
		t.Errorf("update strategy %+v, the base's %+v", ds.Spec.UpdateStrategy, base.DaemonSet.Spec.UpdateStrategy)
	}
	for k, v := range base.DaemonSet.Spec.Template.Annotations {
		if ds.Spec.Template.Annotations[k] != v {
			t.Errorf("pod annotation %s=%q, the base's %q", k, ds.Spec.Template.Annotations[k], v)
		}
	}
	checkSelects(t, chart)
	// The configuration is `mcptrace config example`, as in the base.
	var example bytes.Buffer
	if err := config.WriteExample(&example); err != nil {
		t.Fatal(err)
	}
	if got := configOf(t, chart); got != example.String() {
		t.Errorf("the chart's config.yaml is not what `mcptrace config example` writes:\n%s", got)
	}
	if n := len(chart.Services) + len(chart.PodMonitors) + len(chart.ServiceMonitors) + len(chart.PrometheusRules) + len(chart.ConfigMaps) - 1; n != 0 {
		t.Errorf("%d optional objects rendered by default, want none", n)
	}
}

// checkSelects checks that the DaemonSet's selector, and every Service
// and monitor's, select the pod the DaemonSet makes.
func checkSelects(t *testing.T, objs *daemonset.Objects) {
	t.Helper()
	labels := objs.DaemonSet.Spec.Template.Labels
	selects := func(what string, sel map[string]string) {
		if len(sel) == 0 {
			t.Errorf("%s selects nothing", what)
		}
		for k, v := range sel {
			if labels[k] != v {
				t.Errorf("%s selects %s=%s, the pod has labels %v", what, k, v, labels)
			}
		}
	}
	selects("the DaemonSet", objs.DaemonSet.Spec.Selector.MatchLabels)
	for _, s := range objs.Services {
		selects("Service "+s.Name, s.Spec.Selector)
	}
	for _, m := range objs.PodMonitors {
		selects("PodMonitor "+m.Name, m.Spec.Selector.MatchLabels)
	}
	for _, m := range objs.ServiceMonitors {
		selects("ServiceMonitor "+m.Name, m.Spec.Selector.MatchLabels)
	}
}

// configOf is the agent's config.yaml in the ConfigMap the pod mounts.
func configOf(t *testing.T, objs *daemonset.Objects) string {
	t.Helper()
	for _, v := range objs.DaemonSet.Spec.Template.Spec.Volumes {
		if v.ConfigMap != nil {
			cm, err := objs.ConfigMap(v.ConfigMap.Name)
			if err != nil {
				t.Fatal(err)
			}
			return cm.Data["config.yaml"]
		}
	}
	t.Fatal("the pod mounts no ConfigMap")
	return ""
}

// Whatever an operator sets, the chart's pod keeps the base's privileges
// and mounts; the optional objects render, decode strictly and select
// the agents, the rules are deploy/prometheus's and the configuration
// loads.
func TestHelmChartWithEverythingSetKeepsTheBasesPrivileges(t *testing.T) {
	base := render(t)
	chart := decodeGolden(t, goldens[1])
	got, want := dockerRun(t, chart), dockerRun(t, base)
	c := chart.DaemonSet.Spec.Template.Spec.Containers[0]
	image := slices.Index(got, c.Image)
	if image < 0 || c.Image != "registry.example/mcptrace:0.1.0-git20261126230000.0123456789ab" {
		t.Fatalf("image %q, want the values'", c.Image)
	}
	if wi := slices.Index(want, base.DaemonSet.Spec.Template.Spec.Containers[0].Image); !slices.Equal(got[:image], want[:wi]) {
		t.Errorf("the chart's pod runs with\n  %q\nthe base's with\n  %q", got[:image], want[:wi])
	}
	if !slices.Contains(c.Args, "--metrics.listen-address=[$(HOST_IP)]:19467") || c.Args[len(c.Args)-1] != "--log.format=json" {
		t.Errorf("args %q, want the metrics port and the extra argument of the values", c.Args)
	}
	if p := c.Ports[0]; p.ContainerPort != 19467 || p.HostPort != 19467 || chart.DaemonSet.Spec.Template.Annotations["prometheus.io/port"] != "19467" {
		t.Errorf("ports %+v and annotations %v, want the values' port", c.Ports, chart.DaemonSet.Spec.Template.Annotations)
	}
	checkSelects(t, chart)
	if len(chart.PodMonitors) != 1 || len(chart.ServiceMonitors) != 1 || len(chart.Services) != 1 || len(chart.PrometheusRules) != 1 {
		t.Fatalf("%d PodMonitors, %d ServiceMonitors, %d Services, %d PrometheusRules; want one each",
			len(chart.PodMonitors), len(chart.ServiceMonitors), len(chart.Services), len(chart.PrometheusRules))
	}
	if chart.PodMonitors[0].Labels["release"] != "kube-prometheus-stack" || chart.PodMonitors[0].Spec.PodMetricsEndpoints[0].Port == nil ||
		*chart.PodMonitors[0].Spec.PodMetricsEndpoints[0].Port != "metrics" {
		t.Errorf("PodMonitor %+v: want the values' labels and the port named metrics", chart.PodMonitors[0])
	}
	// The PrometheusRule's spec is deploy/prometheus's rules file.
	rules, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	var spec monitoringv1.PrometheusRuleSpec
	if err := yaml.UnmarshalStrict(rules, &spec); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(spec, chart.PrometheusRules[0].Spec) {
		t.Error("the PrometheusRule's spec is not deploy/prometheus/mcptrace.rules.yml")
	}
	dashboard, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, cm := range chart.ConfigMaps {
		if d, ok := cm.Data["mcptrace.json"]; ok {
			found = true
			if d != string(dashboard) || cm.Labels["grafana_dashboard"] != "1" {
				t.Errorf("ConfigMap %s: not deploy/grafana's dashboard with the sidecar's label", cm.Name)
			}
		}
	}
	if !found {
		t.Error("no dashboard ConfigMap")
	}
	// The values' configuration is a file the agent loads.
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte(configOf(t, chart)), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path, nil)
	if err != nil {
		t.Fatalf("the agent refuses the chart's configuration: %v", err)
	}
	if cfg.Enforcer.Mode != "audit" || cfg.Export.File != "/var/lib/mcptrace/events.jsonl" {
		t.Errorf("enforcer.mode %q, export.file %q: want the values'", cfg.Enforcer.Mode, cfg.Export.File)
	}
	// The export file is on a volume the pod mounts writable from the
	// node: a log shipper on the node reads it there.
	if !slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool {
		return !m.ReadOnly && strings.HasPrefix(cfg.Export.File, m.MountPath+"/")
	}) {
		t.Errorf("export.file %s is on no writable volume of the pod", cfg.Export.File)
	}
}
