package e2e_test

import (
	"fmt"
	"maps"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/mcptrace/mcptrace/internal/agenttest"
	"github.com/mcptrace/mcptrace/internal/daemonset"
	"github.com/mcptrace/mcptrace/internal/dockertest"
)

// Two agents as the DaemonSet runs them on two nodes (two containers of
// the image, node-a and node-b), each scraped by one real Prometheus per
// shipped fleet configuration: deploy/prometheus/fleet.yml with a target
// file per node, and deploy/prometheus/kubernetes.yml with its pod
// discovery replaced by a file holding the metadata Kubernetes would
// give the DaemonSet's pods (Debian's Prometheus is built without
// Kubernetes discovery, and no cluster runs here); the relabeling, which
// makes the node's name the alerts' instance, runs as shipped. A leak on
// node-a fires MCPOrphanedProcesses naming node-a in both; nothing names
// node-b, whose agent is scraped all along.
//
// Both agents see this machine's one kernel; node-b's agent is narrowed
// to a process of the test that starts nothing, as a node where nothing
// leaks.
func TestALeakOnOneNodeFiresAnAlertNamingThatNodeOnly(t *testing.T) {
	eng := dockertest.Start(t)
	quiet := exec.Command("sleep", "600")
	if err := quiet.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { quiet.Process.Kill(); quiet.Wait() })
	a := startNodeAgent(t, eng, "node-a", "--enforcer.mode=audit")
	b := startNodeAgent(t, eng, "node-b", "--enforcer.mode=audit", "--sessions.within-pid="+strconv.Itoa(quiet.Process.Pid))
	nodes := []*nodeAgent{a, b}

	objs, err := daemonset.Render(kustomizeBase)
	if err != nil {
		t.Fatal(err)
	}
	proms := map[string]*promServer{
		"fleet.yml": startShippedPrometheus(t, "fleet.yml", nil, func(dir string) {
			os.Mkdir(filepath.Join(dir, "targets"), 0o755)
			for _, n := range nodes {
				writeFile(t, filepath.Join(dir, "targets", n.Node+".yml"),
					fmt.Sprintf("- targets: [%q]\n  labels:\n    node: %s\n", n.Metrics, n.Node))
			}
		}),
		"kubernetes.yml": startKubernetesPrometheus(t, objs, nodes),
	}

	const session = "fleet-leak"
	marker := fmt.Sprintf("MCPTRACE_E2E=%s-%d", session, os.Getpid())
	h := startHost(t, session, marker, a.Socket)
	t.Cleanup(func() {
		for _, p := range agenttest.WithEnv(marker) {
			p.Kill()
		}
	})
	h.say(t, "start-stubborn --api-key="+stubbornSecret, "ready")
	waitSample(t, a.Metrics, `mcptrace_servers{host_kind="run",server="`+stubbornServer+`"}`, 1)
	h.cmd.Process.Kill()
	h.cmd.Wait()

	for _, name := range slices.Sorted(maps.Keys(proms)) {
		p := proms[name]
		labels := p.alertLabels("MCPOrphanedProcesses", "warning", "run", stubbornServer)
		labels["instance"] = "node-a"
		fired := p.waitFiring(t, labels)
		t.Logf("%s: fired %v\n  %s", name, fired, fired.Annotations["summary"])
		if !strings.Contains(fired.Annotations["summary"], "node-a") {
			t.Errorf("%s: the alert's summary does not name node-a: %q", name, fired.Annotations["summary"])
		}
		all, err := p.alerts()
		if err != nil {
			t.Fatal(err)
		}
		for _, al := range all {
			if al.Labels["instance"] != "node-a" {
				t.Errorf("%s: alert %v does not name node-a, where the leak is", name, al)
			}
		}
		for _, n := range nodes {
			if v := p.query(t, fmt.Sprintf(`up{job="mcptrace",instance=%q,node=%q}`, n.Node, n.Node)); v != "1" {
				t.Errorf("%s: up of %s is %q, want 1 (targets: %s)", name, n.Node, v, p.targets())
			}
		}
		if v := p.query(t, `count(up{job="mcptrace"})`); v != "2" {
			t.Errorf("%s: %s targets scraped, want the two agents (targets: %s)", name, v, p.targets())
		}
	}

	// Uninstall node-b as the README says for Kubernetes, after `kubectl
	// delete`: `kubectl debug node/NODE --profile=sysadmin` runs a
	// privileged container in the node's namespaces with the node's root
	// at /host; docker runs the same here, but with CAP_SYS_ADMIN (what
	// uninstall needs) for privileged: a privileged container asks for
	// every capability, and this machine cannot grant CAP_SYS_RESOURCE.
	eng.Output(t, "stop", "--time", "30", b.ID)
	if ents, _ := os.ReadDir(b.PinDir); len(ents) == 0 {
		t.Fatalf("the stopped agent left nothing pinned in %s: the uninstall below would prove nothing", b.PinDir)
	}
	out := eng.Output(t, "run", "--rm", "--cap-drop=ALL", "--cap-add=CAP_SYS_ADMIN", "--pid=host", "--network=host", "--volume=/:/host", "mcptrace:latest",
		"uninstall", "--bpf.bpffs=/host/sys/fs/bpf", "--bpf.pin-dir=/host"+b.PinDir, "--state.dir=/host"+b.Run+"/state", "--api.socket=/host"+b.Run+"/mcptrace.sock")
	t.Logf("mcptrace uninstall as kubectl debug runs it:\n%s", out)
	if ents, err := os.ReadDir(b.PinDir); err == nil && len(ents) > 0 {
		t.Errorf("after uninstall %s still holds %d entries", b.PinDir, len(ents))
	}
	if _, err := os.Stat(filepath.Join(b.Run, "state")); err == nil {
		t.Errorf("after uninstall the saved state %s is still there", filepath.Join(b.Run, "state"))
	}
}

// startKubernetesPrometheus runs Prometheus with the shipped
// kubernetes.yml, its kubernetes_sd_configs replaced by a file_sd of the
// targets Kubernetes' pod discovery would find: one per container port
// of each node's DaemonSet pod, with the pod's labels, annotations and
// node as __meta_kubernetes_* labels, and a pod of another app with the
// same annotations and port name, which the relabeling must drop.
func startKubernetesPrometheus(t *testing.T, objs *daemonset.Objects, nodes []*nodeAgent) *promServer {
	t.Helper()
	pod := objs.DaemonSet.Spec.Template
	sd := regexp.MustCompile(`(?ms)^    kubernetes_sd_configs:\n.*?^    relabel_configs:\n`)
	swap := func(config []byte) []byte {
		if !sd.Match(config) {
			t.Fatal("kubernetes.yml: no kubernetes_sd_configs before relabel_configs")
		}
		return sd.ReplaceAll(config, []byte("    file_sd_configs:\n      - files: [pods.yml]\n    relabel_configs:\n"))
	}
	return startShippedPrometheus(t, "kubernetes.yml", swap, func(dir string) {
		var b strings.Builder
		target := func(addr, node, app string) {
			for _, c := range pod.Spec.Containers {
				for _, port := range c.Ports {
					fmt.Fprintf(&b, "- targets: [%q]\n  labels:\n", addr)
					meta := map[string]string{
						"__meta_kubernetes_namespace":                 objs.Namespace.Name,
						"__meta_kubernetes_pod_node_name":             node,
						"__meta_kubernetes_pod_container_name":        c.Name,
						"__meta_kubernetes_pod_container_port_name":   port.Name,
						"__meta_kubernetes_pod_container_port_number": strconv.Itoa(int(port.ContainerPort)),
					}
					for k, v := range pod.Labels {
						meta["__meta_kubernetes_pod_label_"+sdName(k)] = v
					}
					meta["__meta_kubernetes_pod_label_app_kubernetes_io_name"] = app
					for k, v := range pod.Annotations {
						meta["__meta_kubernetes_pod_annotation_"+sdName(k)] = v
					}
					for _, k := range slices.Sorted(maps.Keys(meta)) {
						fmt.Fprintf(&b, "    %s: %q\n", k, meta[k])
					}
				}
			}
		}
		for _, n := range nodes {
			target(n.Metrics, n.Node, pod.Labels["app.kubernetes.io/name"])
		}
		target(freePort(t), "node-a", "another-app")
		writeFile(t, filepath.Join(dir, "pods.yml"), b.String())
	})
}

// sdName is a Kubernetes label or annotation name as Prometheus'
// discovery writes it into a label name.
func sdName(k string) string {
	return regexp.MustCompile(`[^a-zA-Z0-9_]`).ReplaceAllString(k, "_")
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// query returns the value of an instant query with one result, or "" if
// it has none.
func (p *promServer) query(t *testing.T, q string) string {
	t.Helper()
	var data struct {
		Result []struct {
			Value [2]any `json:"value"`
		} `json:"result"`
	}
	if err := p.get("/api/v1/query?query="+url.QueryEscape(q), &data); err != nil {
		t.Fatal(err)
	}
	if len(data.Result) != 1 {
		return ""
	}
	v, _ := data.Result[0].Value[1].(string)
	return v
}
