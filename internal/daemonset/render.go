package daemonset

import (
	"fmt"
	"regexp"
	"strings"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// Objects are the rendered base (or chart), decoded.
type Objects struct {
	Namespace  corev1.Namespace
	ConfigMaps []corev1.ConfigMap
	DaemonSet  appsv1.DaemonSet
	// Services and the Prometheus Operator's objects are the Helm chart's
	// (the kustomize base has none).
	Services        []corev1.Service
	PodMonitors     []monitoringv1.PodMonitor
	ServiceMonitors []monitoringv1.ServiceMonitor
	PrometheusRules []monitoringv1.PrometheusRule
	// YAML is the rendered stream, as `kubectl kustomize DIR` (or `helm
	// template`) prints it.
	YAML []byte
}

// Render renders the kustomize base in dir and decodes its objects. The
// base must hold exactly one Namespace and one DaemonSet, and ConfigMaps;
// any other kind, an unknown field or a duplicate key is an error.
func Render(dir string) (*Objects, error) {
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	m, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		return nil, fmt.Errorf("kustomize build %s: %w", dir, err)
	}
	out, err := m.AsYaml()
	if err != nil {
		return nil, fmt.Errorf("kustomize build %s: %w", dir, err)
	}
	objs, err := Decode(dir, out)
	if err != nil {
		return nil, err
	}
	if objs.Namespace.Name == "" {
		return nil, fmt.Errorf("%s: no Namespace, want one", dir)
	}
	if n := len(objs.Services) + len(objs.PodMonitors) + len(objs.ServiceMonitors) + len(objs.PrometheusRules); n > 0 {
		return nil, fmt.Errorf("%s: %d Services or monitoring objects: not expected in the base", dir, n)
	}
	return objs, nil
}

// Decode decodes a stream of rendered objects (documents separated by
// "---" lines, as kustomize and `helm template` print them) strictly into
// the Kubernetes API types, and the Prometheus Operator's for its
// PodMonitor, ServiceMonitor and PrometheusRule. It wants exactly one
// DaemonSet, at most one Namespace, and refuses any other kind, an
// unknown field or a duplicate key; name names the stream in errors.
func Decode(name string, stream []byte) (*Objects, error) {
	objs := &Objects{YAML: stream}
	var namespaces, daemonsets int
	for i, doc := range documents(stream) {
		var head struct{ APIVersion, Kind string }
		if err := yaml.Unmarshal(doc, &head); err != nil {
			return nil, fmt.Errorf("%s: object %d: %w", name, i, err)
		}
		var dst any
		switch head.APIVersion + " " + head.Kind {
		case "v1 Namespace":
			namespaces++
			dst = &objs.Namespace
		case "v1 ConfigMap":
			dst = appendZero(&objs.ConfigMaps)
		case "v1 Service":
			dst = appendZero(&objs.Services)
		case "apps/v1 DaemonSet":
			daemonsets++
			dst = &objs.DaemonSet
		case "monitoring.coreos.com/v1 PodMonitor":
			dst = appendZero(&objs.PodMonitors)
		case "monitoring.coreos.com/v1 ServiceMonitor":
			dst = appendZero(&objs.ServiceMonitors)
		case "monitoring.coreos.com/v1 PrometheusRule":
			dst = appendZero(&objs.PrometheusRules)
		default:
			return nil, fmt.Errorf("%s: object %d: kind %s %s: not expected", name, i, head.APIVersion, head.Kind)
		}
		if err := yaml.UnmarshalStrict(doc, dst); err != nil {
			return nil, fmt.Errorf("%s: object %d (%s): %w", name, i, head.Kind, err)
		}
	}
	if namespaces > 1 || daemonsets != 1 {
		return nil, fmt.Errorf("%s: %d namespaces and %d daemonsets, want at most one and one", name, namespaces, daemonsets)
	}
	return objs, nil
}

// appendZero appends a zero T to *s and returns a pointer to it.
func appendZero[T any](s *[]T) *T {
	var zero T
	*s = append(*s, zero)
	return &(*s)[len(*s)-1]
}

// documents splits a stream at its "---" lines and drops documents that
// hold only comments and blank lines (`helm template` starts each with
// "# Source: …").
func documents(stream []byte) [][]byte {
	var docs [][]byte
	for _, doc := range regexp.MustCompile(`(?m)^---[ \t]*\n`).Split(string(stream), -1) {
		empty := true
		for _, line := range strings.Split(doc, "\n") {
			if t := strings.TrimSpace(line); t != "" && !strings.HasPrefix(t, "#") {
				empty = false
				break
			}
		}
		if !empty {
			docs = append(docs, []byte(doc))
		}
	}
	return docs
}

// ConfigMap returns the rendered ConfigMap a volume names.
func (o *Objects) ConfigMap(name string) (*corev1.ConfigMap, error) {
	for i := range o.ConfigMaps {
		if o.ConfigMaps[i].Name == name {
			return &o.ConfigMaps[i], nil
		}
	}
	return nil, fmt.Errorf("no ConfigMap %q in the base", name)
}
