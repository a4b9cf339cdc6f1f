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
// order of keys; the file is indented with two spaces.
//
// It does not touch servers that are not stdio (a "url", a "type" other
// than "stdio"), servers already wrapped, nor anything outside those
// maps. It refuses a file it cannot parse. It does not read or write
// files: cmd/mcptrace does, with a backup.
package wrapconfig

import (
	"bytes"
	"encoding/json"
	"errors"
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

// member is one key and its raw value, in file order.
type member struct {
	key string
	val json.RawMessage
}

// object is a JSON object with its keys in order.
type object []member

func parseObject(raw []byte) (object, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	t, err := dec.Token()
	if err != nil {
		return nil, err
	}
	if d, ok := t.(json.Delim); !ok || d != '{' {
		return nil, errors.New("not a JSON object")
	}
	var o object
	seen := map[string]bool{}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, err
		}
		k, _ := t.(string)
		if seen[k] {
			return nil, fmt.Errorf("key %q twice", k)
		}
		seen[k] = true
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
		o = append(o, member{k, v})
	}
	if _, err := dec.Token(); err != nil {
		return nil, err
	}
	if len(bytes.Trim(raw[dec.InputOffset():], " \t\r\n")) > 0 { // JSON's white space only
		return nil, errors.New("data after the object")
	}
	return o, nil
}

func (o object) get(k string) (json.RawMessage, bool) {
	for _, m := range o {
		if m.key == k {
			return m.val, true
		}
	}
	return nil, false
}

// set replaces k's value, or adds k after the key after (at the end when
// after is absent).
func (o object) set(k string, v json.RawMessage, after string) object {
	for i := range o {
		if o[i].key == k {
			o[i].val = v
			return o
		}
	}
	for i := range o {
		if o[i].key == after {
			return append(o[:i+1], append(object{{k, v}}, o[i+1:]...)...)
		}
	}
	return append(o, member{k, v})
}

func (o object) del(k string) object {
	for i := range o {
		if o[i].key == k {
			return append(o[:i:i], o[i+1:]...)
		}
	}
	return o
}

func (o object) marshal() json.RawMessage {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, m := range o {
		if i > 0 {
			b.WriteByte(',')
		}
		k, _ := json.Marshal(m.key)
		b.Write(k)
		b.WriteByte(':')
		b.Write(m.val)
	}
	b.WriteByte('}')
	return b.Bytes()
}

// rewrite applies f to every server object of the file, by where it is.
func rewrite(data []byte, f func(where, name string, srv object) (object, *Change, error)) ([]byte, []Change, error) {
	top, err := parseObject(data)
	if err != nil {
		return nil, nil, fmt.Errorf("not a JSON configuration: %w", err)
	}
	var changes []Change
	servers := func(where string, raw json.RawMessage) (json.RawMessage, error) {
		m, err := parseObject(raw)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		for i := range m {
			srv, err := parseObject(m[i].val)
			if err != nil {
				continue // not a server entry: left as it is
			}
			out, ch, err := f(where+"."+m[i].key, m[i].key, srv)
			if err != nil {
				return nil, fmt.Errorf("%s.%s: %w", where, m[i].key, err)
			}
			if ch != nil {
				m[i].val = out.marshal()
				changes = append(changes, *ch)
			}
		}
		return m.marshal(), nil
	}
	for i := range top {
		switch top[i].key {
		case "mcpServers", "servers":
			if top[i].val, err = servers(top[i].key, top[i].val); err != nil {
				return nil, nil, err
			}
		case "projects":
			projects, err := parseObject(top[i].val)
			if err != nil {
				continue // not the per-project map: left as it is
			}
			for j := range projects {
				p, err := parseObject(projects[j].val)
				if err != nil {
					continue
				}
				raw, ok := p.get("mcpServers")
				if !ok {
					continue
				}
				out, err := servers("projects."+projects[j].key+".mcpServers", raw)
				if err != nil {
					return nil, nil, err
				}
				projects[j].val = p.set("mcpServers", out, "").marshal()
			}
			top[i].val = projects.marshal()
		}
	}
	var out bytes.Buffer
	if err := json.Indent(&out, top.marshal(), "", "  "); err != nil {
		return nil, nil, err
	}
	out.WriteByte('\n')
	return out.Bytes(), changes, nil
}

// stdio reports whether srv is a stdio server: a command, and no other
// transport.
func stdio(srv object) (command string, args []string, ok bool, err error) {
	raw, has := srv.get("command")
	if !has {
		return "", nil, false, nil
	}
	if t, has := srv.get("type"); has {
		var typ string
		if json.Unmarshal(t, &typ) != nil || typ != "stdio" {
			return "", nil, false, nil
		}
	}
	if err := json.Unmarshal(raw, &command); err != nil || command == "" {
		return "", nil, false, errors.New(`"command" is not a program name`)
	}
	if raw, has := srv.get("args"); has {
		if err := json.Unmarshal(raw, &args); err != nil {
			return "", nil, false, errors.New(`"args" is not a list of strings`)
		}
	}
	return command, args, true, nil
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

func mustJSON(v any) json.RawMessage {
	b, _ := json.Marshal(v)
	return b
}

// Wrap makes every stdio server of a host's JSON configuration run as
// `mcptrace exec --session NAME -- COMMAND ARGS…`, with mcptrace the
// program to run (a name on PATH or an absolute path).
func Wrap(data []byte, mcptrace string) ([]byte, []Change, error) {
	return rewrite(data, func(where, name string, srv object) (object, *Change, error) {
		command, args, ok, err := stdio(srv)
		if err != nil || !ok {
			return nil, nil, err
		}
		if _, _, already := wrapped(command, args); already {
			return nil, nil, nil
		}
		id := SessionFor(name)
		srv = srv.set("command", mustJSON(mcptrace), "")
		srv = srv.set("args", mustJSON(append([]string{"exec", "--session", id, "--", command}, args...)), "command")
		return srv, &Change{Where: where, Session: id}, nil
	})
}

// Unwrap undoes Wrap: a server run as `mcptrace exec --session NAME --
// COMMAND ARGS…` runs COMMAND ARGS… again ("args" left out when there
// are none).
func Unwrap(data []byte) ([]byte, []Change, error) {
	return rewrite(data, func(where, name string, srv object) (object, *Change, error) {
		command, args, ok, err := stdio(srv)
		if err != nil || !ok {
			return nil, nil, err
		}
		session, inner, is := wrapped(command, args)
		if !is || len(inner) == 0 {
			return nil, nil, nil
		}
		srv = srv.set("command", mustJSON(inner[0]), "")
		if len(inner) > 1 {
			srv = srv.set("args", mustJSON(inner[1:]), "command")
		} else {
			srv = srv.del("args")
		}
		return srv, &Change{Where: where, Session: session}, nil
	})
}
