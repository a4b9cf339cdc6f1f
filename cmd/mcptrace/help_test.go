package main

import (
	"bytes"
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// valueName is what a flag's help may show as its value: pflag's type
// names, or a placeholder in capitals from a backquoted word of the usage
// (`PID`). A backquoted phrase in a usage string became the value name
// before (--bpf.pin-dir mcptrace uninstall).
var valueName = regexp.MustCompile(`^([a-z0-9]+|[A-Z][A-Z0-9_-]*)?$`)

func walk(cmd *cobra.Command, f func(*cobra.Command)) {
	f(cmd)
	for _, c := range cmd.Commands() {
		walk(c, f)
	}
}

func TestHelpShowsPlaceholdersNotPhrases(t *testing.T) {
	walk(newRoot(), func(cmd *cobra.Command) {
		cmd.Flags().VisitAll(func(f *pflag.Flag) {
			if name, _ := pflag.UnquoteUsage(f); !valueName.MatchString(name) {
				t.Errorf("%s --%s shows its value as %q", cmd.CommandPath(), f.Name, name)
			}
		})
	})
}

// Each command's help lists its own flags: uninstall the five options it
// reads, not the agent's thirty-odd.
func TestHelpListsTheCommandsOwnFlags(t *testing.T) {
	root := newRoot()
	var b bytes.Buffer
	root.SetOut(&b)
	root.SetArgs([]string{"uninstall", "--help"})
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	help := b.String()
	for _, want := range []string{"--api.socket", "--bpf.pin-dir", "--state.dir", "--history.dir"} {
		if !strings.Contains(help, want) {
			t.Errorf("uninstall --help lacks %s", want)
		}
	}
	for _, agentOnly := range []string{"--enforcer.mode", "--metrics.listen-address", "--lineage.max-nodes", "--sessions.rules"} {
		if strings.Contains(help, agentOnly) {
			t.Errorf("uninstall --help lists the agent's %s", agentOnly)
		}
	}
}

// Every command the operator types has examples (--help and the man
// pages' EXAMPLES), and every man page its EXIT STATUS and FILES.
func TestEveryCommandHasExamplesAndManSections(t *testing.T) {
	walk(newRoot(), func(cmd *cobra.Command) {
		if !cmd.IsAvailableCommand() && cmd.HasParent() {
			return
		}
		path := cmd.CommandPath()
		if cmd.Runnable() && !cmd.HasSubCommands() && cmd.Example == "" && !strings.HasPrefix(path, "mcptrace completion") && !strings.HasPrefix(path, "mcptrace help") && !strings.HasPrefix(path, "mcptrace service") {
			t.Errorf("%s has no examples", path)
		}
		var titles []string
		for _, s := range manSections(cmd) {
			titles = append(titles, s.Title)
		}
		if !strings.Contains(strings.Join(titles, ","), "EXIT STATUS") || !strings.Contains(strings.Join(titles, ","), "FILES") {
			t.Errorf("%s's man page has the sections %v", path, titles)
		}
	})
}
