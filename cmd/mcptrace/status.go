package main

import (
	"context"
	"time"

	"github.com/spf13/cobra"

	"github.com/mcptrace/mcptrace/api"
)

func newStatusCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Say whether the agent runs and how it is doing: kernel side, sessions, leaks, losses, containers, history, metrics, last problems",
		Long: `Say whether the agent runs and how it is doing, in a dozen lines: the
agent (version, since when, how it was installed), its kernel side, the
processes and sessions it tracks, the leaks the last metrics sample found,
events lost, container attribution, the history, where metrics are
served, and the last warnings and errors it logged.

It exits 0 when the agent answers, 1 when none does (saying how to start
it). --json prints every counter the agent keeps, for machines. Anyone
may ask; root sees the node's sessions, leaks and problems, other users
only what concerns everyone.`,
		Example: `  mcptrace status
  mcptrace status --json | jq .lost_events_total`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadConfig(cmd)
			if err != nil {
				return err
			}
			st, err := api.NewClient(cfg.API.Socket).Status(cmd.Context())
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(cmd, st)
			}
			return writeStatus(cmd.OutOrStdout(), st, time.Now())
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print every counter the agent keeps as JSON, for machines")
	bindSocketFlag(cmd)
	return cmd
}

// agentStatus asks the agent at socket for its status within wait: for
// commands that say something about the agent if it answers.
func agentStatus(ctx context.Context, socket string, wait time.Duration) (api.Status, error) {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	return api.NewClient(socket).Status(ctx)
}
