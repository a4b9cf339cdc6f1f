package main

import (
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/mcptrace/mcptrace/sessions"
)

// The flags the agent reads in an exec'd command line are the CLI's own:
// a flag added to run, exec or mark destroy without telling the agent
// would make it take a valid line for nothing (or the reverse).
func TestAgentKnowsEveryFlagOfTheCommandsItReads(t *testing.T) {
	root := newRoot()
	for path, want := range sessions.CLIFlags {
		cmd, _, err := root.Find(strings.Fields(path))
		if err != nil || cmd.CommandPath() != "mcptrace "+path {
			t.Fatalf("%s: %v (found %q)", path, err, cmd.CommandPath())
		}
		var got []sessions.CLIFlag
		seen := func(f *pflag.Flag) {
			if f.Name == "help" {
				return
			}
			if f.Shorthand != "" {
				t.Errorf("%s --%s has a shorthand -%s the agent does not read", path, f.Name, f.Shorthand)
			}
			got = append(got, sessions.CLIFlag{Name: f.Name, Value: f.Value.Type() != "bool"})
		}
		cmd.LocalFlags().VisitAll(seen)
		cmd.InheritedFlags().VisitAll(seen)
		cmp := func(a, b sessions.CLIFlag) int { return strings.Compare(a.Name, b.Name) }
		slices.SortFunc(got, cmp)
		want = slices.Clone(want)
		slices.SortFunc(want, cmp)
		if !slices.Equal(got, want) {
			t.Errorf("mcptrace %s: the CLI has flags %v, the agent reads %v", path, got, want)
		}
	}
}

// cliAccepts runs argv through the real command tree (run, exec, mark
// destroy; nothing is exec'd or sent) and returns the command it accepted
// and its --session, or "" when the CLI refuses the line.
func cliAccepts(argv []string) (command, id string) {
	root := newRootWith(newRunCmd(), newExecCmd(), newMarkCmd())
	root.SetArgs(argv[1:])
	root.SetOut(io.Discard)
	root.SetErr(io.Discard)
	root.SetIn(strings.NewReader(""))
	// cobra's own completion and help commands write only to the above.
	root.CompletionOptions.DisableDefaultCmd = true
	accepted = func(c, s string) { command, id = c, s }
	defer func() { accepted = nil }()
	if err := root.Execute(); err != nil {
		return "", ""
	}
	return command, id
}

// agentAccepts is what the agent takes from the same exec'd line.
func agentAccepts(argv []string) (command, id string) {
	c := sessions.ReadCommand(argv, false)
	if c.Command == "" || c.Bad || c.Session != "" && !sessions.ValidID(c.Session) {
		return "", ""
	}
	return c.Command, c.Session
}

func TestAgentReadsArgvAsTheCLIDoes(t *testing.T) {
	for _, line := range []string{
		"mcptrace run --config F --session S -- cmd",
		"mcptrace --config F run --session S -- cmd",
		"mcptrace --session S run -- cmd",
		"mcptrace mark --session b destroy",
		"mcptrace mark destroy --kernel-only --session b",
		"mcptrace mark destroy --kernel-only=maybe",
		"mcptrace run --api.socket /x -- cmd",
		"mcptrace exec -- cmd",
		"mcptrace run -h -- cmd",
		"mcptrace help run",
		"mcptrace -- run -- cmd",
	} {
		argv := strings.Fields(line)
		cc, ci := cliAccepts(argv)
		ac, ai := agentAccepts(argv)
		if cc != ac || ci != ai {
			t.Errorf("%s: the CLI runs %q --session %q, the agent reads %q --session %q", line, cc, ci, ac, ai)
		}
	}
}

// FuzzAgentReadsArgvAsTheCLIDoes: every command line the CLI acts on as
// run, exec or mark destroy, the agent reads as that command with that
// --session, and none other (argv joined by NUL bytes).
func FuzzAgentReadsArgvAsTheCLIDoes(f *testing.F) {
	for _, line := range []string{
		"mcptrace\x00run\x00--config\x00F\x00--session\x00S\x00--\x00cmd",
		"mcptrace\x00--config\x00F\x00run\x00--session\x00S\x00--\x00cmd",
		"mcptrace\x00mark\x00--session\x00b\x00destroy",
		"mcptrace\x00mark\x00destroy\x00--kernel-only=1\x00--session=b",
		"mcptrace\x00exec\x00--session=a\x00--api.socket\x00/s\x00--\x00x",
		"mcptrace\x00run\x00-\x00--\x00x",
	} {
		f.Add(line)
	}
	f.Fuzz(func(t *testing.T, line string) {
		argv := strings.Split(line, "\x00")
		if len(argv) > 32 {
			return
		}
		argv[0] = "mcptrace"
		cc, ci := cliAccepts(argv)
		ac, ai := agentAccepts(argv)
		if cc != ac || ci != ai {
			t.Fatalf("%q: the CLI runs %q --session %q, the agent reads %q --session %q", argv, cc, ci, ac, ai)
		}
	})
}
