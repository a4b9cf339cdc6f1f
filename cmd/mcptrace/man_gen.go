//go:build mangen

package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
)

// Built only with -tags mangen (scripts/deb.sh): the agent's binary does
// not carry the man page renderer.
func init() {
	buildCmds = append(buildCmds, &cobra.Command{
		Use:    "gen-man DIR",
		Short:  "Write a man page per command into DIR",
		Hidden: true,
		Args:   cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			root := cmd.Root()
			root.RemoveCommand(cmd)
			root.DisableAutoGenTag = true
			if err := os.MkdirAll(args[0], 0o755); err != nil {
				return err
			}
			header := &doc.GenManHeader{Title: "MCPTRACE", Section: "1", Source: "mcptrace " + version, Manual: "mcptrace"}
			if err := doc.GenManTree(root, header, args[0]); err != nil {
				return fmt.Errorf("man pages: %w", err)
			}
			return nil
		},
	})
}
