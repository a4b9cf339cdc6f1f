package api

import (
	"fmt"
	"regexp"
)

// Install says how the agent on this node was started: status shows it,
// and a client that finds no agent answering says the one command that
// starts it the way it was installed (Install.Start), not a generic one.
// The agent writes it beside its socket when it starts (WriteInstall),
// so that the note outlives an agent that stopped or crashed.
type Install struct {
	// Kind is one of the Install* kinds.
	Kind string `json:"kind"`
	// Unit is the systemd unit (InstallSystemd); Namespace the
	// DaemonSet's namespace (InstallKubernetes).
	Unit      string `json:"unit,omitempty"`
	Namespace string `json:"namespace,omitempty"`
}

// The kinds of Install.
const (
	// InstallSystemd: a systemd unit started it (the Debian package's
	// mcptrace.service).
	InstallSystemd = "systemd"
	// InstallKubernetes: a pod of the DaemonSet (deploy/kubernetes).
	InstallKubernetes = "kubernetes"
	// InstallContainer: a container the engine runs (make image, then
	// the README's docker run, named mcptrace).
	InstallContainer = "container"
	// InstallService: the Windows service (mcptrace service install).
	InstallService = "windows-service"
	// InstallManual: someone ran mcptrace agent (or make run) by hand.
	InstallManual = "manual"
)

// DefaultUnit and DefaultNamespace are the names the packaged unit and the
// kustomize base use, assumed when the agent could not tell its own.
const (
	DefaultUnit      = "mcptrace.service"
	DefaultNamespace = "mcptrace"
)

// safeName is what a unit or namespace from the note may be: a client
// prints it in a command, and the note is a file.
var safeName = regexp.MustCompile(`^[A-Za-z0-9@._:-]{1,128}$`)

// clean keeps only a known kind and names safe to print in a command.
func (in Install) clean() Install {
	switch in.Kind {
	case InstallSystemd, InstallKubernetes, InstallContainer, InstallService, InstallManual:
	default:
		return Install{Kind: InstallManual}
	}
	if !safeName.MatchString(in.Unit) {
		in.Unit = ""
	}
	if !safeName.MatchString(in.Namespace) {
		in.Namespace = ""
	}
	if in.Kind == InstallSystemd && in.Unit == "" {
		in.Unit = DefaultUnit
	}
	if in.Kind == InstallKubernetes && in.Namespace == "" {
		in.Namespace = DefaultNamespace
	}
	return in
}

// String says how the agent runs, for people: "systemd unit
// mcptrace.service".
func (in Install) String() string {
	in = in.clean()
	switch in.Kind {
	case InstallSystemd:
		return "systemd unit " + in.Unit
	case InstallKubernetes:
		return "DaemonSet pod in namespace " + in.Namespace
	case InstallContainer:
		return "container"
	case InstallService:
		return "Windows service"
	}
	return "started by hand"
}

// Start is the one command that starts the agent again the way it was
// installed.
func (in Install) Start() string {
	in = in.clean()
	switch in.Kind {
	case InstallSystemd:
		return "sudo systemctl start " + in.Unit
	case InstallKubernetes:
		// The DaemonSet restarts a pod that stopped by itself; one that
		// keeps failing is replaced by a rollout.
		return fmt.Sprintf("kubectl -n %s rollout restart daemonset/mcptrace", in.Namespace)
	case InstallContainer:
		return "docker start mcptrace"
	case InstallService:
		return "sc.exe start mcptrace"
	}
	return startByHand
}

// Stop is the one command that stops the agent the way it was installed.
func (in Install) Stop() string {
	in = in.clean()
	switch in.Kind {
	case InstallSystemd:
		return "sudo systemctl stop " + in.Unit
	case InstallKubernetes:
		return fmt.Sprintf("kubectl -n %s delete daemonset mcptrace", in.Namespace)
	case InstallContainer:
		return "docker stop mcptrace"
	case InstallService:
		return "sc.exe stop mcptrace"
	}
	return stopByHand
}

// Logs is the one command that shows why the agent stopped, "" when
// it logs to the terminal it runs in.
func (in Install) Logs() string {
	in = in.clean()
	switch in.Kind {
	case InstallSystemd:
		return "journalctl -u " + in.Unit + " -n 20"
	case InstallKubernetes:
		return fmt.Sprintf("kubectl -n %s logs daemonset/mcptrace --previous", in.Namespace)
	case InstallContainer:
		return "docker logs mcptrace"
	}
	return ""
}
