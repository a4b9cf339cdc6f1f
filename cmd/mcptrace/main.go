// Command mcptrace is the node agent and its command-line client.
//
//	mcptrace agent                 run the agent (root)
//	mcptrace tree [PID]            show process lineage from the running agent
//	mcptrace tree --ancestors PID  show the creator chain of PID
//	mcptrace status [--json]       whether the agent runs and how it does
//	mcptrace run [--session ID] -- CMD        run CMD as a session root
//	mcptrace exec --session ID -- SERVER      exec SERVER as a tagged sub-session
//	mcptrace mark destroy [--session ID]      end what a session started so far
//	mcptrace session begin --pid PID [--id ID]
//	mcptrace session end ID                   end a session, its root included
//	mcptrace sessions                         list sessions
//	mcptrace history [--since 24h]            list past sessions from the history
//	mcptrace orphans [--end]                  list (and end) MCP servers leaked outside every session
//	mcptrace wrap-config FILE                 run a host's MCP servers under mcptrace exec (--unwrap undoes)
//	mcptrace uninstall                        detach the pinned programs, forget the state
//	mcptrace config example                   print a commented configuration file of every option
//	mcptrace version                          the build of this binary and of the running agent
//
// This file only wires packages together; see docs/ARCHITECTURE.md.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/mcptrace/mcptrace/api"
	"github.com/mcptrace/mcptrace/internal/version"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if cmd, err := newRoot().ExecuteContextC(ctx); err != nil {
		var unreachable *api.UnreachableError
		if errors.As(err, &unreachable) && cmd != nil {
			unreachable.Command = cmd.CommandPath() // for "sudo …"
		}
		var ee exitError
		if errors.As(err, &ee) && ee.err == nil {
			os.Exit(ee.code) // the status of a command mcptrace ran, passed on
		}
		fmt.Fprintln(os.Stderr, "mcptrace:", err)
		var ue usageError
		// cobra's unknown command of the root, with its "Did you mean".
		if errors.As(err, &ue) || strings.HasPrefix(err.Error(), "unknown command ") {
			os.Exit(2)
		}
		if errors.As(err, &ee) {
			os.Exit(ee.code)
		}
		os.Exit(1)
	}
}

type usageError struct{ error }

// buildCmds are commands only some builds have (build tags: man_gen.go).
var buildCmds []*cobra.Command

func newRoot() *cobra.Command {
	cmds := []*cobra.Command{newAgentCmd(), newTreeCmd(), newStatusCmd(),
		newRunCmd(), newExecCmd(), newMarkCmd(), newSessionCmd(), newSessionsCmd(), newHistoryCmd(), newOrphansCmd(), newEventsCmd(), newWrapConfigCmd(), newUninstallCmd(), newConfigCmd(), newServiceCmd(), newVersionCmd()}
	return newRootWith(append(cmds, buildCmds...)...)
}

// newRootWith is the root command with these subcommands.
func newRootWith(cmds ...*cobra.Command) *cobra.Command {
	root := &cobra.Command{
		Use:           "mcptrace",
		Version:       version.Get().String(),
		Short:         "Trace the process lineage of AI agent sessions and the MCP servers they start",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetVersionTemplate("mcptrace {{.Version}}\n")
	root.PersistentFlags().String("config", "", "configuration file (YAML); default /etc/mcptrace/config.yaml when it exists")
	root.AddCommand(cmds...)
	root.SetFlagErrorFunc(flagError)
	unknownSubcommand(root)
	addExamples(root)
	addCompletions(root)
	return root
}
