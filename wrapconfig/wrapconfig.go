// Package wrapconfig rewrites an agent host's MCP configuration so that
// each stdio server it starts runs under `mcptrace exec --session NAME --`:
// every server becomes a sub-session named after it, which a destroy
// marker (`mcptrace mark destroy --session NAME`) ends alone, and which
// the host's own session ends with it. Unwrap undoes exactly that.
//
// It reads three formats (see [Format]):
//
//   - JSON: the files of Claude Code (.mcp.json, and ~/.claude.json with
//     its per-project servers), Cursor (mcp.json) and VS Code (mcp.json,
//     "servers"): the server maps under "mcpServers" or "servers" at the
//     top level and under "projects"."<dir>"."mcpServers". The file is
//     written again whole, indented with two spaces; every other value
//     keeps its bytes and every object its order of keys.
//   - TOML: Codex's ~/.codex/config.toml, its [mcp_servers.NAME] tables
//     (or the same keys written dotted, or as inline tables).
//   - YAML: goose's ~/.config/goose/config.yaml, its "extensions" map.
//
// In TOML and YAML only the bytes of a server's command and args are
// edited; the rest of the file, comments included, stays byte for byte.
// Wrap puts the command in place of the old one and inserts the five
// arguments `exec --session NAME -- COMMAND` before the first argument,
// in the list's own style: in TOML, "exec", "--session", … on the line of
// the first argument; in a YAML flow list, [exec, --session, …]; in a
// YAML block list, one "- exec" line each at the items' indentation. An
// empty list is written again whole on one line, and a TOML server
// without args gets an args line (or key, in an inline table) after its
// command. Unwrap removes exactly what Wrap inserted, so that wrapping
// then unwrapping gives the file back byte for byte; with no argument
// left it removes a TOML args line (args = [] where the line holds a
// comment too) and leaves a YAML args: []. New strings are TOML basic
// strings ("…"), and YAML plain scalars where YAML reads them back as the
// same string, double-quoted otherwise; a string moving between command
// and args keeps its bytes in TOML, and its quotes in YAML. The result is
// parsed again before it is returned: each changed server must read
// back with the command and args intended, and everything else as
// before.
//
// It does not touch servers that are not stdio (no command; a "url"
// and no command; a "type" other than "stdio"), servers already wrapped,
// nor anything outside those maps. It refuses a file it cannot parse,
// one with a key twice, a stdio server whose command is not a string or
// whose args are not a list of strings, and, in TOML and YAML, a layout
// it cannot edit in place (an alias, anchor, tag or block scalar on the
// command or args, a command or args from a YAML merge key, a goose
// extension without args, comments among the arguments Unwrap would
// remove or in a list written again whole), naming the server: those
// lines are changed by hand. It does not read or write files:
// cmd/mcptrace does, with a backup.
package wrapconfig

import (
	"fmt"
	"path"
	"path/filepath"
	"strings"

	"github.com/mcptrace/mcptrace/sessions"
)

// Change is one server Wrap or Unwrap rewrote, by where it is in the
// file: "mcpServers.github", "projects./home/u/app.mcpServers.fs",
// "mcp_servers.docs", "extensions.github".
type Change struct {
	Where   string
	Session string // the sub-session the server runs as
}

// Format is a configuration file's syntax.
type Format int

const (
	JSON Format = iota // Claude Code, Cursor, VS Code
	TOML               // Codex
	YAML               // goose
)

func (f Format) String() string {
	switch f {
	case JSON:
		return "JSON"
	case TOML:
		return "TOML"
	case YAML:
		return "YAML"
	}
	return fmt.Sprintf("Format(%d)", int(f))
}

// FormatFor is the format of a file by its extension, whatever its case:
// .json, .toml, .yaml or .yml. Any other name is refused rather than
// guessed from the content.
func FormatFor(name string) (Format, error) {
	switch strings.ToLower(filepath.Ext(name)) {
	case ".json":
		return JSON, nil
	case ".toml":
		return TOML, nil
	case ".yaml", ".yml":
		return YAML, nil
	}
	return 0, fmt.Errorf("%s: not a .json, .toml, .yaml or .yml file", name)
}

// Wrap makes every stdio server of a host's configuration in format f
// run as `mcptrace exec --session NAME -- COMMAND ARGS…`, with mcptrace
// the program to run (a name on PATH or an absolute path). A TOML or
// YAML file with nothing to wrap comes back as it was.
func Wrap(f Format, data []byte, mcptrace string) ([]byte, []Change, error) {
	return f.rewrite(data, wrapRule(mcptrace))
}

// Unwrap undoes Wrap: a server run as `mcptrace exec --session NAME --
// COMMAND ARGS…` runs COMMAND ARGS… again (JSON and TOML leave "args"
// out when there are none; goose needs it, so YAML keeps args: []).
func Unwrap(f Format, data []byte) ([]byte, []Change, error) {
	return f.rewrite(data, unwrapRule)
}

func (f Format) rewrite(data []byte, r rule) ([]byte, []Change, error) {
	switch f {
	case JSON:
		return rewriteJSON(data, r)
	case TOML:
		return rewriteTOML(data, r)
	case YAML:
		return rewriteYAML(data, r)
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
	// after Unwrap. TOML and YAML leave their bytes alone.
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

// stringList is v as a list of strings, when it is one.
func stringList(v any) ([]string, bool) {
	l, ok := v.([]any)
	if !ok {
		return nil, false
	}
	out := make([]string, 0, len(l))
	for _, x := range l {
		s, ok := x.(string)
		if !ok {
			return nil, false
		}
		out = append(out, s)
	}
	return out, true
}

// serverOf reads a decoded TOML or YAML server entry.
func serverOf(m map[string]any, cmdKey string) server {
	s := server{cmdKey: cmdKey, argsKey: "args", argsOK: true}
	var c any
	c, s.hasCommand = m[cmdKey]
	s.command, s.commandOK = c.(string)
	s.commandOK = s.commandOK && s.command != ""
	var t any
	if t, s.hasType = m["type"]; s.hasType {
		s.typ, _ = t.(string)
	}
	var a any
	if a, s.hasArgs = m["args"]; s.hasArgs {
		s.args, s.argsOK = stringList(a)
	}
	return s
}
