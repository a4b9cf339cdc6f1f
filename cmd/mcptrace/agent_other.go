//go:build !linux && !windows

package main

import (
	"fmt"
	"runtime"

	"github.com/spf13/cobra"

	"github.com/mcptrace/mcptrace/config"
)

// newAgentCmd is the agent command where the agent cannot run yet: it
// says so instead of pretending.
func newAgentCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "agent",
		Short: "Run the node agent (Linux and Windows only)",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			return fmt.Errorf("the agent is not supported on %s: it runs on Linux (eBPF) and Windows (ETW)", runtime.GOOS)
		},
	}
	config.BindFlags(cmd.Flags())
	return cmd
}
