package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

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
is replaced. A file it cannot parse is refused and left untouched.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			file := args[0]
			format, err := wrapconfig.FormatFor(file)
			if err != nil {
				return fmt.Errorf("%w; docs/hosts.md shows the lines to change by hand", err)
			}
			data, err := os.ReadFile(file)
			if err != nil {
				return err
			}
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
			backup, err := replaceFile(file, data, out)
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

// replaceFile keeps old beside file as a backup, then replaces file with
// data atomically (a temporary file renamed over it), with file's mode
// and owner. A symbolic link (a dotfiles checkout) is followed: the file
// it names is replaced, the link stays. It returns the backup's name.
func replaceFile(file string, old, data []byte) (string, error) {
	file, err := filepath.EvalSymlinks(file)
	if err != nil {
		return "", err
	}
	st, err := os.Stat(file)
	if err != nil {
		return "", err
	}
	// A backup never replaces another: a second rewrite within the same
	// second gets .2, .3 …
	base := file + ".mcptrace-backup-" + time.Now().UTC().Format("20060102T150405Z")
	backup := base
	for n := 2; ; n++ {
		err := writeNew(backup, old, st)
		if err == nil {
			break
		}
		if !errors.Is(err, os.ErrExist) || n > 100 {
			return "", fmt.Errorf("keep a copy of %s: %w; the file was not changed", file, err)
		}
		backup = fmt.Sprintf("%s.%d", base, n)
	}
	tmp := file + ".mcptrace-new"
	if err := writeNew(tmp, data, st); err != nil {
		return "", fmt.Errorf("write %s: %w; the file was not changed", tmp, err)
	}
	if err := os.Rename(tmp, file); err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("replace %s: %w; the file was not changed", file, err)
	}
	return backup, nil
}

// writeNew writes a file that must not exist yet, with st's mode and
// owner, and syncs it.
func writeNew(name string, data []byte, st os.FileInfo) error {
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, st.Mode().Perm())
	if err != nil {
		return err
	}
	_, werr := f.Write(data)
	serr := f.Sync()
	cerr := f.Close()
	if err := errors.Join(werr, serr, cerr); err != nil {
		os.Remove(name)
		return err
	}
	if err := chownLike(name, st); err != nil {
		os.Remove(name)
		return err
	}
	return nil
}
