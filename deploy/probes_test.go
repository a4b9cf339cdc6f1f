package deploy_test

import (
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/mcptrace/mcptrace/exporter"
)

// The DaemonSet's probes ask the agent's /readyz (startup, readiness)
// and /healthz (liveness) on the port it serves metrics on.
func TestDaemonSetProbesAskTheAgentsHealthEndpoints(t *testing.T) {
	objs := render(t)
	c := objs.DaemonSet.Spec.Template.Spec.Containers[0]
	metrics := false
	for _, p := range c.Ports {
		metrics = metrics || p.Name == "metrics"
	}
	if !metrics {
		t.Fatalf("the agent's container has no port named metrics: %+v", c.Ports)
	}
	for _, tc := range []struct {
		name  string
		probe *corev1.Probe
		path  string
	}{
		{"startupProbe", c.StartupProbe, exporter.ReadyPath},
		{"readinessProbe", c.ReadinessProbe, exporter.ReadyPath},
		{"livenessProbe", c.LivenessProbe, exporter.LivePath},
	} {
		switch {
		case tc.probe == nil:
			t.Errorf("%s: none", tc.name)
		case tc.probe.HTTPGet == nil:
			t.Errorf("%s: not an HTTP GET: %+v", tc.name, tc.probe.ProbeHandler)
		case tc.probe.HTTPGet.Path != tc.path || tc.probe.HTTPGet.Port.String() != "metrics":
			t.Errorf("%s: GET %s on port %s, want %s on metrics", tc.name, tc.probe.HTTPGet.Path, tc.probe.HTTPGet.Port.String(), tc.path)
		}
	}
}
