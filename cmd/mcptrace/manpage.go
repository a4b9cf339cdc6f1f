package main

import (
	"fmt"
	"runtime"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/mcptrace/mcptrace/config"
	"github.com/mcptrace/mcptrace/sensor"
)

// manSection is one section of a command's man page that cobra does not
// write: EXIT STATUS, ENVIRONMENT, FILES. man_gen.go puts them before
// SEE ALSO.
type manSection struct {
	Title string
	Intro string // a paragraph before the items
	// Items are (term, text) pairs, written as a tagged list.
	Items [][2]string
}

// manSections are the sections of cmd's page beyond cobra's.
func manSections(cmd *cobra.Command) []manSection {
	path := strings.TrimPrefix(cmd.CommandPath(), "mcptrace")
	path = strings.TrimSpace(path)
	exit := [][2]string{{"0", "Success."}, {"1", "Failure, said on standard error; among others, no agent answers on the socket (the message says how to start it)."}, {"2", "A usage error: an unknown command or flag, a missing or bad argument."}}
	switch path {
	case "agent":
		exit = [][2]string{
			{"0", "The agent stopped on SIGTERM or SIGINT; its kernel programs stay attached for the next agent."},
			{"1", "It failed: the message says why (a configuration error, another agent running, …)."},
			{"2", "A usage error."},
			{fmt.Sprint(sensor.ExitUnsupported), "The kernel lacks a feature the agent needs (the message names it and the kernel version that has it); the systemd unit does not restart it."},
			{fmt.Sprint(sensor.ExitNoPrivilege), "It runs without the privilege to load BPF programs (not root): not a kernel limit; the systemd unit does not restart it."},
		}
	case "run", "exec":
		exit = [][2]string{{"", "The exit status of CMD once it ran. Before: 1 when the agent refused the session (CMD did not run), 2 for a usage error."}}
	case "mark destroy":
		exit = [][2]string{{"0", "The agent ended what the marker names, and says what."}, {"1", "No agent confirmed the marker (--kernel-only does not ask, and exits 0)."}, {"2", "A usage error."}}
	case "":
		exit = append(exit, [2]string{"3, 4", "From mcptrace agent: the kernel cannot run it, or it lacks the privilege (see mcptrace-agent(1))."})
	}
	secs := []manSection{{Title: "EXIT STATUS", Items: exit}}

	var env [][2]string
	opts := map[string]bool{}
	for _, k := range config.Keys() {
		opts[k] = true
	}
	cmd.NonInheritedFlags().VisitAll(func(f *pflag.Flag) {
		if opts[f.Name] {
			env = append(env, [2]string{config.EnvName(f.Name), f.Name})
		}
	})
	if path == "agent" && runtime.GOOS == "linux" {
		env = append(env, [2]string{"NOTIFY_SOCKET", "Set by systemd (Type=notify): the agent says READY=1 there once it serves."},
			[2]string{"INVOCATION_ID, KUBERNETES_SERVICE_HOST, POD_NAMESPACE", "How the agent was started (a systemd unit, a DaemonSet's pod), which it notes for clients that find it stopped (see FILES)."})
	}
	if len(env) > 0 {
		secs = append(secs, manSection{Title: "ENVIRONMENT", Items: env,
			Intro: "Each option is also read from an environment variable, MCPTRACE_ and its key with dots and dashes as underscores: a flag overrides it, and it overrides the configuration file."})
	}

	files := [][2]string{{config.DefaultFile, "The configuration file, read when it exists (--config names another); mcptrace config example prints one with every option."}}
	if cmd.Flags().Lookup("api.socket") != nil || path == "" {
		files = append(files, [2]string{config.Default().API.Socket, "The agent's API socket (api.socket): every command but agent, uninstall and config talks to the agent there."})
	}
	switch path {
	case "agent", "uninstall", "":
		d := config.Default()
		files = append(files,
			[2]string{d.BPF.PinDir, "The kernel programs and maps, pinned (bpf.pin-dir): they keep running between agents; mcptrace uninstall removes them."},
			[2]string{d.State.Dir, "The agent's memory across restarts (state.dir): sessions, lineage, endings under way; on tmpfs."},
			[2]string{d.History.Dir, "The history of sessions, processes and kills (history.dir), for mcptrace history; uninstall keeps it."})
	}
	if path == "agent" || path == "" {
		files = append(files,
			[2]string{config.Default().API.Socket + ".install.json", "How the agent was started, noted for clients that find it stopped, so they say the command that starts it again."},
			[2]string{"/lib/systemd/system/mcptrace.service", "The systemd unit of the Debian package."})
	}
	secs = append(secs, manSection{Title: "FILES", Items: files})
	return secs
}

// roff writes s as roff: the sections as tagged paragraphs.
func (s manSection) roff() string {
	var b strings.Builder
	fmt.Fprintf(&b, ".SH %s\n", s.Title)
	if s.Intro != "" {
		fmt.Fprintf(&b, ".PP\n%s\n", roffEscape(s.Intro))
	}
	for _, it := range s.Items {
		if it[0] == "" {
			fmt.Fprintf(&b, ".PP\n%s\n", roffEscape(it[1]))
			continue
		}
		fmt.Fprintf(&b, ".TP\n\\fB%s\\fP\n%s\n", roffEscape(it[0]), roffEscape(it[1]))
	}
	b.WriteString("\n")
	return b.String()
}

// roffEscape keeps roff from reading a line's first dot or quote, and
// backslashes and hyphens as its own.
func roffEscape(s string) string {
	s = strings.ReplaceAll(s, `\`, `\e`)
	s = strings.ReplaceAll(s, "-", `\-`)
	if strings.HasPrefix(s, ".") || strings.HasPrefix(s, "'") {
		s = `\&` + s
	}
	return s
}
