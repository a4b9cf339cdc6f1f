package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/mcptrace/mcptrace/api"
	"github.com/mcptrace/mcptrace/config"
	"github.com/mcptrace/mcptrace/sensor"
	"github.com/mcptrace/mcptrace/state"
)

func newUninstallCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "uninstall",
		Short: "Remove mcptrace from the kernel and forget its saved state (stop the agent first)",
		Long: `Remove what the agent leaves running and saved when it stops.

A stopped agent leaves its BPF programs attached and its maps pinned (under
bpf.pin-dir), so that events are queued and doomed processes keep dying
until the next agent takes over, and it leaves its saved state (under
state.dir: sessions, lineage, endings under way) for the next agent to
resume. Use uninstall when mcptrace is being removed from the node, or to
start from nothing: it detaches every pinned program, unpins the maps
(events still queued are dropped), and deletes the saved state (sessions
are forgotten, endings under way are abandoned). A reboot does the same.
The history (history.dir) is kept: it is the record of what happened, for
after the fact; uninstall says where it is, and rm -r removes it.

It refuses while an agent answers on the API socket.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadConfig(cmd)
			if err != nil {
				return err
			}
			if _, err := api.NewClient(cfg.API.Socket).Status(cmd.Context()); err == nil {
				return fmt.Errorf("an agent is serving on %s: stop it first, then run uninstall", cfg.API.Socket)
			} else if !errors.Is(err, api.ErrAgentUnreachable) {
				return fmt.Errorf("cannot tell whether an agent is running on %s (%w): stop it first", cfg.API.Socket, err)
			}
			out := cmd.OutOrStdout()
			n, err := sensor.Uninstall(cfg.BPF.PinDir)
			if err != nil {
				return err
			}
			fmt.Fprintf(out, "detached and unpinned %d program set(s) under %s\n", n, cfg.BPF.PinDir)
			removed, err := state.Remove(cfg.State.Dir)
			if errors.Is(err, state.ErrLocked) {
				return fmt.Errorf("an agent holds the saved state %s (it may still be starting): stop it first, then run uninstall", cfg.State.Dir)
			}
			if err != nil {
				return fmt.Errorf("remove the saved state %s: %w", cfg.State.Dir, err)
			}
			if removed {
				fmt.Fprintf(out, "removed the saved state %s\n", cfg.State.Dir)
			}
			if dir := cfg.History.Dir; dir != "" {
				if _, err := os.Stat(dir); err == nil {
					fmt.Fprintf(out, "kept the history %s (sessions, processes and kills on record); rm -r %s removes it\n", dir, dir)
				}
			}
			return nil
		},
	}
	// The options uninstall reads (bpf.bpffs: kubectl debug passes the
	// node's, as the README says), not every option of the agent.
	config.BindFlags(cmd.Flags(), "api.socket", "bpf.bpffs", "bpf.pin-dir", "state.dir", "history.dir")
	return cmd
}
