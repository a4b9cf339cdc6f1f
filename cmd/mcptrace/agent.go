//go:build linux || windows

package main

import (
	"os"

	"github.com/spf13/cobra"

	"github.com/mcptrace/mcptrace/agent"
	"github.com/mcptrace/mcptrace/config"
)

func newAgentCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "agent",
		Short: "Run the node agent: trace every process and serve the lineage on the API socket (root; on Windows an elevated administrator or the service)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadConfig(cmd)
			if err != nil {
				return err
			}
			log := cfg.NewLogger(os.Stderr)
			for _, o := range cfg.Overridden {
				log.Warn("the configuration file's value is overridden", "option", o)
			}
			if err := checkAlone(cmd.Context(), cfg.API.Socket); err != nil {
				return err
			}
			opts, err := agentOptions(cfg, log)
			if err != nil {
				return err
			}
			a, err := agent.New(opts)
			if err != nil {
				return err
			}
			return runAgent(cmd.Context(), a, log)
		},
	}
	config.BindFlags(cmd.Flags())
	return cmd
}
