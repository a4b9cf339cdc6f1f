package roles

import (
	"fmt"
	"strconv"
)

// Role is what a process is to its session.
type Role uint8

const (
	// Other: a process that is none of the others: a server's helpers and
	// children, a host's own forks.
	Other Role = iota
	// Host: the session's root when it is an agent host.
	Host
	// Wrapper: a program that only starts another (npx, uvx, sh -c, env,
	// a docker run client), between the host and a server.
	Wrapper
	// Server: an MCP server: the first program below the host, past its
	// wrappers, or the root of an `mcptrace exec` sub-session.
	Server
	// Container: a process of a container a session member started
	// (its image is the server name).
	Container
	// Tool: a command the host ran for itself, not to speak MCP with it
	// (git, rg, lsb_release, a shell of its shell tool, mcptrace's own
	// CLI), and everything that command started.
	Tool
)

// All lists the roles, in the order a display shows them.
var All = []Role{Host, Wrapper, Server, Container, Tool, Other}

var roleNames = [...]string{
	Other:     "other",
	Host:      "host",
	Wrapper:   "wrapper",
	Server:    "server",
	Container: "container",
	Tool:      "tool",
}

func (r Role) String() string {
	if int(r) < len(roleNames) {
		return roleNames[r]
	}
	return "role(" + strconv.Itoa(int(r)) + ")"
}

// MarshalText returns the role's name; an unknown role is an error.
func (r Role) MarshalText() ([]byte, error) {
	if int(r) >= len(roleNames) {
		return nil, fmt.Errorf("unknown role %d", r)
	}
	return []byte(roleNames[r]), nil
}

// UnmarshalText reads a role's name, as MarshalText writes it.
func (r *Role) UnmarshalText(b []byte) error {
	for i, n := range roleNames {
		if n == string(b) {
			*r = Role(i)
			return nil
		}
	}
	return fmt.Errorf("unknown role %q", b)
}
