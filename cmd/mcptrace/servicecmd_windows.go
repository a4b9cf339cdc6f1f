package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/windows"
	"golang.org/x/sys/windows/svc"
	"golang.org/x/sys/windows/svc/mgr"

	"github.com/mcptrace/mcptrace/windows/winsec"
)

// serviceRestartDelay is how long the service control manager waits
// before it starts a failed agent again.
const serviceRestartDelay = 2 * time.Second

func newServiceCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "service install [AGENT-FLAGS…] | service remove",
		Short: "Install or remove the agent as a Windows service (an elevated administrator)",
		Long: `Install the agent as the Windows service "mcptrace": started at boot as
LocalSystem ("mcptrace agent" and the flags given after install), and
started again 2 s after it fails. "service remove" stops and removes it.
Both need an elevated administrator. The service's log goes where the
agent's log.* settings send it.`,
	}
	install := &cobra.Command{
		Use:                "install [AGENT-FLAGS…]",
		Short:              "Install the agent as the mcptrace service and start it",
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			exe, err := os.Executable()
			if err != nil {
				return err
			}
			if exe, err = filepath.Abs(exe); err != nil {
				return err
			}
			// The service runs it as SYSTEM: nobody else may be able to
			// replace it, or a directory above it.
			if err := winsec.CheckPath(exe); err != nil {
				return fmt.Errorf("%w; install mcptrace.exe where only administrators can write (C:\\Program Files\\mcptrace) and run that one", err)
			}
			if err := installService(exe, args); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "installed the %s service: %s agent %v; it starts at boot\n", ServiceName, exe, args)
			return nil
		},
	}
	remove := &cobra.Command{
		Use:   "remove",
		Short: "Stop and remove the mcptrace service",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := removeService(); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "removed the %s service\n", ServiceName)
			return nil
		},
	}
	cmd.AddCommand(install, remove)
	return cmd
}

// installService creates the service running exe as the agent with args.
func installService(exe string, args []string) error {
	m, err := mgr.Connect()
	if err != nil {
		return fmt.Errorf("connect to the service control manager (run as an elevated administrator): %w", err)
	}
	defer m.Disconnect()
	if s, err := m.OpenService(ServiceName); err == nil {
		s.Close()
		return fmt.Errorf("the %s service exists already: mcptrace service remove first", ServiceName)
	}
	s, err := m.CreateService(ServiceName, exe, mgr.Config{
		DisplayName: "mcptrace agent",
		Description: "Tracks the processes AI agent hosts start and ends the MCP servers they leak.",
		StartType:   mgr.StartAutomatic,
	}, append([]string{"agent"}, args...)...)
	if err != nil {
		return fmt.Errorf("create the %s service: %w", ServiceName, err)
	}
	defer s.Close()
	if err := s.SetRecoveryActions([]mgr.RecoveryAction{{Type: mgr.ServiceRestart, Delay: serviceRestartDelay}}, 24*60*60); err != nil {
		return fmt.Errorf("set the %s service's recovery: %w", ServiceName, err)
	}
	return nil
}

// removeService stops the service (within 30 s) and removes it.
func removeService() error {
	m, err := mgr.Connect()
	if err != nil {
		return fmt.Errorf("connect to the service control manager (run as an elevated administrator): %w", err)
	}
	defer m.Disconnect()
	s, err := m.OpenService(ServiceName)
	if err != nil {
		return fmt.Errorf("no %s service to remove: %w", ServiceName, err)
	}
	defer s.Close()
	if st, err := s.Control(svc.Stop); err == nil {
		deadline := time.Now().Add(30 * time.Second)
		for st.State != svc.Stopped && time.Now().Before(deadline) {
			time.Sleep(200 * time.Millisecond)
			if st, err = s.Query(); err != nil {
				break
			}
		}
		if st.State != svc.Stopped {
			return fmt.Errorf("the %s service did not stop within 30 s; it was not removed", ServiceName)
		}
	} else if !errors.Is(err, windows.ERROR_SERVICE_NOT_ACTIVE) {
		return fmt.Errorf("stop the %s service: %w", ServiceName, err)
	}
	if err := s.Delete(); err != nil {
		return fmt.Errorf("remove the %s service: %w", ServiceName, err)
	}
	return nil
}
