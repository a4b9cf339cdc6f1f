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
		Short: "Run the node agent: trace every process and serve the lineage on a unix socket (needs root)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadConfig(cmd)
			if err != nil {
				return err
			}
			log := cfg.NewLogger(os.Stderr)
			ec, err := cfg.EnforcerConfig()
			if err != nil {
				return err
			}
			a, err := agent.New(agent.Options{
				Socket:                  cfg.API.Socket,
				SocketMode:              cfg.API.SocketMode,
				APIMaxConnections:       cfg.API.MaxConnections,
				APIMaxConnectionsPerUID: cfg.API.MaxConnectionsPerUID,
				RingBufferSize:          cfg.BPF.RingBufferSize,
				TraceFS:                 cfg.BPF.TraceFS,
				BPFFS:                   cfg.BPF.BPFFS,
				PinDir:                  cfg.BPF.PinDir,
				StateDir:                cfg.State.Dir,
				CheckpointInterval:      cfg.State.CheckpointInterval,
				ProcRoot:                cfg.Lineage.ProcRoot,
				Retention:               cfg.Lineage.Retention,
				MaxNodes:                cfg.Lineage.MaxNodes,
				MaxImages:               cfg.Lineage.MaxImages,
				MaxImageBytes:           cfg.Lineage.MaxImageBytes,
				RepairInterval:          cfg.Lineage.RepairInterval,
				Sessions:                cfg.SessionsConfig(),
				Enforcer:                ec,
				Logger:                  log,
			})
			if err != nil {
				return err
			}
			return a.Run(cmd.Context())
		},
	}
	config.BindFlags(cmd.Flags())
	return cmd
}

// loadConfig reads file, environment and the command's flags.
func loadConfig(cmd *cobra.Command) (config.Config, error) {
	file, _ := cmd.Flags().GetString("config")
	return config.Load(file, cmd.Flags())
}
