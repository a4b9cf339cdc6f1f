package main

import (
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/mcptrace/mcptrace/api"
	"github.com/mcptrace/mcptrace/history"
)

func newHistoryCmd() *cobra.Command {
	var (
		since, until, id string
		owner            uint32
		limit            int
		asJSON           bool
	)
	cmd := &cobra.Command{
		Use:   "history",
		Short: "List past and present sessions from the agent's history: host, servers, how they ended, what was killed",
		Long: `List the sessions the agent's history holds (history.dir), newest first:
when each began and ended, its host and MCP servers, how it ended, how many
of its processes the enforcer killed, the most memory its servers held at
once (PEAK RSS), what the processes mcptrace killed held when last sampled
(KILLED RSS: not a leak, what was ended), and their CPU time.

  mcptrace history                      the last 24 hours
  mcptrace history --since 7d           the last week (as far as the history reaches)
  mcptrace history --since 2026-11-25T08:00:00Z --until 2026-11-25T12:00:00Z
  mcptrace history --id claude-1234     every session that had this ID

Then mcptrace tree --session ID shows one of them with its dead wrappers,
servers and kill records, also after the agent forgot it or restarted
(--at TIME picks the one with that ID at that time).

Root sees every user's sessions, anyone else only their own. Command lines
were redacted before they were written.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadConfig(cmd)
			if err != nil {
				return err
			}
			now := time.Now()
			q := api.HistoryQuery{ID: id, Owner: ownerOf(cmd, owner), Limit: limit}
			if q.From, err = parseWhen(since, now); err != nil {
				return usageError{fmt.Errorf("--since: %w", err)}
			}
			if until != "" {
				if q.To, err = parseWhen(until, now); err != nil {
					return usageError{fmt.Errorf("--until: %w", err)}
				}
			}
			list, err := api.NewClient(cfg.API.Socket).History(cmd.Context(), q)
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(cmd, list)
			}
			out := cmd.OutOrStdout()
			if len(list.Sessions) == 0 {
				fmt.Fprintf(out, "no sessions in the history since %s", q.From.Local().Format(timeLayout))
				if !list.Oldest.IsZero() && list.Oldest.After(q.From) {
					fmt.Fprintf(out, " (it reaches back to %s)", list.Oldest.Local().Format(timeLayout))
				}
				fmt.Fprintln(out)
			} else {
				tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "BEGAN\tLASTED\tOWNER\tSESSION\tHOST\tSERVERS\tENDED BY\tMEMBERS\tKILLED\tPEAK RSS\tKILLED RSS\tCPU")
				for _, s := range list.Sessions {
					fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\n", s.Began.Local().Format(timeLayout), lasted(s, now), s.Owner, s.ID,
						orDash(s.Host), orDash(servers(s.Servers)), endedBy(s), s.Members, s.Killed, bytesOrDash(s.PeakRSS), bytesOrDash(s.KilledRSSBytes()), cpuOrDash(s.CPUSeconds))
				}
				if err := tw.Flush(); err != nil {
					return err
				}
			}
			for _, n := range list.Notes {
				fmt.Fprintf(out, "note %s: %s", n.At.Local().Format(timeLayout), n.What)
				if n.Count != 0 {
					fmt.Fprintf(out, " (%d)", n.Count)
				}
				fmt.Fprintln(out)
			}
			if list.Truncated {
				fmt.Fprintf(out, "(only the newest %d; narrow with --since/--until/--id or raise --limit)\n", len(list.Sessions))
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&since, "since", "24h", "from this `TIME` on: a duration ago (90m, 7d) or a time (2026-11-26T09:00:00Z, \"2026-11-26 09:00\", 09:00 today)")
	f.StringVar(&until, "until", "", "up to this `TIME` (as --since); default: now")
	f.StringVar(&id, "id", "", "only sessions with this `ID`")
	f.Uint32Var(&owner, "owner", 0, "only sessions of this `UID` (root only; anyone else sees their own)")
	f.IntVar(&limit, "limit", api.DefaultHistoryLimit, fmt.Sprintf("list at most `N` sessions (up to %d)", api.MaxHistoryLimit))
	f.BoolVar(&asJSON, "json", false, "print the sessions as JSON for machines")
	bindSocketFlag(cmd)
	return cmd
}

// timeLayout is how times are shown.
const timeLayout = "2006-01-02 15:04:05"

// parseWhen reads a time: a duration ago (with d for days), RFC 3339, or
// a local date and time, or a local time of today.
func parseWhen(s string, now time.Time) (time.Time, error) {
	s = strings.TrimSpace(s)
	if d, ok := strings.CutSuffix(s, "d"); ok {
		var days float64
		if _, err := fmt.Sscanf(d, "%g", &days); err == nil && days >= 0 {
			return now.Add(-time.Duration(days * 24 * float64(time.Hour))), nil
		}
	}
	if d, err := time.ParseDuration(s); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	for _, layout := range []string{"2006-01-02 15:04:05", "2006-01-02 15:04", "2006-01-02"} {
		if t, err := time.ParseInLocation(layout, s, time.Local); err == nil {
			return t, nil
		}
	}
	for _, layout := range []string{"15:04:05", "15:04"} {
		if t, err := time.ParseInLocation(layout, s, time.Local); err == nil {
			y, m, d := now.Date()
			return time.Date(y, m, d, t.Hour(), t.Minute(), t.Second(), 0, time.Local), nil
		}
	}
	return time.Time{}, fmt.Errorf("%q is neither a duration ago (90m, 7d) nor a time (2026-11-26T09:00:00Z, \"2026-11-26 09:00\", 09:00)", s)
}

func lasted(s history.Session, now time.Time) string {
	if s.Ended.IsZero() {
		return "running"
	}
	return s.Ended.Sub(s.Began).Round(time.Second).String()
}

func endedBy(s history.Session) string {
	if s.Ended.IsZero() {
		return "-"
	}
	return orDash(s.EndReason)
}

// servers lists names, at most three and how many more.
func servers(names []string) string {
	if len(names) > 3 {
		return strings.Join(names[:3], ",") + fmt.Sprintf(" +%d", len(names)-3)
	}
	return strings.Join(names, ",")
}

func cpuOrDash(secs float64) string {
	if secs <= 0 {
		return "-"
	}
	return (time.Duration(secs * float64(time.Second))).Round(10 * time.Millisecond).String()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func bytesOrDash(n uint64) string {
	if n == 0 {
		return "-"
	}
	return humanBytes(n)
}

// humanBytes is n in B, KiB, MiB or GiB.
func humanBytes(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	v, u := float64(n), 0
	for v >= unit && u < 3 {
		v /= unit
		u++
	}
	return fmt.Sprintf("%.1f %ciB", v, "KMG"[u-1])
}
