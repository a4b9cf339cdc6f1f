package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/mcptrace/mcptrace/api"
	"github.com/mcptrace/mcptrace/orphans"
	"github.com/mcptrace/mcptrace/treeview"
)

func newOrphansCmd() *cobra.Command {
	var asJSON, end, includeLikely, certainOnly, dryRun, raw bool
	cmd := &cobra.Command{
		Use:   "orphans [--end [--include-likely] [--dry-run]]",
		Short: "List the MCP servers leaked outside every session, and end them",
		Long: `List the MCP servers on this node that no session owns and that leaked:
the backlog a node holds on the day mcptrace arrives, and what leaks outside
the sessions it watches. Root sees every user's; anyone else their own.

A process is taken for an MCP server only with proof, never by its name
alone nor by its stdin alone: the agent saw a recognised host (a host rule)
or mcptrace run start it; or, for what it did not see start, an MCP name
(@modelcontextprotocol/*, mcp-server-*, *-mcp, a shipped list) together
with its stdin and stdout both connected to one host that is gone, or that
still holds them and started the same server again. Web servers, workers,
dev servers and editors' language servers are never listed.

  certain  an MCP server that nothing can ever use again: its stdin has no
           writer, its stdout no reader, and its chain was reparented to
           init or a subreaper (its host is gone)
  likely   an MCP server whose stdin was cut off under a parent that still
           runs; or whose host still runs, started the same server again,
           and this older instance has been idle
Candidates are MCP servers whose evidence is still being gathered ("idle 3m
of 30m"): shown, never ended.

A container is listed when no session started it, it was started with its
client's stdin attached (docker run -i, as MCP hosts run servers in
containers), and the agent saw the client that started it exit: certain
when its image has an MCP name or a recognised host started the client,
likely otherwise.

Servers run as systemd services, in containers started any other way
(detached, compose, an orchestrator), or matched by a spare rule are never
listed.

  mcptrace orphans                          the list, totals first
  mcptrace orphans --end                    end the certain ones
  mcptrace orphans --end --include-likely   end the likely ones too
  mcptrace orphans --end --dry-run          what --end would end, ending nothing

--end ends each orphan with everything it started, under the enforcer's
policy, grace and spare rules, and with your authority: root ends any
user's, anyone else only processes they could signal themselves. A process
that changed since it was listed (another uid, another program) is refused.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if (includeLikely || certainOnly || dryRun) && !end {
				return usageError{fmt.Errorf("--include-likely and --dry-run go with --end")}
			}
			if includeLikely && certainOnly {
				return usageError{fmt.Errorf("--certain-only is what --end does by default now; it contradicts --include-likely")}
			}
			if raw && os.Geteuid() != 0 {
				return usageError{fmt.Errorf("--raw is for root: the agent redacts command lines for every other user")}
			}
			cfg, err := loadConfig(cmd)
			if err != nil {
				return err
			}
			c := api.NewClient(cfg.API.Socket)
			c.Raw = raw
			out := cmd.OutOrStdout()
			if !end {
				l, err := c.Orphans(cmd.Context())
				if err != nil {
					return err
				}
				// A stdin just seen cut off counts once it stays so:
				// wait for that and look again, rather than list less.
				if l.Pending > 0 && l.ConfirmIn > 0 {
					fmt.Fprintf(cmd.ErrOrStderr(), "confirming %s whose stdin was just cut off (%s)…\n", plural(l.Pending, "more server", "more servers"), treeview.Duration(l.ConfirmIn.Round(100*time.Millisecond)))
					select {
					case <-cmd.Context().Done():
						return cmd.Context().Err()
					case <-time.After(l.ConfirmIn + time.Second):
					}
					if l, err = c.Orphans(cmd.Context()); err != nil {
						return err
					}
				}
				if asJSON {
					return writeJSON(cmd, l)
				}
				printOrphans(out, l)
				return nil
			}
			res, err := c.EndOrphans(cmd.Context(), api.EndOrphansRequest{IncludeLikely: includeLikely, DryRun: dryRun})
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(cmd, res)
			}
			printEndedOrphans(out, res, dryRun)
			if !dryRun {
				if l, err := c.Orphans(cmd.Context()); err == nil {
					fmt.Fprintf(out, "%s left\n", countServers(l.Totals.Servers))
				}
			}
			if res.Report.Survivors > 0 || res.Report.Failed > 0 {
				return exitError{code: 1, err: fmt.Errorf("%d processes survived", res.Report.Survivors)}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.BoolVar(&asJSON, "json", false, "print the answer as JSON for machines")
	f.BoolVar(&end, "end", false, "end what is listed, through the enforcer, with your authority")
	f.BoolVar(&includeLikely, "include-likely", false, "with --end: end the orphans listed as likely too (by default only the certain ones)")
	f.BoolVar(&certainOnly, "certain-only", false, "with --end: only the certain ones, which is what --end does by default now")
	_ = f.MarkDeprecated("certain-only", "--end ends only the certain orphans by default; --include-likely ends the likely ones too")
	f.BoolVar(&dryRun, "dry-run", false, "with --end: run every check and end nothing")
	f.BoolVar(&raw, "raw", false, "root only: unredacted command lines (with --json; they can hold tokens)")
	bindSocketFlag(cmd)
	return cmd
}

func countServers(n int) string { return plural(n, "leaked MCP server", "leaked MCP servers") }

// plural is n and the noun in its number.
func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

// printOrphans writes the totals, then the orphans grouped by host kind
// and server, each with its evidence.
func printOrphans(w io.Writer, l api.OrphanList) {
	t := l.Totals
	if t.Servers == 0 {
		fmt.Fprintln(w, "no leaked MCP server: every one on this node belongs to a session or shows no sign of a leak")
		printCandidates(w, l)
		printUnchecked(w, l)
		return
	}
	oldest := ""
	if t.OldestStart > 0 && t.OldestStart <= l.Now {
		oldest = ", the oldest started " + treeview.Duration(time.Duration(l.Now-t.OldestStart)) + " ago"
	}
	fmt.Fprintf(w, "%s (%d certain, %d likely): %d processes, %s resident%s\n", countServers(t.Servers), t.Certain, t.Likely,
		t.Processes, humanBytes(t.RSSBytes), oldest)
	printGroups(w, l.Now, l.Orphans)
	printCandidates(w, l)
	printUnchecked(w, l)
	fmt.Fprintln(w, "\nmcptrace orphans --end ends the certain ones (--include-likely: the likely ones too; --dry-run: show what it would end)")
}

// printCandidates writes the MCP servers whose evidence is still being
// gathered.
func printCandidates(w io.Writer, l api.OrphanList) {
	if len(l.Candidates) == 0 {
		return
	}
	fmt.Fprintf(w, "\n%s still being confirmed (shown, never ended):\n", plural(len(l.Candidates), "candidate", "candidates"))
	printGroups(w, l.Now, l.Candidates)
}

// printGroups writes orphans grouped by host kind and server, each with
// its evidence.
func printGroups(w io.Writer, now uint64, list []orphans.Orphan) {
	var group string
	for _, o := range list {
		if g := o.HostKind + "\x00" + o.Name; g != group {
			group = g
			host := o.HostKind + " host"
			if o.HostKind == orphans.UnknownHost {
				host = "host unknown"
			}
			fmt.Fprintf(w, "\n%s · %s\n", o.Name, host)
		}
		started := "-"
		if o.Server.Start > 0 && o.Server.Start <= now {
			started = treeview.Duration(time.Duration(now-o.Server.Start)) + " old"
		}
		chain := strings.Join(o.Chain, " → ")
		if o.Container != "" && o.Client.PID != 0 {
			chain += fmt.Sprintf(" (started by pid %d)", o.Client.PID)
		}
		conf := string(o.Confidence)
		if conf == "" {
			conf = "pending"
		}
		fmt.Fprintf(w, "  %-7s  pid %-7d %-9s %-13s  %9s  %s\n", conf, o.Server.PID, started, plural(o.Processes, "process", "processes"),
			humanBytes(o.RSSBytes), chain)
		for _, e := range o.Evidence {
			fmt.Fprintf(w, "           %s\n", e)
		}
	}
}

// printUnchecked says which containers the list could not look at.
func printUnchecked(w io.Writer, l api.OrphanList) {
	switch {
	case l.ContainersUnchecked > 0:
		fmt.Fprintf(w, "%s not checked: %s\n", plural(l.ContainersUnchecked, "running container was", "running containers were"), l.ContainersWhy)
	case l.ContainersWhy != "":
		fmt.Fprintln(w, l.ContainersWhy)
	}
}

// printEndedOrphans writes what --end did, one line per process.
func printEndedOrphans(w io.Writer, res api.EndOrphansResult, dryRun bool) {
	r := res.Report
	verb := "ended"
	if dryRun {
		verb = "would end (dry run, nothing was ended)"
	}
	fmt.Fprintf(w, "%s %s: %s\n", verb, countServers(len(res.Orphans)), plural(len(r.Records), "process", "processes"))
	for _, rec := range r.Records {
		sig := rec.Signal
		if sig == "" {
			sig = "-"
		}
		what := rec.Comm
		if rec.Container != "" {
			what = "container " + rec.Container[:min(12, len(rec.Container))]
		}
		fmt.Fprintf(w, "  pid %-7d %-22s %-16s %s\n", rec.Process.PID, what, sig, rec.Result)
	}
	if dryRun {
		fmt.Fprintf(w, "%d would be killed, %d spared, %d refused\n", r.WouldKill, r.Spared, r.Refused)
		return
	}
	fmt.Fprintf(w, "%d killed, %d had exited, %d spared, %d refused, %d failed, %d survived (%s)\n", r.Killed, r.ExitedBeforeSignal,
		r.Spared, r.Refused, r.Failed, r.Survivors, r.Duration.Round(time.Millisecond))
}
