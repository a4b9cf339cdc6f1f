package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"

	"github.com/mcptrace/mcptrace/agent"
	"github.com/mcptrace/mcptrace/api"
	"github.com/mcptrace/mcptrace/sensor"
	"github.com/mcptrace/mcptrace/state"
)

// runAgent runs a until ctx ends. Under a service manager that asked for
// readiness (NOTIFY_SOCKET, the unit's Type=notify), it says READY=1 once
// the agent serves on its socket, so `systemctl start` and `systemctl
// restart` return when `mcptrace` can reach it.
func runAgent(ctx context.Context, a *agent.Agent, log *slog.Logger) error {
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-a.Ready():
			if err := sdNotify("READY=1"); err != nil {
				log.Warn("could not tell the service manager the agent is ready", "err", err)
			}
			// For clients that find it stopped later: how to start it.
			if err := api.WriteInstall(a.Socket(), api.DetectInstall()); err != nil {
				log.Debug("could not note how the agent was started", "err", err)
			}
		case <-done:
		}
	}()
	return agentExit(a.Run(ctx), a.Socket())
}

// agentExit gives the agent's error the words and the exit status it
// ends with: without the privilege to load BPF programs it says so and
// how to run it as root, with sensor.ExitNoPrivilege; a missing kernel
// feature exits with sensor.ExitUnsupported. The systemd unit restarts
// neither (it fails once, with the reason in its status, instead of
// restarting every two seconds). Another agent holding the socket (its
// lock: one starting), the state or the pins is named as such, with the command that stops it. Anything else
// exits with 1.
func agentExit(err error, socket string) error {
	var ferr *sensor.FeatureError
	switch {
	case errors.Is(err, sensor.ErrNoPrivilege):
		return exitError{code: sensor.ExitNoPrivilege, err: fmt.Errorf("the agent needs root: it runs as uid %d without CAP_SYS_ADMIN (or CAP_BPF and CAP_PERFMON) to load its BPF programs; this is not a kernel limit. %s",
			os.Geteuid(), runAsRoot(api.DetectInstall()))}
	case errors.As(err, &ferr):
		return exitError{code: sensor.ExitUnsupported, err: fmt.Errorf("this kernel cannot run the agent: %w", err)}
	case errors.Is(err, api.ErrServing), errors.Is(err, state.ErrLocked), errors.Is(err, sensor.ErrPinDirInUse):
		return fmt.Errorf("another mcptrace agent is running or starting (%w). Stop it first: %s; or give this one its own api.socket, bpf.pin-dir, state.dir and history.dir",
			err, api.ReadInstall(socket).Stop())
	}
	return err
}

// runAsRoot is how an agent installed as in runs as root again.
func runAsRoot(in api.Install) string {
	switch in.Kind {
	case api.InstallSystemd:
		return "The unit runs it as root unless a drop-in changed that; undo the drop-ins: sudo systemctl revert " + cmp.Or(in.Unit, api.DefaultUnit)
	case api.InstallKubernetes:
		return "The pod must run as uid 0 with the DaemonSet's capabilities (securityContext in deploy/kubernetes/daemonset.yaml): kubectl -n " + cmp.Or(in.Namespace, api.DefaultNamespace) + " edit daemonset mcptrace"
	case api.InstallContainer:
		return "Run the container as the README says: docker run --user=0 --cap-add=CAP_SYS_ADMIN --cap-add=CAP_SYS_PTRACE --cap-add=CAP_KILL --cap-add=CAP_SYS_RESOURCE --cap-add=CAP_SYS_NICE …"
	}
	return "Run it as root: sudo mcptrace agent"
}

// sdNotify sends state to the service manager's notification socket, if
// there is one (systemd's sd_notify protocol: one datagram; a name that
// starts with @ is in the abstract namespace).
func sdNotify(state string) error {
	name := os.Getenv("NOTIFY_SOCKET")
	if name == "" {
		return nil
	}
	if name[0] == '@' {
		name = "\x00" + name[1:]
	}
	conn, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: name, Net: "unixgram"})
	if err != nil {
		return fmt.Errorf("NOTIFY_SOCKET: %w", err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte(state)); err != nil {
		return fmt.Errorf("NOTIFY_SOCKET: %w", err)
	}
	return nil
}
