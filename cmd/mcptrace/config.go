package main

import (
	"github.com/spf13/cobra"

	"github.com/mcptrace/mcptrace/config"
)

func newConfigCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "config",
		Short: "Show the agent's configuration file format",
		Args:  cobra.NoArgs,
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "example",
		Short: "Print a configuration file with every option, its help and its default, commented out",
		Long: `Print a configuration file that sets nothing: every option the agent
reads, with its help text and its default value, commented out. The Debian
package installs it as ` + config.DefaultFile + `; uncomment a line to
change that option.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return config.WriteExample(cmd.OutOrStdout())
		},
	})
	return cmd
}

// loadConfig reads file, environment and the command's flags.
func loadConfig(cmd *cobra.Command) (config.Config, error) {
	file, _ := cmd.Flags().GetString("config")
	return config.Load(file, cmd.Flags())
}
