//go:build !windows

package main

import (
	"fmt"
	"runtime"

	"github.com/spf13/cobra"
)

// newServiceCmd: on Linux the agent runs as the systemd unit the Debian
// package installs (deploy/debian), not through mcptrace.
func newServiceCmd() *cobra.Command {
	return &cobra.Command{
		Use:    "service",
		Short:  "Install or remove the agent as a Windows service (Windows only)",
		Hidden: true,
		RunE: func(*cobra.Command, []string) error {
			return fmt.Errorf("mcptrace service is for Windows; on %s the agent runs as the systemd unit mcptrace.service that the Debian package installs (make deb)", runtime.GOOS)
		},
	}
}
