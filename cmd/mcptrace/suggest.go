package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/mcptrace/mcptrace/config"
)

// flagError is the root's FlagErrorFunc: a usage error (exit 2) that
// names the flag meant when an unknown one is a typo of a flag the
// command has (--sesion: did you mean --session?).
func flagError(cmd *cobra.Command, err error) error {
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "unknown flag: --"); ok {
		name, _, _ = strings.Cut(name, "=")
		var known []string
		cmd.Flags().VisitAll(func(f *pflag.Flag) {
			if !f.Hidden {
				known = append(known, f.Name)
			}
		})
		if s := config.Closest(name, known); s != "" {
			return usageError{fmt.Errorf("%w; did you mean --%s? (mcptrace %s --help lists its flags)", err, s, cmd.Name())}
		}
	}
	return usageError{fmt.Errorf("%w (%s --help lists its flags)", err, cmd.CommandPath())}
}

// unknownSubcommand makes a command that only groups others (session,
// mark, config) fail on a word that is none of them, with the nearest
// one, instead of printing its help and exiting 0 as cobra does for
// commands below the root.
func unknownSubcommand(cmd *cobra.Command) {
	for _, c := range cmd.Commands() {
		unknownSubcommand(c)
	}
	if cmd.HasParent() && cmd.HasSubCommands() && !cmd.Runnable() {
		cmd.Args = cobra.ArbitraryArgs
		cmd.SuggestionsMinimumDistance = 2 // cobra's default, which it sets for the root only
		cmd.RunE = func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return cmd.Help()
			}
			msg := fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())
			if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
				msg += fmt.Sprintf("; did you mean %s %s?", cmd.CommandPath(), s[0])
			}
			return usageError{fmt.Errorf("%s (%s --help lists them)", msg, cmd.CommandPath())}
		}
	}
}
