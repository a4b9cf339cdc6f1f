package sessions

import (
	"regexp"
	"strconv"
	"strings"
)

// The mcptrace command lines the tracker reacts to when it sees them exec'd:
//
//	mcptrace run [--session ID] -- CMD ARGS…     the process is the root of session ID
//	mcptrace exec --session ID -- SERVER ARGS…   the process is the root of sub-session ID
//	mcptrace mark destroy [--session ID]         a destroy marker
//
// argv[0] must have the basename "mcptrace". The rest is read as the CLI
// reads it (cobra and pflag, see cmd/mcptrace), so that the agent takes a
// command line for a tag or a marker exactly when the CLI itself goes on
// to act on it: flags may come before the subcommand's name (`mcptrace
// --config F run --session S -- CMD`); a flag the command does not have
// (--help included), a shorthand, an argument before "--", a missing "--"
// before CMD, or an argument mark destroy does not take make the CLI fail,
// and the tracker then takes the line for nothing (cmdOther). "--session"
// without a value is kept as a bad tag or marker, so that it is counted.
// The flags are CLIFlags; cmd/mcptrace's tests hold the CLI to them and
// fuzz this parser against the CLI's own.

type cmdKind uint8

const (
	cmdNone  cmdKind = iota // not the mcptrace CLI
	cmdOther                // the mcptrace CLI, but neither a tag nor a marker
	cmdRun
	cmdExec
	cmdMark
)

type command struct {
	kind cmdKind
	id   string // the --session value, "" when not given
	// bad: --session was given without a usable value.
	bad bool
	// idLast: the session value is the last argv element, so a truncated
	// argv may have cut it.
	idLast bool
}

// CLIFlag is a flag of a command line the tracker reads.
type CLIFlag struct {
	Name string // long name; no flag has a shorthand
	// Value: the flag takes a value; otherwise it is a boolean
	// (--name or --name=true|false…).
	Value bool
}

// CLIFlags are the flags of the commands the tracker reads, by command
// path ("run", "exec", "mark destroy"), as the CLI defines them,
// inherited ones (--config) included and cobra's --help left out.
var CLIFlags = map[string][]CLIFlag{
	"run":          {{"session", true}, {"api.socket", true}, {"config", true}},
	"exec":         {{"session", true}, {"api.socket", true}, {"config", true}},
	"mark destroy": {{"session", true}, {"api.socket", true}, {"kernel-only", false}, {"config", true}},
}

var cmdPaths = map[cmdKind]string{cmdRun: "run", cmdExec: "exec", cmdMark: "mark destroy"}

func cliFlag(kind cmdKind, name string) (CLIFlag, bool) {
	for _, f := range CLIFlags[cmdPaths[kind]] {
		if f.Name == name {
			return f, true
		}
	}
	return CLIFlag{}, false
}

// findWord finds the subcommand's name in args as cobra's Find does
// before it knows the command: the first word that is neither a flag nor
// a flag's value, where every "--name" or "-x" without "=" takes the next
// word as its value (no flag of the root or of mark is a boolean). It
// returns args without that word, and whether the word was their last;
// ok is false when there is none.
func findWord(args []string) (word string, rest []string, last, ok bool) {
	for i := 0; i < len(args); i++ {
		s := args[i]
		switch {
		case s == "--":
			return "", nil, false, false
		case strings.HasPrefix(s, "--") && !strings.Contains(s, "="),
			strings.HasPrefix(s, "-") && len(s) == 2 && s != "--" && !strings.Contains(s, "="):
			i++ // its value
		case s != "" && !strings.HasPrefix(s, "-"):
			rest = make([]string, 0, len(args)-1)
			rest = append(append(rest, args[:i]...), args[i+1:]...)
			return s, rest, i == len(args)-1, true
		}
	}
	return "", nil, false, false
}

// parseCommand reads argv; truncated says the kernel cut it at its capture
// limit, so a line that ends early (before "--" or a flag's value) is not
// one the CLI would refuse: it is read as far as it goes.
func parseCommand(argv []string, truncated bool) command {
	if len(argv) == 0 || !IsCLI(argv[0]) {
		return command{}
	}
	other := command{kind: cmdOther}
	word, args, cutLast, ok := findWord(argv[1:])
	if !ok {
		return other
	}
	c := other
	switch word {
	case "run":
		c.kind = cmdRun
	case "exec":
		c.kind = cmdExec
	case "mark":
		var last bool
		if word, args, last, ok = findWord(args); !ok || word != "destroy" {
			return other
		}
		cutLast = cutLast || last
		c.kind = cmdMark
	default:
		return other
	}
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			rest := len(args) - i - 1
			if c.kind == cmdMark && rest > 0 || c.kind != cmdMark && rest == 0 {
				return other // mark destroy takes no argument; run and exec need CMD
			}
			return c.checked()
		case strings.HasPrefix(a, "--"):
			name, val, hasVal := strings.Cut(a[2:], "=")
			f, known := cliFlag(c.kind, name)
			if !known {
				return other // the CLI refuses an unknown flag (--help included)
			}
			if !f.Value {
				if _, err := strconv.ParseBool(val); hasVal && err != nil {
					return other // pflag refuses --kernel-only=maybe
				}
				continue
			}
			if !hasVal {
				if i+1 >= len(args) {
					if name == "session" {
						c.id, c.bad, c.idLast = "", true, !cutLast
						return c
					}
					if truncated {
						return c
					}
					return other
				}
				i++
				val = args[i]
			}
			if name == "session" {
				// idLast: the value ends argv, unless a subcommand's
				// name came after it.
				c.id, c.idLast = val, i == len(args)-1 && !cutLast
			}
		case len(a) >= 2 && a[0] == '-':
			return other // a shorthand: -h is help, any other is unknown
		default:
			// An argument before "--" (run, exec: the CLI wants CMD after
			// "--") or any argument at all (mark destroy).
			return other
		}
	}
	if c.kind != cmdMark && !truncated {
		return other // no "--" and no command to run
	}
	return c.checked()
}

// checked marks an empty --session bad where the CLI refuses it: exec
// needs an ID; run and mark take "" for "none given".
func (c command) checked() command {
	if c.kind == cmdExec && c.id == "" && !c.bad {
		c.bad = true
	}
	return c
}

// validTag is what a user-chosen session ID may look like: printable,
// no spaces or slashes, at most 128 bytes.
var validTag = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:@+=-]{0,127}$`)

// ValidID reports whether id is acceptable as a session ID given by a user
// (`--session`, `session begin --id`): 1 to 128 bytes of letters, digits
// and "._:@+=-", starting with a letter or digit.
func ValidID(id string) bool { return validTag.MatchString(id) }

// CommandLine is how the tracker reads an exec'd mcptrace command line.
type CommandLine struct {
	// Command is "run", "exec" or "mark destroy" for a tag or a marker,
	// "" for anything else.
	Command string
	// Session is the --session value; Bad says it was given without a
	// usable value (counted, declares or marks nothing).
	Session string
	Bad     bool
}

// ReadCommand reads argv as the tracker does when the kernel reports its
// exec (truncated: the kernel cut it at its capture limit).
func ReadCommand(argv []string, truncated bool) CommandLine {
	c := parseCommand(argv, truncated)
	return CommandLine{Command: cmdPaths[c.kind], Session: c.id, Bad: c.bad}
}

// IsCLI reports whether a path or argv[0] names the mcptrace CLI:
// /usr/bin/mcptrace, or on Windows (where names are not case sensitive)
// C:\Tools\McpTrace.exe. The one test of it: the tracker reads tags and
// markers only from such command lines, and the agent's saved state keeps
// their session IDs unredacted by the same test.
func IsCLI(p string) bool { return strings.EqualFold(programName(p), "mcptrace") }

// programName is the program a path or argv[0] names, on either system:
// the last element after / or \, without a trailing .exe in any case.
func programName(p string) string {
	if i := strings.LastIndexAny(p, `/\`); i >= 0 {
		p = p[i+1:]
	}
	if n := len(p) - len(".exe"); n > 0 && strings.EqualFold(p[n:], ".exe") {
		p = p[:n]
	}
	return p
}
