package main

import (
	"errors"
	"fmt"
	"os/user"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/mcptrace/mcptrace/safefile"
	"github.com/mcptrace/mcptrace/wrapconfig"
)

func newWrapConfigCmd() *cobra.Command {
	var unwrap, dryRun bool
	var program string
	cmd := &cobra.Command{
		Use:   "wrap-config FILE",
		Short: "Make a host's MCP configuration start every server under mcptrace exec (or undo it)",
		Long: `Rewrite an agent host's MCP configuration file so that each stdio server
runs as "mcptrace exec --session NAME -- COMMAND ARGS…": a sub-session named
after the server, which "mcptrace mark destroy --session NAME" ends alone and
which the host's session ends with it. --unwrap undoes it.

The file's extension says how it is read, whatever its content: .json for
Claude Code's .mcp.json and ~/.claude.json (its per-project servers too),
Cursor's mcp.json and VS Code's mcp.json; .toml for Codex's
~/.codex/config.toml ([mcp_servers.NAME] tables); .yaml or .yml for goose's
~/.config/goose/config.yaml (stdio extensions). Any other name is refused.
Servers over HTTP or SSE, goose's builtin extensions, and servers already
wrapped, are left as they are; so is everything else in the file.

A JSON file is written whole (indented with two spaces, keys in their
order). In a TOML or YAML file only the command and args of each server
change, in place: comments and every other line keep their bytes, and
--unwrap gives back the file as it was. The result is read back and
checked before it is written. What cannot be edited safely in place (an
anchor, alias, tag or block scalar on a command or args, a goose extension
without args, comments among the arguments --unwrap would remove) is
refused, naming the server: change those lines by hand (docs/hosts.md).

A copy of the file is kept beside it (FILE.mcptrace-backup-TIME) before it
is replaced, with the file's owner, group and mode, as is the new file. A
file it cannot parse is refused and left untouched.

Run it as the user whose file it is. It never follows a symbolic link of
another user on the way to FILE, and refuses a FILE, or a directory on its
path, that belongs to another user (root's included, run by anyone else),
saying whom to run it as: root running it on a user's file would otherwise
write where that user's links and directories lead.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			file := args[0]
			format, err := wrapconfig.FormatFor(file)
			if err != nil {
				return fmt.Errorf("%w; docs/hosts.md shows the lines to change by hand", err)
			}
			f, err := safefile.Open(file, safefile.Write)
			if err != nil {
				return asItsOwner(err, cmd, file)
			}
			defer f.Close()
			data := f.Data
			var out []byte
			var changes []wrapconfig.Change
			if unwrap {
				out, changes, err = wrapconfig.Unwrap(format, data)
			} else {
				out, changes, err = wrapconfig.Wrap(format, data, program)
			}
			if err != nil {
				return fmt.Errorf("%s: %w; the file was not changed", file, err)
			}
			w := cmd.OutOrStdout()
			verb := "wrapped"
			if unwrap {
				verb = "unwrapped"
			}
			for _, c := range changes {
				fmt.Fprintf(w, "%s %s (sub-session %s)\n", verb, c.Where, c.Session)
			}
			if len(changes) == 0 {
				fmt.Fprintf(w, "%s: no server to %s; the file was not changed\n", file, strings.TrimSuffix(verb, "ped"))
				return nil
			}
			if dryRun {
				fmt.Fprintf(w, "dry run: %s was not changed\n", file)
				return nil
			}
			backup, err := f.Replace(out)
			if err != nil {
				return err
			}
			fmt.Fprintf(w, "%s: %s %s; the previous file is %s\n", file, plural(len(changes), "server", "servers"), verb, backup)
			return nil
		},
	}
	f := cmd.Flags()
	f.BoolVar(&unwrap, "unwrap", false, "undo wrap-config: run each server directly again")
	f.BoolVar(&dryRun, "dry-run", false, "say what would change and change nothing")
	f.StringVar(&program, "mcptrace", "mcptrace", "the mcptrace `PROGRAM` the host runs: a name on its PATH or an absolute path")
	return cmd
}

// asItsOwner adds to an error that names a file or directory of another
// user what to do: run the command as that user.
func asItsOwner(err error, cmd *cobra.Command, file string) error {
	var ny *safefile.NotYoursError
	if !errors.As(err, &ny) {
		return err
	}
	who := "#" + strconv.FormatUint(uint64(ny.Owner), 10)
	if u, lerr := user.LookupId(strconv.FormatUint(uint64(ny.Owner), 10)); lerr == nil {
		who = u.Username
	}
	again := []string{cmd.CommandPath()}
	cmd.Flags().Visit(func(f *pflag.Flag) { again = append(again, "--"+f.Name+"="+f.Value.String()) })
	again = append(again, file)
	for i, a := range again[1:] {
		again[i+1] = shellQuote(a)
	}
	return fmt.Errorf("%s: %w: the file was not changed; run it as that user: sudo -u %s %s",
		file, err, who, strings.Join(again, " "))
}

// shellQuote quotes s for a POSIX shell when it needs it.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_./:=@%+,-") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
