// Package wrapconfig rewrites an agent host's MCP configuration so that
// each stdio server it starts runs under `mcptrace exec --session NAME --`:
// every server becomes a sub-session named after it, which a destroy
// marker (`mcptrace mark destroy --session NAME`) ends alone, and which
// the host's own session ends with it. Unwrap undoes exactly that.
//
// It reads the JSON files of Claude Code (.mcp.json, and ~/.claude.json
// with its per-project servers), Cursor (mcp.json) and VS Code (mcp.json,
// "servers"): the server maps under "mcpServers" or "servers" at the top
// level and under "projects"."<dir>"."mcpServers". Everything else in the
// file is kept byte for byte (values are not re-encoded), and so is the
// order of keys; the file is indented with two spaces. Which servers are
// wrapped, and what they become, is decided by one rule for every format
// (see [Format]).
//
// It does not touch servers that are not stdio (a "url", a "type" other
// than "stdio"), servers already wrapped, nor anything outside those
// maps. It refuses a file it cannot parse. It does not read or write
// files: cmd/mcptrace does, with a backup.
package wrapconfig

import (
	"fmt"
	"path"
	"strings"

	"github.com/mcptrace/mcptrace/sessions"
)

// Change is one server Wrap or Unwrap rewrote, by where it is in the
// file: "mcpServers.github", "projects./home/u/app.mcpServers.fs".
type Change struct {
	Where   string
	Session string // the sub-session the server runs as
}

// Format is a configuration file's syntax.
type Format int

const (
	JSON Format = iota // Claude Code, Cursor, VS Code
)

func (f Format) String() string {
	switch f {
	case JSON:
		return "JSON"
	}
	return fmt.Sprintf("Format(%d)", int(f))
}

// Wrap makes every stdio server of a host's configuration in format f
// run as `mcptrace exec --session NAME -- COMMAND ARGS…`, with mcptrace
// the program to run (a name on PATH or an absolute path).
func Wrap(f Format, data []byte, mcptrace string) ([]byte, []Change, error) {
	return f.rewrite(data, wrapRule(mcptrace))
}

// Unwrap undoes Wrap: a server run as `mcptrace exec --session NAME --
// COMMAND ARGS…` runs COMMAND ARGS… again ("args" left out when there
// are none).
func Unwrap(f Format, data []byte) ([]byte, []Change, error) {
	return f.rewrite(data, unwrapRule)
}

func (f Format) rewrite(data []byte, r rule) ([]byte, []Change, error) {
	switch f {
	case JSON:
		return rewriteJSON(data, r)
	}
	return nil, nil, fmt.Errorf("unknown format %v", f)
}

// server is one entry of a server map as its format reads it: what the
// rules below decide on.
type server struct {
	cmdKey, argsKey string // their names in the file, for errors

	hasCommand bool // a command key, whatever its value
	command    string
	commandOK  bool // the command is a string, and not empty
	hasArgs    bool
	args       []string
	argsOK     bool // no args, or a list of strings
	hasType    bool
	typ        string // the transport type; "" when it is not a string
}

// stdio reports whether s is a stdio server: a command, and no other
// transport.
func (s server) stdio() (bool, error) {
	if !s.hasCommand || s.hasType && s.typ != "stdio" {
		return false, nil
	}
	if !s.commandOK {
		return false, fmt.Errorf("%s is not a program name", s.cmdKey)
	}
	if !s.argsOK {
		return false, fmt.Errorf("%s is not a list of strings", s.argsKey)
	}
	return true, nil
}

// plan is what a rule makes of one server: its command and args after.
type plan struct {
	command string
	args    []string
	session string
	// tail is how many of the server's args stay, unchanged, as the last
	// of plan.args: all of them after Wrap, those after the inner command
	// after Unwrap; a format that edits in place leaves their bytes alone.
	tail int
}

// rule decides what Wrap or Unwrap does to the server named name: a plan,
// or nil to leave it as it is. Every format asks the same two rules.
type rule func(name string, s server) (*plan, error)

func wrapRule(mcptrace string) rule {
	return func(name string, s server) (*plan, error) {
		if ok, err := s.stdio(); err != nil || !ok {
			return nil, err
		}
		if _, _, already := wrapped(s.command, s.args); already {
			return nil, nil
		}
		id := SessionFor(name)
		args := append([]string{"exec", "--session", id, "--", s.command}, s.args...)
		return &plan{command: mcptrace, args: args, session: id, tail: len(s.args)}, nil
	}
}

func unwrapRule(name string, s server) (*plan, error) {
	if ok, err := s.stdio(); err != nil || !ok {
		return nil, err
	}
	session, inner, is := wrapped(s.command, s.args)
	if !is || len(inner) == 0 {
		return nil, nil
	}
	return &plan{command: inner[0], args: inner[1:], session: session, tail: len(inner) - 1}, nil
}

// wrapped reports whether command and args already run under
// `mcptrace exec`, and what they run.
func wrapped(command string, args []string) (session string, inner []string, ok bool) {
	base := strings.ToLower(path.Base(strings.ReplaceAll(command, `\`, "/")))
	if base != "mcptrace" && base != "mcptrace.exe" || len(args) < 4 || args[0] != "exec" {
		return "", nil, false
	}
	for i := 1; i < len(args)-1; i++ {
		switch {
		case args[i] == "--session" && i+1 < len(args):
			session = args[i+1]
			i++
		case strings.HasPrefix(args[i], "--session="):
			session = strings.TrimPrefix(args[i], "--session=")
		case args[i] == "--":
			return session, args[i+1:], session != ""
		}
	}
	return "", nil, false
}

// SessionFor is the sub-session ID a server named name runs as: its name
// where the name is a valid session ID, else the name with every other
// character made '-' (and "mcp-" before it when it does not start with a
// letter or digit), cut to 128 characters.
func SessionFor(name string) string {
	if sessions.ValidID(name) {
		return name
	}
	b := []byte(name)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("._:@+=-", c) >= 0) {
			b[i] = '-'
		}
	}
	id := string(b)
	if id == "" || !(id[0] >= 'a' && id[0] <= 'z' || id[0] >= 'A' && id[0] <= 'Z' || id[0] >= '0' && id[0] <= '9') {
		id = "mcp-" + id
	}
	return id[:min(len(id), 128)]
}
