package sessions

import (
	"path"
	"regexp"
	"strings"
)

// The mcptrace command lines the tracker reacts to when it sees them exec'd:
//
//	mcptrace run [--session ID] -- CMD ARGS…     the process is the root of session ID
//	mcptrace exec --session ID -- SERVER ARGS…   the process is the root of sub-session ID
//	mcptrace mark destroy [--session ID]         a destroy marker
//
// argv[0] must have the basename "mcptrace" and the subcommand must follow
// it directly. The flags are read as the CLI reads them (cobra, see
// cmd/mcptrace), so that the agent takes a command line for a tag or a
// marker exactly when the CLI itself goes on to act on it: a flag the
// command does not have, a missing "--" before CMD, or an argument mark
// destroy does not take make the CLI fail, and the tracker then takes the
// line for nothing (cmdOther). "--session" without a value is kept as a
// bad tag or marker, so that it is counted.

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

// cmdFlags are the flags of each command, long names only (none has a
// shorthand), true when the flag takes a value; --config is the root's.
var cmdFlags = map[cmdKind]map[string]bool{
	cmdRun:  {"session": true, "config": true},
	cmdExec: {"session": true, "config": true},
	cmdMark: {"session": true, "config": true, "api.socket": true, "kernel-only": false},
}

// parseCommand reads argv; truncated says the kernel cut it at its capture
// limit, so a line that ends early (before "--" or a flag's value) is not
// one the CLI would refuse: it is read as far as it goes.
func parseCommand(argv []string, truncated bool) command {
	if len(argv) == 0 || path.Base(argv[0]) != "mcptrace" {
		return command{}
	}
	c := command{kind: cmdOther}
	other := command{kind: cmdOther}
	start := 0
	switch {
	case len(argv) >= 2 && argv[1] == "run":
		c.kind, start = cmdRun, 2
	case len(argv) >= 2 && argv[1] == "exec":
		c.kind, start = cmdExec, 2
	case len(argv) >= 3 && argv[1] == "mark" && argv[2] == "destroy":
		c.kind, start = cmdMark, 3
	default:
		return c
	}
	flags := cmdFlags[c.kind]
	for i := start; i < len(argv); i++ {
		a := argv[i]
		switch {
		case a == "--":
			rest := len(argv) - i - 1
			if c.kind == cmdMark && rest > 0 || c.kind != cmdMark && rest == 0 {
				return other // mark destroy takes no argument; run and exec need CMD
			}
			return c.checked()
		case strings.HasPrefix(a, "--"):
			name, val, hasVal := strings.Cut(a[2:], "=")
			takesValue, known := flags[name]
			if !known {
				return other // the CLI refuses an unknown flag (--help included)
			}
			if !takesValue {
				continue
			}
			if !hasVal {
				if i+1 >= len(argv) {
					if name == "session" {
						c.id, c.bad, c.idLast = "", true, true
						return c
					}
					if truncated {
						return c
					}
					return other
				}
				i++
				val = argv[i]
			}
			if name == "session" {
				c.id, c.idLast = val, i == len(argv)-1
			}
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
