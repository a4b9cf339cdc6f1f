package main

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/mcptrace/mcptrace/api"
	"github.com/mcptrace/mcptrace/lineage"
)

// completeWait bounds how long a completion waits for the agent: a
// shell waits for it at every Tab.
const completeWait = time.Second

// valueCompletions are the completions of flags whose values are a
// fixed list, wherever the flag is.
var valueCompletions = map[string][]string{
	"format":          {"text\ta tree for people", "json\tfor machines", "dot\ta Graphviz graph", "svg\ta timeline of one session (--session)"},
	"enforcer.mode":   {"enforce\tsignal the members of ended sessions", "audit\trecord what would be killed"},
	"enforcer.policy": {"graceful\tSIGTERM, grace period, SIGKILL", "immediate\tSIGKILL"},
	"log.level":       {"debug", "info", "warn", "error"},
	"log.format":      {"text", "json"},
	"api.socket-mode": {"0600\troot only", "0660", "0606", "0666\tanyone may ask; each sees their own"},
}

// agentCompletions are the flags whose values the running agent knows.
var agentCompletions = map[string]func(cmd *cobra.Command, prefix string) []string{
	"session":   completeSessions,
	"id":        completeHistoryIDs, // history's only
	"ancestors": completePIDs,
	"pid":       completePIDs,
}

// addCompletions registers value completions on cmd and the commands
// below it: fixed lists, session IDs and PIDs from the agent, and the
// PID argument of tree.
func addCompletions(cmd *cobra.Command) {
	for name, values := range valueCompletions {
		if cmd.Flags().Lookup(name) != nil {
			cmd.RegisterFlagCompletionFunc(name, cobra.FixedCompletions(values, cobra.ShellCompDirectiveNoFileComp))
		}
	}
	for name, f := range agentCompletions {
		// --id names a past session in history, a new one in session begin.
		if cmd.Flags().Lookup(name) != nil && (name != "id" || cmd.Name() == "history") {
			cmd.RegisterFlagCompletionFunc(name, func(cmd *cobra.Command, _ []string, prefix string) ([]string, cobra.ShellCompDirective) {
				return f(cmd, prefix), cobra.ShellCompDirectiveNoFileComp
			})
		}
	}
	switch cmd.CommandPath() {
	case "mcptrace tree":
		cmd.ValidArgsFunction = func(cmd *cobra.Command, args []string, prefix string) ([]string, cobra.ShellCompDirective) {
			if len(args) > 0 {
				return nil, cobra.ShellCompDirectiveNoFileComp
			}
			return completePIDs(cmd, prefix), cobra.ShellCompDirectiveNoFileComp
		}
	case "mcptrace session end":
		cmd.ValidArgsFunction = func(cmd *cobra.Command, args []string, prefix string) ([]string, cobra.ShellCompDirective) {
			if len(args) > 0 {
				return nil, cobra.ShellCompDirectiveNoFileComp
			}
			return completeSessions(cmd, prefix), cobra.ShellCompDirectiveNoFileComp
		}
	}
	for _, c := range cmd.Commands() {
		addCompletions(c)
	}
}

// completionClient is a client of the agent the command's --api.socket
// (or configuration) names, and a context bounded by completeWait.
func completionClient(cmd *cobra.Command) (*api.Client, context.Context, context.CancelFunc, bool) {
	cfg, err := loadConfig(cmd)
	if err != nil {
		return nil, nil, nil, false
	}
	ctx, cancel := context.WithTimeout(context.Background(), completeWait)
	return api.NewClient(cfg.API.Socket), ctx, cancel, true
}

// completeSessions are the IDs of the sessions the caller may see, active
// ones first, each with its state and root.
func completeSessions(cmd *cobra.Command, prefix string) []string {
	c, ctx, cancel, ok := completionClient(cmd)
	if !ok {
		return nil
	}
	defer cancel()
	list, err := c.Sessions(ctx)
	if err != nil {
		return nil
	}
	slices.SortStableFunc(list, func(a, b api.SessionInfo) int { return strings.Compare(string(a.State), string(b.State)) })
	var out []string
	seen := map[string]bool{}
	for _, s := range list {
		if !strings.HasPrefix(s.ID, prefix) || seen[s.ID] {
			continue
		}
		seen[s.ID] = true
		out = append(out, fmt.Sprintf("%s\t%s, root %d, %d alive", s.ID, s.State, s.Root.PID, s.Alive))
	}
	return out
}

// completeHistoryIDs are the session IDs of the last week's history.
func completeHistoryIDs(cmd *cobra.Command, prefix string) []string {
	c, ctx, cancel, ok := completionClient(cmd)
	if !ok {
		return nil
	}
	defer cancel()
	list, err := c.History(ctx, api.HistoryQuery{From: time.Now().Add(-7 * 24 * time.Hour), Limit: api.MaxHistoryLimit})
	if err != nil {
		return nil
	}
	var out []string
	seen := map[string]bool{}
	for _, s := range list.Sessions {
		if strings.HasPrefix(s.ID, prefix) && !seen[s.ID] {
			seen[s.ID] = true
			out = append(out, fmt.Sprintf("%s\t%s %s", s.ID, s.Began.Local().Format(timeLayout), s.Host))
		}
	}
	return out
}

// completePIDs are the live processes the caller may see, each with its
// program, newest first.
func completePIDs(cmd *cobra.Command, prefix string) []string {
	c, ctx, cancel, ok := completionClient(cmd)
	if !ok {
		return nil
	}
	defer cancel()
	list, err := c.Processes(ctx)
	if err != nil {
		return nil
	}
	procs := slices.DeleteFunc(list.Processes, func(p lineage.Process) bool { return p.Exited || p.Kernel })
	slices.SortFunc(procs, func(a, b lineage.Process) int { return cmp.Compare(b.ID.Start, a.ID.Start) })
	var out []string
	for _, p := range procs {
		pid := strconv.FormatUint(uint64(p.ID.PID), 10)
		if strings.HasPrefix(pid, prefix) {
			out = append(out, pid+"\t"+p.Comm)
		}
	}
	return out
}
