package wrapconfig

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

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

// rewriteJSON applies r to every server object of the file, by where it
// is, and writes the file again whole.
func rewriteJSON(data []byte, r rule) ([]byte, []Change, error) {
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
			p, err := r(m[i].key, jsonServer(srv))
			if err != nil {
				return nil, fmt.Errorf("%s.%s: %w", where, m[i].key, err)
			}
			if p != nil {
				srv = srv.set("command", mustJSON(p.command), "")
				if len(p.args) > 0 {
					srv = srv.set("args", mustJSON(p.args), "command")
				} else {
					srv = srv.del("args")
				}
				m[i].val = srv.marshal()
				changes = append(changes, Change{Where: where + "." + m[i].key, Session: p.session})
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

// jsonServer reads a server object: json.Unmarshal's rules, so a null
// "args" is no arguments.
func jsonServer(srv object) server {
	s := server{cmdKey: `"command"`, argsKey: `"args"`, argsOK: true}
	var raw json.RawMessage
	if raw, s.hasCommand = srv.get("command"); s.hasCommand {
		s.commandOK = json.Unmarshal(raw, &s.command) == nil && s.command != ""
	}
	if t, has := srv.get("type"); has {
		s.hasType = true
		if json.Unmarshal(t, &s.typ) != nil {
			s.typ = ""
		}
	}
	if raw, s.hasArgs = srv.get("args"); s.hasArgs {
		s.argsOK = json.Unmarshal(raw, &s.args) == nil
	}
	return s
}

func mustJSON(v any) json.RawMessage {
	b, _ := json.Marshal(v)
	return b
}
