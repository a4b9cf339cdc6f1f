package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
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

type exitError struct {
	code int
	err  error
}

func (e exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit status %d", e.code)
	}
	return e.err.Error()
}
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

// accepted, when set (by tests), is told of every run, exec and mark
// destroy the CLI accepts, instead of acting on it: its command path and
// --session value.
var accepted func(command, id string)

// newTagCmd makes run and exec: both exec into the command after "--",
// leaving their own command line, with the tag, in the kernel's exec event.
// Before they exec they ask the agent whether that declared the session,
// and report a refusal instead of running the command.
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
			if accepted != nil {
				accepted(cmd.Name(), id)
				return nil
			}
			return runTagged(cmd, id, args)
		},
	}
	cmd.Flags().StringVar(&id, "session", "", idUsage)
	bindSocketFlag(cmd)
	return cmd
}

// confirmWait bounds how long run and exec wait for the agent's answer.
const confirmWait = 5 * time.Second

// confirmTag asks the agent whether the exec of this process's command
// line declared its session. A refusal (another session of the caller
// with this ID, the per-uid cap, …) is an error: the command is not run.
// No agent on the socket (a sandbox without it) or no answer in time is
// not: the kernel's report of the exec is what declares the session.
func confirmTag(cmd *cobra.Command, id string) error {
	cfg, err := loadConfig(cmd)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), confirmWait)
	defer cancel()
	_, err = api.NewClient(cfg.API.Socket).Begin(ctx, uint32(os.Getpid()), id)
	switch {
	case err == nil, errors.Is(err, api.ErrAgentUnreachable):
		return nil
	case errors.Is(err, context.DeadlineExceeded):
		fmt.Fprintf(cmd.ErrOrStderr(), "mcptrace: the agent did not confirm the session within %v; running anyway\n", confirmWait)
		return nil
	}
	what := "session"
	if id != "" {
		what = fmt.Sprintf("session %q", id)
	}
	return fmt.Errorf("%s not declared, the command was not run: %w", what, err)
}

func newRunCmd() *cobra.Command {
	return newTagCmd("run [--session ID] -- CMD [ARGS…]",
		"Run CMD as the root of a session: when it exits, everything it started is ended",
		`Run CMD as the root of a new session. mcptrace execs CMD in the same
process; the agent recognises the session from this command line, which the
kernel reports at exec, so no connection to the agent is needed (CMD may run
in a sandbox without the socket). When an agent answers on the socket,
mcptrace asks it first whether the session was declared, and fails without
running CMD when it was refused (an active session of yours with this ID,
too many active sessions). When CMD exits, or a destroy marker names
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
	var (
		id         string
		kernelOnly bool
	)
	destroy := &cobra.Command{
		Use:   "destroy [--session ID] [--kernel-only]",
		Short: "End what a session started so far: the host keeps running, its servers end",
		Long: `Send a destroy marker. Without --session it is for the session whose root
process ran this command (the host runs it as a child); with --session ID,
for the named session or sub-session. The caller must be root, the
session's owner, or the session's root or one of its creators.

What a marker ends:
  - a session rooted at a host (mcptrace run, session begin, a host rule):
    everything the host started before the marker, at any depth; the host
    keeps running and what it starts from now on is the session's next
    generation. A refreshed MCP manager or a closed conversation sends one.
  - a sub-session of "mcptrace exec": the server and everything below it.
To end a session with its host, use "mcptrace session end ID".

The marker reaches the agent twice: through the API socket, and through the
kernel, which reports this command line at exec (applied once). When no
agent answers on the socket this command fails: the marker then takes
effect only if an agent sees the exec. Where a sandbox hides the socket on
purpose, pass --kernel-only: the marker is then left to the kernel's report
alone, and this command says that it depends on a running agent.

This process belongs to what it ends: the agent ends it last, after the
grace period, so that it can print the result. It ignores SIGTERM.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if id != "" && !sessions.ValidID(id) {
				return usageError{fmt.Errorf("session ID %q is not valid", id)}
			}
			if accepted != nil {
				accepted(cmd.Parent().Name()+" "+cmd.Name(), id)
				return nil
			}
			signal.Ignore(syscall.SIGTERM)
			out := cmd.OutOrStdout()
			if kernelOnly {
				fmt.Fprintln(out, "marker left to the kernel's report of this command: it takes effect only if an mcptrace agent is running")
				return nil
			}
			cfg, err := loadConfig(cmd)
			if err != nil {
				return err
			}
			res, err := api.NewClient(cfg.API.Socket).MarkDestroy(cmd.Context(), id)
			if errors.Is(err, api.ErrAgentUnreachable) {
				return fmt.Errorf("%w\nthe marker was not confirmed: it takes effect only if an agent sees this command's exec; where a sandbox hides the socket on purpose, use --kernel-only", err)
			}
			if err != nil {
				return fmt.Errorf("destroy marker refused: %w", err)
			}
			printEnded(out, res)
			return nil
		},
	}
	destroy.Flags().StringVar(&id, "session", "", "session `ID` to mark")
	destroy.Flags().BoolVar(&kernelOnly, "kernel-only", false, "do not contact the agent: leave the marker to the kernel's report of this exec (sandboxes without the socket)")
	bindSocketFlag(destroy)
	mark.AddCommand(destroy)
	return mark
}

// printEnded says what a marker or a session end ended.
func printEnded(w io.Writer, res api.MarkResult) {
	already := ""
	if res.Already {
		already = " (already delivered through the kernel)"
	}
	for _, g := range res.Generations {
		fmt.Fprintf(w, "session %s: generation %d ended%s; the host keeps running as generation %d\n", g.Session, g.Generation, already, g.Generation+1)
	}
	if len(res.Ended) > 0 {
		fmt.Fprintf(w, "session %s ended%s\n", strings.Join(res.Ended, ", "), already)
	}
	if len(res.Generations) == 0 && len(res.Ended) == 0 {
		fmt.Fprintln(w, "marker delivered; no active session was left to end")
	}
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
	var endOwner uint32
	end := &cobra.Command{
		Use:   "end ID [--owner UID]",
		Short: "End a session whole: its root (the host) and everything it started",
		Long: `End session ID now, its root included, with every session nested in it.
A destroy marker (mcptrace mark destroy) ends what a host started and spares
the host; this ends the host too. The caller must be root, the session's
owner, or the session's root or one of its creators.

Session IDs are scoped by owner: ID names the caller's own session (or one
its process is related to by creation). Root names another user's session
with --owner UID when several users have one of that ID.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !sessions.ValidID(args[0]) {
				return usageError{fmt.Errorf("session ID %q is not valid", args[0])}
			}
			cfg, err := loadConfig(cmd)
			if err != nil {
				return err
			}
			res, err := api.NewClient(cfg.API.Socket).EndSession(cmd.Context(), args[0], ownerOf(cmd, endOwner))
			if err != nil {
				return err
			}
			printEnded(cmd.OutOrStdout(), res)
			return nil
		},
	}
	bindSocketFlag(end)
	end.Flags().Uint32Var(&endOwner, "owner", 0, ownerUsage)
	session.AddCommand(begin, end)
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
			fmt.Fprintln(tw, "SESSION\tSTATE\tGEN\tORIGIN\tROOT\tOWNER\tALIVE/MEMBERS\tKILLED\tSINCE\tREASON")
			for _, s := range list {
				since := s.Began
				if s.EndedAt != 0 {
					since = s.EndedAt
				}
				id := s.ID
				switch {
				case s.Parent != "" && s.ParentOwner != s.Owner:
					// IDs are scoped by owner: say whose the parent is.
					id = fmt.Sprintf("%s(uid %d)/%s", s.Parent, s.ParentOwner, s.ID)
				case s.Parent != "":
					id = s.Parent + "/" + s.ID
				}
				fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%d\t%d\t%d/%d\t%d\t%s\t%s\n", id, s.State, s.Generation, s.Origin, s.Root.PID, s.Owner,
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

// ownerUsage documents --owner on the commands that name a session.
const ownerUsage = "the `UID` whose session ID names (session IDs are scoped by owner; root says whose when several users have one)"

// ownerOf is the --owner flag's value when it was given, else nil.
func ownerOf(cmd *cobra.Command, v uint32) *uint32 {
	if !cmd.Flags().Changed("owner") {
		return nil
	}
	return &v
}
