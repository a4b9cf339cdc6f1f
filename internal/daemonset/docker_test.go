package daemonset

import (
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// pod is a minimal pod DockerRunArgs accepts; edit changes it.
func pod(edit func(*corev1.PodSpec)) *Objects {
	no := false
	p := corev1.PodSpec{
		HostPID:     true,
		HostNetwork: true,
		Containers: []corev1.Container{{
			Name:            "agent",
			Image:           "mcptrace:latest",
			Args:            []string{"agent", "--metrics.listen-address=$(HOST_IP):9467", "$(UNSET)"},
			Env:             []corev1.EnvVar{{Name: "HOST_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.hostIP"}}}},
			SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: &no},
		}},
	}
	if edit != nil {
		edit(&p)
	}
	o := &Objects{}
	o.DaemonSet = appsv1.DaemonSet{Spec: appsv1.DaemonSetSpec{Template: corev1.PodTemplateSpec{Spec: p}}}
	return o
}

var fields = map[string]string{"status.hostIP": "192.0.2.1"}

func TestDockerRunArgsTranslateThePod(t *testing.T) {
	args, err := DockerRunArgs(pod(nil), DockerOptions{Fields: fields})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"--pid=host", "--network=host", "--security-opt=no-new-privileges", "--security-opt=seccomp=unconfined", "--env=HOST_IP=192.0.2.1",
		"mcptrace:latest", "agent", "--metrics.listen-address=192.0.2.1:9467", "$(UNSET)"}
	if !slices.Equal(args, want) {
		t.Errorf("got  %q\nwant %q", args, want)
	}
}

// Whatever the translation does not know is refused with its name, never
// dropped: the docker tests must run what the DaemonSet declares.
func TestDockerRunArgsRefuseWhatTheyCannotTranslate(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*corev1.PodSpec)
		want string
	}{
		{"a pod network", func(p *corev1.PodSpec) { p.HostNetwork = false }, "hostNetwork"},
		{"a second container", func(p *corev1.PodSpec) { p.Containers = append(p.Containers, p.Containers[0]) }, "exactly one container"},
		{"an init container", func(p *corev1.PodSpec) { p.InitContainers = p.Containers }, "pod: initContainers: not translated"},
		{"a pod-level securityContext", func(p *corev1.PodSpec) {
			u := int64(0)
			p.SecurityContext = &corev1.PodSecurityContext{RunAsUser: &u}
		}, "pod: securityContext: not translated"},
		{"no securityContext", func(p *corev1.PodSpec) { p.Containers[0].SecurityContext = nil }, "no securityContext"},
		{"a localhost seccomp profile", func(p *corev1.PodSpec) {
			p.Containers[0].SecurityContext.SeccompProfile = &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeLocalhost}
		}, "seccompProfile Localhost"},
		{"a localhost AppArmor profile", func(p *corev1.PodSpec) {
			p.Containers[0].SecurityContext.AppArmorProfile = &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeLocalhost}
		}, "appArmorProfile Localhost"},
		{"an SELinux type", func(p *corev1.PodSpec) {
			p.Containers[0].SecurityContext.SELinuxOptions = &corev1.SELinuxOptions{Type: "spc_t"}
		}, "securityContext: seLinuxOptions: not translated"},
		{"a user namespace", func(p *corev1.PodSpec) {
			no := false
			p.HostUsers = &no
		}, "pod: hostUsers: not translated"},
		{"a runtime class", func(p *corev1.PodSpec) {
			rc := "gvisor"
			p.RuntimeClassName = &rc
		}, "pod: runtimeClassName: not translated"},
		{"a preStop hook", func(p *corev1.PodSpec) {
			p.Containers[0].Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"true"}}}}
		}, "container: lifecycle: not translated"},
		{"a block device", func(p *corev1.PodSpec) {
			p.Containers[0].VolumeDevices = []corev1.VolumeDevice{{Name: "d", DevicePath: "/dev/x"}}
		}, "container: volumeDevices: not translated"},
		{"a field the options do not give", func(p *corev1.PodSpec) {
			p.Containers[0].Env[0].ValueFrom.FieldRef.FieldPath = "metadata.name"
		}, "field metadata.name"},
		{"a secret volume", func(p *corev1.PodSpec) {
			p.Volumes = []corev1.Volume{{Name: "s", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "s"}}}}
			p.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "s", MountPath: "/s"}}
		}, "volume s: secret: not translated"},
		{"a mount of a missing volume", func(p *corev1.PodSpec) {
			p.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "gone", MountPath: "/g"}}
		}, "no such volume"},
		{"mount propagation", func(p *corev1.PodSpec) {
			b := corev1.MountPropagationBidirectional
			p.Volumes = []corev1.Volume{{Name: "h", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/tmp"}}}}
			p.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "h", MountPath: "/h", MountPropagation: &b}}
		}, "mountPropagation"},
		{"a hostPath without a type", func(p *corev1.PodSpec) {
			p.Volumes = []corev1.Volume{{Name: "h", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/tmp"}}}}
			p.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "h", MountPath: "/h"}}
		}, "hostPath type"},
		{"a command", func(p *corev1.PodSpec) { p.Containers[0].Command = []string{"/bin/sh"} }, "container: command: not translated"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DockerRunArgs(pod(tc.edit), DockerOptions{Fields: fields})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one saying %q", err, tc.want)
			}
		})
	}
}
