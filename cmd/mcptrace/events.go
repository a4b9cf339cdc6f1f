package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/mcptrace/mcptrace/api"
	"github.com/mcptrace/mcptrace/events"
)

func newEventsCmd() *cobra.Command {
	var asJSON, follow bool
	cmd := &cobra.Command{
		Use:   "events [--follow] [--json]",
		Short: "Show what happened: sessions, markers, member execs, kills, containers, orphans, losses",
		Long: `Show the agent's events, one a line, oldest first: sessions beginning and
ending, destroy markers, the programs session members execute, the
enforcer's kills, containers started and stopped with sessions, leaked
servers found and ended (mcptrace orphans), and events the kernel lost.
Each names the node, the session, its host kind, and the process (pid, its
start time, uid). Command lines are redacted, for root too.

Root sees every event; anyone else the events of sessions they own and,
in them, their own uid's processes, their own orphans, and losses.

A follower that reads too slowly misses events rather than slow the agent
down: a "dropped" line says how many, where. For a log pipeline on the
node, the agent can write the same lines to a file itself (export.file,
rotated at export.max-bytes).`,
		Example: `  mcptrace events                   # the last events the agent kept (not execs)
  mcptrace events --follow          # those, then every event as it happens
  mcptrace events --follow --json   # one JSON object a line, for a pipeline`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadConfig(cmd)
			if err != nil {
				return err
			}
			c := api.NewClient(cfg.API.Socket)
			out := cmd.OutOrStdout()
			enc := json.NewEncoder(out)
			enc.SetEscapeHTML(false)
			return c.Events(cmd.Context(), follow, func(e events.Event) error {
				if asJSON {
					return enc.Encode(e)
				}
				return writeEvent(out, e)
			})
		},
	}
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "after the kept events, print every event as it happens, until interrupted")
	cmd.Flags().BoolVar(&asJSON, "json", false, "one JSON object a line (the export file's lines)")
	bindSocketFlag(cmd)
	return cmd
}

// writeEvent writes e as one line for a person: time, kind, session,
// process, then what the kind says.
func writeEvent(w io.Writer, e events.Event) error {
	var b strings.Builder
	b.WriteString(e.Time.Local().Format("2006-01-02 15:04:05.000"))
	fmt.Fprintf(&b, " %-15s", e.Kind)
	if e.Session != "" {
		b.WriteString(" " + e.Session)
		if e.HostKind != "" {
			b.WriteString(" (" + e.HostKind + ")")
		}
		if e.Generation > 1 || e.Kind == events.Marker {
			fmt.Fprintf(&b, " gen %d", e.Generation)
		}
	}
	if e.PID != 0 {
		fmt.Fprintf(&b, " pid %d", e.PID)
	}
	if e.UID != nil {
		fmt.Fprintf(&b, " uid %d", *e.UID)
	}
	argv := strings.Join(e.Argv, " ")
	if e.ArgvTruncated {
		argv += " …"
	}
	switch e.Kind {
	case events.SessionBegin:
		b.WriteString(": began " + strings.TrimSpace(e.Comm+" "+argv))
	case events.SessionEnd:
		b.WriteString(": ended, " + e.Reason)
		if e.Detail != "" {
			b.WriteString(" (" + e.Detail + ")")
		}
	case events.Marker:
		fmt.Fprintf(&b, ": destroy marker ended generation %d", e.Generation)
	case events.Exec:
		b.WriteString(": " + or(argv, e.File))
	case events.Kill, events.OrphanEnded:
		fmt.Fprintf(&b, ": %s %s", or(e.Signal, "no signal"), e.Result)
		if e.LatencyMS > 0 {
			fmt.Fprintf(&b, " in %s", time.Duration(e.LatencyMS*float64(time.Millisecond)).Round(time.Millisecond))
		}
		b.WriteString(", " + strings.TrimSpace(e.Comm+" "+argv))
	case events.ContainerStart, events.ContainerStop:
		fmt.Fprintf(&b, ": container %s %s", shortID(e.Container), e.Image)
		if e.Result != "" {
			fmt.Fprintf(&b, " %s %s", e.Signal, e.Result)
		}
	case events.OrphanFound:
		fmt.Fprintf(&b, ": %s leaked (%s, %s): %s", or(e.Server, e.Comm), e.Confidence, e.Reason, e.Evidence)
	case events.Loss:
		fmt.Fprintf(&b, ": the kernel lost %d %s events; the graph is repaired from /proc", e.Count, e.What)
	case events.Dropped:
		fmt.Fprintf(&b, ": %d events missed here (this reader fell behind; the agent did not)", e.Count)
	}
	b.WriteString("\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// or is s, or orElse when s is empty.
func or(s, orElse string) string {
	if s == "" {
		return orElse
	}
	return s
}
