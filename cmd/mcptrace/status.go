package main

import (
	"encoding/json"

	"github.com/spf13/cobra"

	"github.com/mcptrace/mcptrace/api"
)

func newStatusCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show the running agent's counters: tracked processes, events, losses, repairs",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadConfig(cmd)
			if err != nil {
				return err
			}
			st, err := api.NewClient(cfg.API.Socket).Status(cmd.Context())
			if err != nil {
				return err
			}
			enc := json.NewEncoder(cmd.OutOrStdout())
			enc.SetIndent("", "  ")
			return enc.Encode(st)
		},
	}
	bindSocketFlag(cmd)
	return cmd
}
