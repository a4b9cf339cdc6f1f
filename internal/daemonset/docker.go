package daemonset

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"
)

// DockerOptions say where a `docker run` of the DaemonSet's pod finds
// what a node and the API server would give the pod.
type DockerOptions struct {
	// HostPaths maps a hostPath volume's path on the node to the
	// directory mounted instead (a test's private one); a path not in the
	// map is mounted from the same path on this machine.
	HostPaths map[string]string
	// ConfigMapDirs maps a configMap volume's name to a directory to mount
	// instead of the ConfigMap's data (the README's /etc/mcptrace). A
	// configMap volume not in the map has its rendered data written into
	// a directory below Scratch.
	ConfigMapDirs map[string]string
	Scratch       string
	// Fields are the downward API's values by field path
	// (status.hostIP, spec.nodeName).
	Fields map[string]string
}

// DockerRunArgs returns the arguments after `docker run` that start the
// DaemonSet's container with the pod's privileges, namespaces, mounts,
// environment, memory limit and stop timeout, then its image and its
// arguments. What it does not translate it refuses, naming it, so the
// DaemonSet cannot declare something the docker tests do not run with
// (fields.go lists what is translated and what is left out on purpose:
// scheduling, probes, ports under hostNetwork).
func DockerRunArgs(o *Objects, opts DockerOptions) ([]string, error) {
	pod := o.DaemonSet.Spec.Template.Spec
	if len(pod.Containers) != 1 {
		return nil, errors.New("the pod must have exactly one container")
	}
	c := pod.Containers[0]
	if err := onlyKnownFields(pod, c); err != nil {
		return nil, err
	}
	var args []string
	add := func(a ...string) { args = append(args, a...) }

	if !pod.HostPID || !pod.HostNetwork {
		return nil, fmt.Errorf("hostPID %v, hostNetwork %v: only the host's PID and network namespaces are translated", pod.HostPID, pod.HostNetwork)
	}
	add("--pid=host", "--network=host")
	if pod.HostIPC {
		add("--ipc=host")
	}
	if g := pod.TerminationGracePeriodSeconds; g != nil {
		add("--stop-timeout=" + strconv.FormatInt(*g, 10))
	}

	sec, err := securityArgs(c.SecurityContext)
	if err != nil {
		return nil, err
	}
	add(sec...)

	env, err := envArgs(c, opts.Fields)
	if err != nil {
		return nil, err
	}
	add(env.flags...)

	for _, name := range slices.Sorted(maps.Keys(c.Resources.Limits)) {
		q := c.Resources.Limits[name]
		switch name {
		case corev1.ResourceMemory:
			add("--memory=" + strconv.FormatInt(q.Value(), 10))
		case corev1.ResourceCPU:
			add("--cpus=" + strconv.FormatFloat(float64(q.MilliValue())/1000, 'f', -1, 64))
		default:
			return nil, fmt.Errorf("limit %s: not translated", name)
		}
	}

	mounts, err := mountArgs(o, pod.Volumes, c.VolumeMounts, opts)
	if err != nil {
		return nil, err
	}
	add(mounts...)

	add(c.Image)
	for _, a := range c.Args {
		add(env.expand(a))
	}
	return args, nil
}

// securityArgs translates the container's securityContext.
func securityArgs(s *corev1.SecurityContext) ([]string, error) {
	if s == nil {
		return nil, errors.New("the container has no securityContext: declare what the agent needs")
	}
	var args []string
	if s.RunAsUser != nil {
		args = append(args, "--user="+strconv.FormatInt(*s.RunAsUser, 10))
	}
	if s.Privileged != nil && *s.Privileged {
		args = append(args, "--privileged")
	}
	if s.AllowPrivilegeEscalation != nil && !*s.AllowPrivilegeEscalation {
		args = append(args, "--security-opt=no-new-privileges")
	}
	if s.ReadOnlyRootFilesystem != nil && *s.ReadOnlyRootFilesystem {
		args = append(args, "--read-only")
	}
	if c := s.Capabilities; c != nil {
		for _, d := range c.Drop {
			args = append(args, "--cap-drop="+capName(d))
		}
		for _, a := range c.Add {
			args = append(args, "--cap-add="+capName(a))
		}
	}
	// Kubernetes runs a container without a seccompProfile unconfined
	// (unless the kubelet's SeccompDefault says otherwise); docker would
	// apply its default profile.
	switch p := s.SeccompProfile; {
	case p == nil, p.Type == corev1.SeccompProfileTypeUnconfined:
		args = append(args, "--security-opt=seccomp=unconfined")
	case p.Type == corev1.SeccompProfileTypeRuntimeDefault:
		// docker's default profile is the runtime's default
	default:
		return nil, fmt.Errorf("seccompProfile %s: not translated", p.Type)
	}
	// Without one, both apply their default AppArmor profile where
	// AppArmor is enabled (docker-default, cri-containerd.apparmor.d).
	switch p := s.AppArmorProfile; {
	case p == nil, p.Type == corev1.AppArmorProfileTypeRuntimeDefault:
	case p.Type == corev1.AppArmorProfileTypeUnconfined:
		args = append(args, "--security-opt=apparmor=unconfined")
	default:
		return nil, fmt.Errorf("appArmorProfile %s: not translated", p.Type)
	}
	return args, nil
}

// capName is docker's name of a Kubernetes capability: CAP_ first, except
// for ALL.
func capName(c corev1.Capability) string {
	if c == "ALL" {
		return "ALL"
	}
	return "CAP_" + string(c)
}

// env is the container's environment, resolved as the kubelet resolves it.
type env struct {
	flags []string
	vars  map[string]string
}

// varRef is a $(NAME) reference in an env value or an argument.
var varRef = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// expand replaces each $(NAME) of an earlier variable by its value, as the
// kubelet does; an unknown one stays as written.
func (e env) expand(s string) string {
	return varRef.ReplaceAllStringFunc(s, func(m string) string {
		if v, ok := e.vars[m[2:len(m)-1]]; ok {
			return v
		}
		return m
	})
}

func envArgs(c corev1.Container, fields map[string]string) (env, error) {
	e := env{vars: map[string]string{}}
	for _, v := range c.Env {
		var val string
		switch {
		case v.ValueFrom == nil:
			val = e.expand(v.Value)
		case v.ValueFrom.FieldRef != nil:
			f, ok := fields[v.ValueFrom.FieldRef.FieldPath]
			if !ok {
				return env{}, fmt.Errorf("env %s: no value given for field %s", v.Name, v.ValueFrom.FieldRef.FieldPath)
			}
			val = f
		default:
			return env{}, fmt.Errorf("env %s: only values and fieldRefs are translated", v.Name)
		}
		e.vars[v.Name] = val
		e.flags = append(e.flags, "--env="+v.Name+"="+val)
	}
	return e, nil
}

// mountArgs translates the container's volume mounts into bind mounts.
func mountArgs(o *Objects, volumes []corev1.Volume, mounts []corev1.VolumeMount, opts DockerOptions) ([]string, error) {
	var args []string
	for _, m := range mounts {
		i := slices.IndexFunc(volumes, func(v corev1.Volume) bool { return v.Name == m.Name })
		if i < 0 {
			return nil, fmt.Errorf("volumeMount %s: no such volume", m.Name)
		}
		v := volumes[i]
		var src string
		create := false
		switch {
		case v.HostPath != nil:
			src = v.HostPath.Path
			if p, ok := opts.HostPaths[src]; ok {
				src = p
			}
			typ := corev1.HostPathUnset
			if v.HostPath.Type != nil {
				typ = *v.HostPath.Type
			}
			switch typ {
			case corev1.HostPathDirectory:
				if st, err := os.Stat(src); err != nil || !st.IsDir() {
					return nil, fmt.Errorf("volume %s: hostPath %s must be a directory (type Directory): %v", v.Name, src, err)
				}
			case corev1.HostPathDirectoryOrCreate:
				// docker creates a missing --volume source, as the
				// kubelet creates a DirectoryOrCreate path (a --mount
				// source must exist).
				create = true
			default:
				return nil, fmt.Errorf("volume %s: hostPath type %q not translated", v.Name, typ)
			}
		case v.ConfigMap != nil:
			if dir, ok := opts.ConfigMapDirs[v.Name]; ok {
				src, create = dir, true
				break
			}
			cm, err := o.ConfigMap(v.ConfigMap.Name)
			if err != nil {
				return nil, fmt.Errorf("volume %s: %w", v.Name, err)
			}
			if opts.Scratch == "" {
				return nil, fmt.Errorf("volume %s: a configMap volume needs DockerOptions.Scratch", v.Name)
			}
			src = filepath.Join(opts.Scratch, v.Name)
			if err := os.MkdirAll(src, 0o755); err != nil {
				return nil, err
			}
			for k, data := range cm.Data {
				if err := os.WriteFile(filepath.Join(src, k), []byte(data), 0o644); err != nil {
					return nil, fmt.Errorf("volume %s: %w", v.Name, err)
				}
			}
		default:
			return nil, fmt.Errorf("volume %s: only hostPath and configMap volumes are translated", v.Name)
		}
		var mount string
		switch {
		case create && m.ReadOnly:
			mount = "--volume=" + src + ":" + m.MountPath + ":ro"
		case create:
			mount = "--volume=" + src + ":" + m.MountPath
		case m.ReadOnly:
			mount = "--mount=type=bind,source=" + src + ",target=" + m.MountPath + ",readonly"
		default:
			mount = "--mount=type=bind,source=" + src + ",target=" + m.MountPath
		}
		args = append(args, mount)
	}
	return args, nil
}
