package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"

	"github.com/mcptrace/mcptrace/agent"
	"github.com/mcptrace/mcptrace/sensor"
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
		case <-done:
		}
	}()
	return agentExit(a.Run(ctx))
}

// agentExit gives the agent's error the exit status it ends with: a
// missing kernel feature exits with sensor.ExitUnsupported, which the
// systemd unit does not restart (it fails once, with the reason in its
// status, instead of restarting every two seconds); anything else with 1.
func agentExit(err error) error {
	var ferr *sensor.FeatureError
	if errors.As(err, &ferr) {
		return exitError{code: sensor.ExitUnsupported, err: fmt.Errorf("this kernel cannot run the agent: %w", err)}
	}
	return err
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
