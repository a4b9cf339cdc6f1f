package sessions

import (
	"path"
	"regexp"
	"strings"
)

// The mcptrace command lines the tracker reacts to when it sees them exec'd:
//
//	mcptrace run [--session ID] [--] CMD ARGS…     the process is the root of session ID
//	mcptrace exec [--session ID] [--] SERVER ARGS… the process is the root of sub-session ID
//	mcptrace mark destroy [--session ID]           a destroy marker
//
// argv[0] must have the basename "mcptrace" and the subcommand must follow
// it directly (global flags go after the subcommand). Flags are read up to
// "--" or the first argument that is not a flag; "--session ID" and
// "--session=ID" are the only flags the tracker reads, any other is skipped
// as a flag without a value.

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

func parseCommand(argv []string) command {
	if len(argv) == 0 || path.Base(argv[0]) != "mcptrace" {
		return command{}
	}
	c := command{kind: cmdOther}
	flags := 0
	switch {
	case len(argv) >= 2 && argv[1] == "run":
		c.kind, flags = cmdRun, 2
	case len(argv) >= 2 && argv[1] == "exec":
		c.kind, flags = cmdExec, 2
	case len(argv) >= 3 && argv[1] == "mark" && argv[2] == "destroy":
		c.kind, flags = cmdMark, 3
	default:
		return c
	}
	for i := flags; i < len(argv); i++ {
		a := argv[i]
		switch {
		case a == "--":
			return c
		case a == "--session":
			if i+1 >= len(argv) {
				c.id, c.bad, c.idLast = "", true, true
				return c
			}
			i++
			c.id, c.bad, c.idLast = argv[i], argv[i] == "", i == len(argv)-1
		case strings.HasPrefix(a, "--session="):
			c.id = strings.TrimPrefix(a, "--session=")
			c.bad, c.idLast = c.id == "", i == len(argv)-1
		case strings.HasPrefix(a, "-") && a != "-":
			// Another flag: assumed to carry no separate value.
		default:
			return c // the command to run starts here
		}
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
