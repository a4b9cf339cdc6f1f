// Package deploy holds what mcptrace ships to install and monitor its
// agents, and
// the tests that keep it working:
//
//   - prometheus/mcptrace.rules.yml: the alerting rules (group mcptrace),
//     with their promtool unit tests in mcptrace.rules.test.yml;
//   - prometheus/prometheus.yml: an example configuration that scrapes an
//     agent in job mcptrace and loads the rules;
//   - grafana/mcptrace.json: a Grafana dashboard over the same metrics;
//   - prometheus/fleet.yml and prometheus/kubernetes.yml: the same job
//     for many nodes, naming each node (file and pod discovery);
//   - debian/: the systemd unit, maintainer scripts and copyright of the
//     Debian package, which scripts/deb.sh builds (`make deb`);
//   - kubernetes/: the DaemonSet as a kustomize base, whose pod the
//     container image (scripts/image.sh) runs as in e2e/ and the README;
//   - helm/mcptrace: the same DaemonSet as a Helm chart, its template
//     generated from the base (internal/daemonset.HelmDaemonSet), with
//     optional PodMonitor, ServiceMonitor, PrometheusRule and dashboard;
//     helm/testdata holds what `helm template` rendered of it (Helm from
//     the Go module proxy, run with MCPTRACE_HELM=1; CI checks the
//     chart's hash and reads what Helm rendered).
//
// The package's test installs, upgrades and purges it in a Debian 12 root
// made with debootstrap, and checks the unit with systemd-analyze; others
// render the kustomize base and decode it into the Kubernetes API types,
// and hold the unit's capabilities and the README's `docker run` line to
// the DaemonSet's; the chart's rendered objects decode strictly and
// run with the base's privileges and mounts. The
// tests run the real promtool (Debian package prometheus; skipped when
// it is missing, failed when MCPTRACE_REQUIRE_ALL=1) and check that the
// rules and the dashboard query only metrics the agent serves.
//
// The package has no Go code of its own and the agent does not import it.
package deploy
