package daemonset

import (
	"bytes"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// Objects are the rendered base, decoded.
type Objects struct {
	Namespace  corev1.Namespace
	ConfigMaps []corev1.ConfigMap
	DaemonSet  appsv1.DaemonSet
	// YAML is the rendered stream, as `kubectl kustomize DIR` prints it.
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
	objs := &Objects{YAML: out}
	var namespaces, daemonsets int
	for i, doc := range bytes.Split(out, []byte("\n---\n")) {
		var head struct{ APIVersion, Kind string }
		if err := yaml.Unmarshal(doc, &head); err != nil {
			return nil, fmt.Errorf("%s: object %d: %w", dir, i, err)
		}
		var dst any
		switch head.APIVersion + " " + head.Kind {
		case "v1 Namespace":
			namespaces++
			dst = &objs.Namespace
		case "v1 ConfigMap":
			objs.ConfigMaps = append(objs.ConfigMaps, corev1.ConfigMap{})
			dst = &objs.ConfigMaps[len(objs.ConfigMaps)-1]
		case "apps/v1 DaemonSet":
			daemonsets++
			dst = &objs.DaemonSet
		default:
			return nil, fmt.Errorf("%s: object %d: kind %s %s: not expected in the base", dir, i, head.APIVersion, head.Kind)
		}
		if err := yaml.UnmarshalStrict(doc, dst); err != nil {
			return nil, fmt.Errorf("%s: object %d (%s): %w", dir, i, head.Kind, err)
		}
	}
	if namespaces != 1 || daemonsets != 1 {
		return nil, fmt.Errorf("%s: %d namespaces and %d daemonsets, want one of each", dir, namespaces, daemonsets)
	}
	return objs, nil
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
