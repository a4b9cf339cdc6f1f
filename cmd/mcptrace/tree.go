package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/mcptrace/mcptrace/api"
	"github.com/mcptrace/mcptrace/config"
	"github.com/mcptrace/mcptrace/enforcer"
	"github.com/mcptrace/mcptrace/lineage"
	"github.com/mcptrace/mcptrace/redact"
	"github.com/mcptrace/mcptrace/roles"
	"github.com/mcptrace/mcptrace/sessions"
	"github.com/mcptrace/mcptrace/treeview"
)

func newTreeCmd() *cobra.Command {
	var (
		ancestors  uint32
		session    string
		owner      uint32
		asJSON     bool
		kernel     bool
		noChain    bool
		showSecret bool
		raw        bool
		width      int
		verbose    bool
		all        bool
		at         string
		format     string
	)
	cmd := &cobra.Command{
		Use:   "tree [PID]",
		Short: "Show process lineage from the running agent: the whole node, or PID and everything it created",
		Long: `Show process lineage from the running agent.

  mcptrace tree                  every process on the node (root) or of your uid
  mcptrace tree PID              PID and everything it created, at any depth,
                                 including daemons reparented away and the
                                 children of wrappers that already exited
  mcptrace tree --ancestors PID  the creator chain from PID up to init
  mcptrace tree --session ID     the members of a session, with what the
                                 enforcer did to each; a session the agent
                                 no longer holds comes from its history.
                                 The commands a host ran for itself that
                                 exited within 10s (git, lsb_release, its
                                 own forks) are one line per parent;
                                 -v or --all shows each
  mcptrace tree --session ID --at TIME
                                 the session with that ID at that time
  mcptrace tree PID --at TIME    PID and what it had created at that time,
                                 from the history of sessions

On Windows, where the agent does not run yet, tree shows a snapshot of
the processes running now (their creators as far as a snapshot can tell:
an exited wrapper's children show at the top level); --session and --at
need the agent.

Exited processes stay in the graph while something they created lives, and
are shown as exited so the chain is never broken. Secrets in command lines
are redacted, also in --json: the agent redacts them for every caller but
root, and shows a user only the programs a process ran under that user's
uid. Root may ask for raw command lines with --raw.

Pictures for incident reports:

  mcptrace tree --session ID --format svg > s.svg   a timeline of the session:
                              births, execs, deaths, kills, destroy markers
  mcptrace tree [PID] --format dot | dot -Tsvg > t.svg
                              the lineage as a Graphviz graph`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := loadConfig(cmd)
			if err != nil {
				return err
			}
			if asJSON {
				format = "json"
			}
			switch format {
			case "text", "json", "dot":
			case "svg":
				if !cmd.Flags().Changed("session") {
					return usageError{fmt.Errorf("--format svg draws the timeline of one session: give --session ID")}
				}
			default:
				return usageError{fmt.Errorf("--format %q: want text, json, dot or svg", format)}
			}
			asJSON = format == "json"
			if raw && os.Geteuid() != 0 {
				return usageError{fmt.Errorf("--raw is for root: the agent redacts command lines for every other user")}
			}
			c := api.NewClient(cfg.API.Socket)
			// Root's --show-secrets asks for raw argv too; for anyone else
			// the agent redacts whatever is asked.
			c.Raw = (raw || showSecret) && os.Geteuid() == 0
			showSecret = showSecret || raw
			var src treeSource = c
			local, err := localTreeSource()
			if err != nil {
				return err
			}
			if local != nil {
				if cmd.Flags().Changed("session") || at != "" {
					return usageError{fmt.Errorf("--session and --at need the agent, which does not run on %s yet: mcptrace tree shows the processes running now", runtime.GOOS)}
				}
				src = local
			}
			ctx := cmd.Context()
			var list api.ProcessList
			var notes, labels map[lineage.ID]string
			var fold func(*lineage.Process) bool
			var detail *api.SessionDetail
			selectors := len(args)
			for _, f := range []string{"ancestors", "session"} {
				if cmd.Flags().Changed(f) {
					selectors++
				}
			}
			var when time.Time
			if at != "" {
				if when, err = parseWhen(at, time.Now()); err != nil {
					return usageError{fmt.Errorf("--at: %w", err)}
				}
				if cmd.Flags().Changed("ancestors") || selectors == 0 {
					return usageError{fmt.Errorf("--at goes with PID or --session ID: the history keeps sessions and what they started")}
				}
			}
			switch {
			case selectors > 1:
				return usageError{fmt.Errorf("give one of PID, --ancestors PID, --session ID")}
			case cmd.Flags().Changed("session"):
				var d api.SessionDetail
				if at != "" {
					d, err = c.SessionAt(ctx, session, ownerOf(cmd, owner), when)
				} else {
					d, err = c.Session(ctx, session, ownerOf(cmd, owner))
				}
				if !asJSON {
					placeContainers(d)
				}
				list = api.ProcessList{Now: d.Now, Processes: d.Processes}
				notes = sessionNotes(d)
				labels = sessionLabels(d)
				if !verbose && !all {
					fold = shortCommands(d)
				}
				detail = &d
				if asJSON && err == nil {
					if !showSecret {
						redactAll(d.Processes)
					}
					return writeJSON(cmd, d)
				}
			case cmd.Flags().Changed("ancestors"):
				list, err = src.Ancestors(ctx, ancestors)
			case len(args) == 1:
				pid, perr := strconv.ParseUint(args[0], 10, 32)
				if perr != nil {
					return usageError{fmt.Errorf("PID %q is not a process id", args[0])}
				}
				if at != "" {
					list, err = c.TreeAt(ctx, uint32(pid), when)
				} else {
					list, err = src.Tree(ctx, uint32(pid))
				}
			default:
				list, err = src.Processes(ctx)
			}
			if err != nil {
				return err
			}
			if !showSecret {
				redactAll(list.Processes)
			}
			out := cmd.OutOrStdout()
			if asJSON {
				return writeJSON(cmd, list)
			}
			isTTY := term.IsTerminal(int(os.Stdout.Fd()))
			if width == 0 {
				width = treeview.DefaultWidth
				if isTTY {
					if w, _, err := term.GetSize(int(os.Stdout.Fd())); err == nil && w > 40 {
						width = w
					}
				}
			}
			opts := treeview.Options{Now: list.Now, Width: width, Color: isTTY, ShowChain: !noChain, HideKernel: !kernel, Notes: notes,
				Labels: labels, FullArgv: verbose, NoUID: local != nil, Fold: fold}
			// From the history: times as times, not "ago" from the
			// recording (which may be days old).
			switch {
			case detail != nil && !detail.Recorded.IsZero():
				opts.Wall = wallClock(detail.Recorded, list.Now)
			case at != "":
				opts.Wall = wallClock(when, list.Now)
			}
			if cmd.Flags().Changed("ancestors") && format == "text" {
				return treeview.Chain(out, list.Processes, opts)
			}
			switch format {
			case "dot":
				opts.Width = 60
				return treeview.Dot(out, list.Processes, opts)
			case "svg":
				return treeview.TimelineSVG(out, timeline(*detail, labels))
			}
			if detail != nil && !detail.Recorded.IsZero() {
				fmt.Fprintf(out, "from the history, as recorded %s\n", detail.Recorded.Local().Format(timeLayout))
			}
			if at != "" && detail == nil {
				fmt.Fprintf(out, "from the history, as at %s\n", when.Local().Format(timeLayout))
			}
			if err := treeview.Tree(out, list.Processes, opts); err != nil {
				return err
			}
			if detail != nil {
				printContainers(out, *detail)
				printEndings(out, *detail, opts.Wall)
				if n := detail.MembersDropped; n > 0 {
					fmt.Fprintf(out, "(%d older exited members were not kept: a record keeps %d)\n", n, api.MaxRecordMembers)
				}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.Uint32Var(&ancestors, "ancestors", 0, "show the creator chain of `PID` up to init instead of a tree")
	f.StringVar(&session, "session", "", "show the members of session `ID`, marking what the enforcer did")
	f.Uint32Var(&owner, "owner", 0, "with --session: "+ownerUsage)
	f.StringVar(&at, "at", "", "with PID or --session: as the history has it at `TIME` (a duration ago, 90m, or a time, 2026-11-26T09:00:00Z)")
	f.BoolVar(&asJSON, "json", false, "print the processes as JSON for machines (--format json)")
	f.StringVar(&format, "format", "text", "text, json, dot (a Graphviz graph) or svg (with --session: a timeline of the session)")
	f.BoolVar(&kernel, "kernel-threads", false, "include kernel threads")
	f.BoolVar(&noChain, "no-chain", false, "show only each process's current program, not its exec chain")
	f.BoolVar(&showSecret, "show-secrets", false, "do not redact command lines here (the agent redacts them for every user but root; root gets them raw)")
	f.BoolVar(&raw, "raw", false, "root only: ask the agent for unredacted command lines (with --json; they can hold tokens)")
	f.IntVar(&width, "width", 0, "line width (default: the terminal's, or 120)")
	f.BoolVarP(&verbose, "verbose", "v", false, "show command lines whole instead of shortened to the line width, and every short command (--all)")
	f.BoolVar(&all, "all", false, "with --session: show each short command the host ran for itself, not one line per parent")
	bindSocketFlag(cmd)
	return cmd
}

// treeSource answers tree's questions: the agent (api.Client), or where
// no agent runs, a process snapshot of this machine (localTreeSource).
type treeSource interface {
	Processes(ctx context.Context) (api.ProcessList, error)
	Tree(ctx context.Context, pid uint32) (api.ProcessList, error)
	Ancestors(ctx context.Context, pid uint32) (api.ProcessList, error)
}

// bindSocketFlag gives client commands the one option they need.
func bindSocketFlag(cmd *cobra.Command) {
	cmd.Flags().String("api.socket", config.Default().API.Socket, "unix socket (on Windows, named pipe) of the running agent")
}

// redactAll replaces every argv with its redacted form, in place.
func redactAll(procs []lineage.Process) {
	for i := range procs {
		for j := range procs[i].Images {
			procs[i].Images[j].Argv = redact.Argv(procs[i].Images[j].Argv)
		}
	}
}

func writeJSON(cmd *cobra.Command, v any) error {
	enc := json.NewEncoder(cmd.OutOrStdout())
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// sessionNotes marks each member of a session with what the enforcer did
// to it.
func sessionNotes(d api.SessionDetail) map[lineage.ID]string { return killNotes(d.Kills) }

// sessionLabels labels each member of a session with its role, the
// server it is or runs for, and its generation, shown first on its line:
// "host gen root", "wrapper @scope/pkg gen 1", "server @scope/pkg gen 1
// (npx → sh → node)".
func sessionLabels(d api.SessionDetail) map[lineage.ID]string {
	labels := make(map[lineage.ID]string, len(d.Processes))
	for i, p := range d.Processes {
		var m roles.Member
		if i < len(d.Roles) {
			m = d.Roles[i]
		}
		l := m.Role.String()
		if m.Server != "" {
			l += " " + m.Server
		}
		if ct, ok := containerAt(d, p.ID); ok {
			l = fmt.Sprintf("container %s %s", shortID(ct.ID), ct.Image)
		}
		switch {
		case p.ID == d.Session.Root:
			l += " root"
		case i < len(d.Generations):
			l += fmt.Sprintf(" gen %d", d.Generations[i])
		}
		if len(m.Chain) > 1 { // a chain of wrappers, not the server alone
			l += " (" + strings.Join(m.Chain, " → ") + ")"
		}
		labels[p.ID] = l
	}
	return labels
}

// foldShorterThan bounds how long a command a host ran for itself may
// have lived to be folded into its parent's "+ N short commands" line.
const foldShorterThan = 10 * time.Second

// shortCommands says which exited members of a session tree may be
// folded: those that are no server, wrapper or container (the host's
// own forks, its tools and what they started), the root excepted, that
// lived less than foldShorterThan. Tree folds them only when everything
// they created exited too.
func shortCommands(d api.SessionDetail) func(*lineage.Process) bool {
	role := make(map[lineage.ID]roles.Role, len(d.Processes))
	for i, p := range d.Processes {
		if i < len(d.Roles) {
			role[p.ID] = d.Roles[i].Role
		}
	}
	return func(p *lineage.Process) bool {
		switch role[p.ID] {
		case roles.Server, roles.Wrapper, roles.Container:
			return false
		}
		return p.ID != d.Session.Root && p.Exited && p.ExitTime >= p.ID.Start && p.ExitTime-p.ID.Start < uint64(foldShorterThan)
	}
}

// placeContainers shows each container's first process below the client
// that started it: the engine's shim created it, but the client is what
// the session knows it by. Display only; --json keeps the real creator.
func placeContainers(d api.SessionDetail) {
	for i, p := range d.Processes {
		if ct, ok := containerAt(d, p.ID); ok {
			d.Processes[i].Creator = ct.Client
		}
	}
}

// containerAt returns the container whose first process is id.
func containerAt(d api.SessionDetail, id lineage.ID) (api.Container, bool) {
	for _, ct := range d.Containers {
		if !ct.Init.IsZero() && ct.Init == id {
			return ct, true
		}
	}
	return api.Container{}, false
}

func shortID(id string) string { return id[:min(len(id), 12)] }

// printContainers lists the containers members of a session started,
// whether they are attributed (ended with the session), and what the
// enforcer did to each.
func printContainers(w io.Writer, d api.SessionDetail) {
	done := map[string]api.Kill{}
	shown := map[string]bool{}
	for _, ct := range d.Containers {
		shown[ct.ID] = true
	}
	for _, k := range d.Kills {
		if k.Container == "" {
			continue
		}
		done[k.Container] = k
		if !shown[k.Container] { // ended and removed: only its record is left
			shown[k.Container] = true
			image := "(image unknown)"
			if len(k.Argv) > 0 && k.Argv[0] != "" {
				image = k.Argv[0]
			}
			fmt.Fprintf(w, "container %s %s: %s\n", shortID(k.Container), image, killNotes([]api.Kill{k})[k.Process])
		}
	}
	for _, ct := range d.Containers {
		state := "stopped"
		if ct.Running {
			state = "running"
		}
		line := fmt.Sprintf("container %s %s started by pid %d: %s, %s", shortID(ct.ID), cmp.Or(ct.Image, "(image unknown)"), ct.Client.PID, ct.Attribution, state)
		if k, ok := done[ct.ID]; ok {
			line += "; " + killNotes([]api.Kill{k})[k.Process]
		}
		fmt.Fprintln(w, line)
	}
}

// printEndings lists the markers of a session and what each ended, and
// the end of the session. With wall (a session from the history), when
// is a time; else how long ago.
func printEndings(w io.Writer, d api.SessionDetail, wall func(uint64) time.Time) {
	s := d.Session
	when := func(t uint64) string {
		if wall != nil {
			return "at " + wall(t).Local().Format(timeLayout)
		}
		return ago(d.Now, t)
	}
	for _, e := range d.Endings {
		what := fmt.Sprintf("session %s ended (%s)", s.ID, s.EndReason)
		if s.EndedAt != 0 {
			what = fmt.Sprintf("session %s ended (%s, %s)", s.ID, s.EndReason, when(s.EndedAt))
		}
		if e.Marker != nil {
			m := e.Marker
			what = fmt.Sprintf("marker (%s, from pid %d uid %d, %s) ended generation %d", m.Via, m.Sender.PID, m.SenderUID, when(m.At), m.Ended)
		}
		result := "enforcement under way"
		if en := e.Enforcement; en != nil {
			result = fmt.Sprintf("killed %d, survivors %d, refused %d, spared %d, in %s", en.Killed, en.Survivors, en.Refused, en.Spared,
				time.Duration(en.DurationMS*float64(time.Millisecond)).Round(time.Millisecond))
			if en.WouldKill > 0 {
				result = fmt.Sprintf("audit: would kill %d", en.WouldKill)
			}
		}
		fmt.Fprintf(w, "%s: %s\n", what, result)
	}
	if s.State == sessions.Active {
		fmt.Fprintf(w, "session %s is active in generation %d\n", s.ID, s.Generation)
	}
}

// killNotes turns enforcer records into tree marks; a process with several
// records (SIGTERM, then SIGKILL) shows the last.
func killNotes(kills []api.Kill) map[lineage.ID]string {
	notes := map[lineage.ID]string{}
	for _, k := range kills {
		note := k.Result
		switch {
		case k.Result == enforcer.ResultKilled:
			note = fmt.Sprintf("killed by mcptrace %s after %s", k.Signal, time.Duration(k.LatencyMS*float64(time.Millisecond)).Round(time.Millisecond))
		case k.Signal != "":
			note = fmt.Sprintf("%s (%s)", k.Result, k.Signal)
		}
		notes[k.Process] = note
	}
	return notes
}

// timeline is what the SVG timeline shows of a session's detail. Kill
// times are wall times: they are put on the boot clock of the detail's
// Now, taken at Recorded (from the history) or now.
func timeline(d api.SessionDetail, labels map[lineage.ID]string) treeview.Timeline {
	s := d.Session
	wallNow := time.Now()
	if !d.Recorded.IsZero() {
		wallNow = d.Recorded
	}
	boot := func(t time.Time) uint64 {
		back := wallNow.Sub(t)
		if back < 0 || uint64(back) > d.Now {
			return d.Now
		}
		return d.Now - uint64(back)
	}
	tl := treeview.Timeline{
		Title:     fmt.Sprintf("session %s (uid %d, %s): %s", s.ID, s.Owner, s.Origin, s.State),
		Start:     wallNow.Add(-time.Duration(d.Now - min(s.Began, d.Now))),
		Begin:     s.Began,
		End:       s.EndedAt,
		Now:       d.Now,
		EndWhy:    s.EndReason,
		Processes: d.Processes,
		Labels:    labels,
	}
	for _, k := range d.Kills {
		if k.Result == enforcer.ResultKilled {
			tl.Kills = append(tl.Kills, treeview.TimelineMark{Process: k.Process, At: boot(k.At),
				What: fmt.Sprintf("killed by mcptrace %s after %.0fms", k.Signal, k.LatencyMS)})
		}
	}
	for _, m := range s.Markers {
		tl.Markers = append(tl.Markers, treeview.TimelineMark{At: m.At, What: fmt.Sprintf("marker: generation %d ended", m.Ended)})
	}
	return tl
}

// wallClock turns boot-clock times of an answer made at boot time now
// and wall time at into wall times.
func wallClock(at time.Time, now uint64) func(uint64) time.Time {
	return func(boot uint64) time.Time {
		if boot > now {
			return at
		}
		return at.Add(-time.Duration(now - boot))
	}
}
