package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/mcptrace/mcptrace/api"
	"github.com/mcptrace/mcptrace/internal/version"
)

// versionWait bounds how long version waits for the agent's answer.
const versionWait = 2 * time.Second

func newVersionCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the version of this mcptrace and of the running agent",
		Long: `Print the version of this binary: the release and commit it was built
from (stamped by make build, the Debian package and the image; a plain go
build reports what Go recorded of the checkout), the Go it was built with,
and the platform. When an agent answers on the socket, its version too:
after an upgrade, the two differ until the agent is restarted.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadConfig(cmd)
			if err != nil {
				return err
			}
			self := version.Get()
			var agent *version.Info
			st, err := agentStatus(cmd.Context(), cfg.API.Socket, versionWait)
			if err == nil {
				agent = &st.Agent.Build
			}
			if asJSON {
				return writeJSON(cmd, struct {
					Client version.Info  `json:"client"`
					Agent  *version.Info `json:"agent"`
				}{self, agent})
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "mcptrace %s\n", self)
			switch {
			case agent != nil && agent.Version == "":
				fmt.Fprintf(out, "agent    an older one, which does not say its version\n")
			case agent != nil:
				fmt.Fprintf(out, "agent    %s\n", *agent)
			default:
				fmt.Fprintf(out, "agent    not running at %s (start it with: %s)\n", cfg.API.Socket, api.ReadInstall(cfg.API.Socket).Start())
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the versions as JSON")
	bindSocketFlag(cmd)
	return cmd
}
