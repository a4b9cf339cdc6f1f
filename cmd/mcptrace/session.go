package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/mcptrace/mcptrace/api"
	"github.com/mcptrace/mcptrace/procfs"
	"github.com/mcptrace/mcptrace/sessions"
)

// execInto replaces this process with argv. The agent has already seen this
// process's own exec (with the tag in its argv) in the kernel, so the
// program keeps the identity the tag named.
func execInto(argv []string) error {
	path, err := exec.LookPath(argv[0])
	if err != nil {
		return exitError{code: 127, err: fmt.Errorf("%s: %w", argv[0], err)}
	}
	if err := syscall.Exec(path, argv, os.Environ()); err != nil {
		return exitError{code: 126, err: fmt.Errorf("exec %s: %w", path, err)}
	}
	return nil
}

type exitError struct {
	code int
	err  error
}

func (e exitError) Error() string { return e.err.Error() }
func (e exitError) Unwrap() error { return e.err }

// tagArgs checks the command after "--" and the session ID.
func tagArgs(cmd *cobra.Command, args []string, id string, idRequired bool) error {
	if cmd.ArgsLenAtDash() != 0 || len(args) == 0 {
		return usageError{fmt.Errorf("give the command after --: mcptrace %s --session ID -- CMD ARGS…", cmd.Name())}
	}
	if id == "" && idRequired {
		return usageError{errors.New("--session ID is required")}
	}
	if id != "" && !sessions.ValidID(id) {
		return usageError{fmt.Errorf("session ID %q: use 1-128 characters of letters, digits and . _ : @ + = -, starting with a letter or digit", id)}
	}
	return nil
}

// newTagCmd makes run and exec: both exec into the command after "--",
// leaving their own command line, with the tag, in the kernel's exec event.
func newTagCmd(use, short, long, idUsage string, idRequired bool) *cobra.Command {
	var id string
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Long:  long,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := tagArgs(cmd, args, id, idRequired); err != nil {
				return err
			}
			return execInto(args)
		},
	}
	cmd.Flags().StringVar(&id, "session", "", idUsage)
	return cmd
}

func newRunCmd() *cobra.Command {
	return newTagCmd("run [--session ID] -- CMD [ARGS…]",
		"Run CMD as the root of a session: when it exits, everything it started is ended",
		`Run CMD as the root of a new session. mcptrace execs CMD in the same
process; the agent recognises the session from this command line, which the
kernel reports at exec, so no connection to the agent is needed (CMD may run
in a sandbox without the socket). When CMD exits, or a destroy marker names
the session, every process CMD created, at any depth, is ended.`,
		"session `ID` (default: generated, run-PID)", false)
}

func newExecCmd() *cobra.Command {
	return newTagCmd("exec --session ID -- SERVER [ARGS…]",
		"Exec SERVER tagged as sub-session ID of the session that runs it (for hosts with many logical sessions)",
		`Exec SERVER as the root of sub-session ID, nested in the session of the
process that started it. Use it in an MCP server configuration
("command": "mcptrace", "args": ["exec", "--session", "s1", "--", "npx", …]) when one
host process runs many logical sessions: "mcptrace mark destroy --session s1"
then ends that session's servers and everything below them, and nothing else.
The tag is read by the agent from this command line at exec; there is no
connection to the agent and no race with the server's own children.`,
		"sub-session `ID` (required)", true)
}

func newMarkCmd() *cobra.Command {
	mark := &cobra.Command{
		Use:   "mark",
		Short: "Send a session marker to the agent",
	}
	var id string
	destroy := &cobra.Command{
		Use:   "destroy [--session ID]",
		Short: "End a session now: without --session, the session whose root started this command",
		Long: `End a session now. Without --session, the session whose root process ran
this command ends (the host runs it as a child). With --session ID, the named
session or sub-session ends; the caller must be root, the session's owner, or
the session's root or one of its creators.

The marker reaches the agent twice: through the API socket when it is
reachable, and through the kernel, which reports this command line at exec.
Where the socket cannot be reached (a sandbox), the exec alone delivers it.
When the session is this command's own, the enforcer ends this process too;
it ignores SIGTERM so that it can report first.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if id != "" && !sessions.ValidID(id) {
				return usageError{fmt.Errorf("session ID %q is not valid", id)}
			}
			signal.Ignore(syscall.SIGTERM)
			cfg, err := loadConfig(cmd)
			if err != nil {
				return err
			}
			res, err := api.NewClient(cfg.API.Socket).MarkDestroy(cmd.Context(), id)
			if errors.Is(err, api.ErrAgentUnreachable) {
				fmt.Fprintf(cmd.ErrOrStderr(), "mcptrace: agent socket not reachable (%v); the marker is delivered by the kernel's report of this command\n", err)
				return nil
			}
			if err != nil {
				return fmt.Errorf("destroy marker refused: %w", err)
			}
			switch len(res.Ended) {
			case 0:
				fmt.Fprintln(cmd.OutOrStdout(), "marker delivered; no active session was left to end")
			case 1:
				fmt.Fprintf(cmd.OutOrStdout(), "session %s ended\n", res.Ended[0])
			default:
				fmt.Fprintf(cmd.OutOrStdout(), "sessions %s ended\n", strings.Join(res.Ended, ", "))
			}
			return nil
		},
	}
	destroy.Flags().StringVar(&id, "session", "", "session `ID` to end")
	bindSocketFlag(destroy)
	mark.AddCommand(destroy)
	return mark
}

func newSessionCmd() *cobra.Command {
	session := &cobra.Command{
		Use:   "session",
		Short: "Manage sessions through the agent",
	}
	var (
		pid uint32
		id  string
	)
	begin := &cobra.Command{
		Use:   "begin --pid PID [--id ID]",
		Short: "Declare a running process the root of a session",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if pid == 0 {
				return usageError{errors.New("--pid PID is required")}
			}
			cfg, err := loadConfig(cmd)
			if err != nil {
				return err
			}
			s, err := api.NewClient(cfg.API.Socket).Begin(cmd.Context(), pid, id)
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), s.ID)
			return nil
		},
	}
	begin.Flags().Uint32Var(&pid, "pid", 0, "root process `PID`")
	begin.Flags().StringVar(&id, "id", "", "session `ID` (default: generated)")
	bindSocketFlag(begin)
	session.AddCommand(begin)
	return session
}

func newSessionsCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "sessions",
		Short: "List sessions with their state and member counts",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadConfig(cmd)
			if err != nil {
				return err
			}
			list, err := api.NewClient(cfg.API.Socket).Sessions(cmd.Context())
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if asJSON {
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				return enc.Encode(list)
			}
			now := procfs.BootTimeNow()
			tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "SESSION\tSTATE\tORIGIN\tROOT\tOWNER\tALIVE/MEMBERS\tKILLED\tSINCE\tREASON")
			for _, s := range list {
				since := s.Began
				if s.EndedAt != 0 {
					since = s.EndedAt
				}
				id := s.ID
				if s.Parent != "" {
					id = s.Parent + "/" + s.ID
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d/%d\t%d\t%s\t%s\n", id, s.State, s.Origin, s.Root.PID, s.Owner,
					s.Alive, s.Members, s.Killed, ago(now, since), s.EndReason)
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the sessions as JSON")
	bindSocketFlag(cmd)
	return cmd
}

func ago(now, t uint64) string {
	if t == 0 || t > now {
		return "-"
	}
	return time.Duration(now-t).Round(time.Second).String() + " ago"
}
