package hosts

import (
	"regexp"
	"slices"
	"strings"
	"sync"

	"github.com/mcptrace/mcptrace/lineage"
	"github.com/mcptrace/mcptrace/procmatch"
	"github.com/mcptrace/mcptrace/roles"
)

// Host is one agent host.
type Host struct {
	// Rule recognises the host's long-lived process that starts MCP
	// servers, never a launcher that starts an application and exits
	// (its exit would end the session). Rule.Name is the host's name:
	// the session origin "rule:<name>" and the metrics' host_kind.
	// Rules of one host (the Copilot CLI and its SDK server) may share
	// a table but not a name.
	Rule procmatch.Rule
	// Self matches the host's own programs that Rule does not: helpers
	// it starts that are the host, not servers. A process below the host
	// that Rule or Self matches is the host (roles.HostTable.Self).
	Self []procmatch.Rule
	// Tools matches the commands the host runs for itself, as seen from
	// the real program (roles.HostTable.Tools).
	Tools []procmatch.Rule
	// Verified says how the rule and tables were checked: "run" (the
	// real program, from npm, run here; its tests read recorded argv),
	// "docs" (its documentation; the tests read the argv it shows).
	Verified string
}

// Defaults returns the hosts mcptrace knows, most specific first. Each
// call returns fresh values the caller may modify.
func Defaults() []Host {
	return []Host{
		claude(), codex(), copilotSDK(), copilot(), gemini(), qwen(), inspector(),
		opencode(), amp(), crush(), cline(), kiro(),
		cursorAgent(), cursor(), vscode(), goose(), goosed(), openclaw(),
	}
}

// Rules returns the session rules of Defaults, in order.
func Rules() []procmatch.Rule {
	hs := Defaults()
	out := make([]procmatch.Rule, len(hs))
	for i, h := range hs {
		out[i] = h.Rule
	}
	return out
}

// compiled holds the tables of Defaults, by host name, compiled once;
// the rules are checked by tests, so a failure to compile is a bug.
var compiled = sync.OnceValues(func() (map[string]roles.HostTable, []*procmatch.Matcher) {
	hs := Defaults()
	tables := make(map[string]roles.HostTable, len(hs))
	rules := make([]*procmatch.Matcher, len(hs))
	for i, h := range hs {
		self := append([]procmatch.Rule{h.Rule}, h.Self...)
		t := roles.HostTable{Self: mustCompile(self), Tools: mustCompile(h.Tools)}
		tables[h.Rule.Name] = t
		rules[i] = t.Self[0]
	}
	return tables, rules
})

func mustCompile(rs []procmatch.Rule) []*procmatch.Matcher {
	ms, err := procmatch.CompileAll(rs, procmatch.Any)
	if err != nil {
		panic("hosts: " + err.Error())
	}
	return ms
}

// Table returns what roles needs to know of a session's host: the host
// named name (the rule that began the session, origin "rule:<name>"),
// else the first host whose rule matches root (the session's root
// process, when known: `mcptrace run -- codex`), else nothing.
func Table(name string, root *lineage.Process) roles.HostTable {
	tables, rules := compiled()
	if t, ok := tables[name]; ok {
		return t
	}
	if root == nil {
		return roles.HostTable{}
	}
	im := root.Current()
	if m := procmatch.First(rules, procmatch.Image{Filename: im.Filename, Comm: root.Comm, Argv: im.Argv}); m != nil {
		return tables[m.Rule().Name]
	}
	return roles.HostTable{}
}

// Names returns the names of Defaults, in order.
func Names() []string {
	hs := Defaults()
	out := make([]string, len(hs))
	for i, h := range hs {
		out[i] = h.Rule.Name
	}
	return slices.Clip(out)
}

// Pattern helpers for rules. All work on argv joined with spaces.

// argv0 matches an argv whose first element has the given basename.
func argv0(name string) string {
	return `^(?:\S*/)?` + regexp.QuoteMeta(name) + `(?: |$)`
}

// nodeScript matches a JavaScript runtime running script (a regexp for one
// argv element), directly or through a "#!/usr/bin/env node" shebang, with
// runtime flags before the script: "node --flag /x/cli.js …",
// "/usr/bin/env node /usr/local/bin/claude …".
func nodeScript(script string) string {
	return `^(?:\S*/)?(?:env(?: -\S+)* (?:\S*/)?)?(?:node|nodejs|bun)(?: -\S+)* (?:` + script + `)(?: |$)`
}

// program matches a command whose program (argv[0]) has one of the given
// basenames, whatever its arguments: a tool a host runs by name.
func program(names ...string) string {
	qs := make([]string, len(names))
	for i, n := range names {
		qs[i] = regexp.QuoteMeta(n)
	}
	return `^(?:\S*/)?(?:` + strings.Join(qs, "|") + `)(?: |$)`
}

// commonTools are commands hosts run for themselves to learn about the
// machine and the repository, seen from the real Claude Code, Codex,
// Copilot CLI, Gemini CLI, Qwen Code, opencode and Cline: never an MCP
// server's program. A table lists them with what its host adds.
func commonTools() procmatch.Rule {
	return procmatch.Rule{Name: "tools", Argv: []string{program(
		"git", "rg", "grep", "ps", "pgrep", "lsb_release", "getconf", "id", "uname", "hostname",
		"sw_vers", "awk", "sed", "cat", "head", "tail", "wc", "tr", "cut", "ls", "find", "which",
		"whoami", "locale", "tput", "stty", "tmux", "screen", "xclip", "xsel", "wl-copy", "wl-paste")}}
}
