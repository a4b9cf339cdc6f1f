package daemonset

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// The fields of the pod DockerRunArgs reads, by Go field name, and those
// it leaves out on purpose because docker has nothing that matters for
// them: scheduling, probes (the tests ask the agent themselves), ports
// (the pod uses the host's network), requests, the pull policy. Every
// other field must be unset: a field added to the DaemonSet that is in
// neither list fails the translation instead of being dropped.
var (
	podFields = []string{
		// translated
		"HostPID", "HostNetwork", "HostIPC", "TerminationGracePeriodSeconds", "Containers", "Volumes",
		// left out: scheduling and the API
		"Tolerations", "PriorityClassName", "DNSPolicy", "AutomountServiceAccountToken", "NodeSelector", "Affinity",
	}
	containerFields = []string{
		// translated
		"Name", "Image", "Args", "Env", "Resources", "VolumeMounts", "SecurityContext",
		// left out
		"ImagePullPolicy", "Ports", "StartupProbe", "LivenessProbe", "ReadinessProbe",
	}
	resourceFields = []string{"Limits", "Requests"}
	securityFields = []string{"RunAsUser", "Privileged", "AllowPrivilegeEscalation", "ReadOnlyRootFilesystem",
		"Capabilities", "SeccompProfile", "AppArmorProfile"}
	mountFields    = []string{"Name", "MountPath", "ReadOnly"}
	volumeFields   = []string{"Name", "VolumeSource"}
	sourceFields   = []string{"HostPath", "ConfigMap"}
	configMapField = []string{"LocalObjectReference"}
	envFields      = []string{"Name", "Value", "ValueFrom"}
	envFromFields  = []string{"FieldRef"}
)

// onlyKnownFields fails on any set field of the pod, its container, the
// container's securityContext, resources, mounts, volumes and environment
// that is not in the lists above.
func onlyKnownFields(pod corev1.PodSpec, c corev1.Container) error {
	errs := []error{
		unknownFields("pod", pod, podFields),
		unknownFields("container", c, containerFields),
		unknownFields("resources", c.Resources, resourceFields),
	}
	if c.SecurityContext != nil {
		errs = append(errs, unknownFields("securityContext", *c.SecurityContext, securityFields))
	}
	for _, m := range c.VolumeMounts {
		errs = append(errs, unknownFields("volumeMount "+m.Name, m, mountFields))
	}
	for _, v := range pod.Volumes {
		errs = append(errs, unknownFields("volume "+v.Name, v, volumeFields), unknownFields("volume "+v.Name, v.VolumeSource, sourceFields))
		if v.ConfigMap != nil {
			errs = append(errs, unknownFields("volume "+v.Name, *v.ConfigMap, configMapField))
		}
	}
	for _, e := range c.Env {
		errs = append(errs, unknownFields("env "+e.Name, e, envFields))
		if e.ValueFrom != nil {
			errs = append(errs, unknownFields("env "+e.Name, *e.ValueFrom, envFromFields))
		}
	}
	return errors.Join(errs...)
}

// unknownFields names the fields of struct v that are set and not in
// known, by their JSON names.
func unknownFields(what string, v any, known []string) error {
	rv := reflect.ValueOf(v)
	var set []string
	for i := range rv.NumField() {
		f := rv.Type().Field(i)
		if rv.Field(i).IsZero() || slices.Contains(known, f.Name) {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" {
			name = f.Name
		}
		set = append(set, name)
	}
	if len(set) == 0 {
		return nil
	}
	return fmt.Errorf("%s: %s: not translated to docker", what, strings.Join(set, ", "))
}
