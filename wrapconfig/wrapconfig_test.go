package wrapconfig

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"
)

// normal is a configuration as hosts read it: key order and spacing do
// not count, an absent "args" is no arguments.
func normal(t testing.TB, data []byte) any {
	t.Helper()
	var v any
	if err := json.Unmarshal(data, &v); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, data)
	}
	var drop func(any)
	drop = func(x any) {
		switch x := x.(type) {
		case map[string]any:
			if a, ok := x["args"].([]any); ok && len(a) == 0 {
				delete(x, "args")
			}
			for _, y := range x {
				drop(y)
			}
		case []any:
			for _, y := range x {
				drop(y)
			}
		}
	}
	drop(v)
	return v
}

// server reads one server entry back: command and args.
func serverIn(t *testing.T, data []byte, where ...string) (string, []string) {
	t.Helper()
	var v any = normal(t, data)
	for _, k := range where {
		v = v.(map[string]any)[k]
	}
	m := v.(map[string]any)
	var args []string
	for _, a := range m["args"].([]any) {
		args = append(args, a.(string))
	}
	return m["command"].(string), args
}

// Each host's file round-trips: parse, wrap, parse again, unwrap gives
// the file back; every stdio server runs under mcptrace exec with its
// name as sub-session, and nothing else changes.
func TestWrapRoundTripsEveryHostsFile(t *testing.T) {
	for _, tc := range []struct {
		file  string
		wraps []string
		check []string // one wrapped server's path
		want  []string // its args after wrapping
	}{
		{"claude-project.mcp.json", []string{"mcpServers.filesystem", "mcpServers.github", "mcpServers.time server"},
			[]string{"mcpServers", "time server"}, []string{"exec", "--session", "time-server", "--", "uvx", "mcp-server-time"}},
		{"claude-user.claude.json", []string{"mcpServers.fetch", "projects./home/u/app.mcpServers.sqlite"},
			[]string{"projects", "/home/u/app", "mcpServers", "sqlite"},
			[]string{"exec", "--session", "sqlite", "--", "npx", "-y", "mcp-server-sqlite", "--db", "/home/u/app/db.sqlite"}},
		{"vscode.mcp.json", []string{"servers.memory", "servers.playwright"},
			[]string{"servers", "playwright"}, []string{"exec", "--session", "playwright", "--", "npx", "@playwright/mcp@latest"}},
		{"cursor.mcp.json", []string{"mcpServers.postgres", "mcpServers.everything"},
			[]string{"mcpServers", "everything"}, []string{"exec", "--session", "everything", "--", `C:\Program Files\nodejs\npx.cmd`, "-y", "@modelcontextprotocol/server-everything"}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			orig, err := os.ReadFile(filepath.Join("testdata", tc.file))
			if err != nil {
				t.Fatal(err)
			}
			wrappedData, changes, err := Wrap(JSON, orig, "mcptrace")
			if err != nil {
				t.Fatal(err)
			}
			var where []string
			for _, c := range changes {
				where = append(where, c.Where)
			}
			if !slices.Equal(where, tc.wraps) {
				t.Errorf("wrapped %q, want %q", where, tc.wraps)
			}
			if cmd, args := serverIn(t, wrappedData, tc.check...); cmd != "mcptrace" || !slices.Equal(args, tc.want) {
				t.Errorf("%v runs %s %q, want mcptrace %q", tc.check, cmd, args, tc.want)
			}
			again, changes, err := Wrap(JSON, wrappedData, "mcptrace")
			if err != nil || len(changes) != 0 || !reflect.DeepEqual(normal(t, again), normal(t, wrappedData)) {
				t.Errorf("wrapping twice changed %v (%v)", changes, err)
			}
			back, changes, err := Unwrap(JSON, wrappedData)
			if err != nil || len(changes) != len(tc.wraps) {
				t.Fatalf("unwrap: %v, %v", changes, err)
			}
			if !reflect.DeepEqual(normal(t, back), normal(t, orig)) {
				t.Errorf("unwrap does not give the file back:\n%s\nwant\n%s", back, orig)
			}
		})
	}
}

// Keys keep their order and values their bytes: a host's other settings
// come back as they were written.
func TestWrapKeepsKeyOrderAndValues(t *testing.T) {
	in := []byte(`{"z":1,"mcpServers":{"b":{"env":{"K":"v"},"command":"npx","args":["x"]},"a":{"command":"uvx"}},"n":1.50,"a":true}`)
	out, _, err := Wrap(JSON, in, "/usr/bin/mcptrace")
	if err != nil {
		t.Fatal(err)
	}
	top, err := parseObject(out)
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, m := range top {
		keys = append(keys, m.key)
	}
	if !slices.Equal(keys, []string{"z", "mcpServers", "n", "a"}) {
		t.Errorf("top keys %q", keys)
	}
	if n, _ := top.get("n"); string(n) != "1.50" {
		t.Errorf("a number was re-encoded: %s", n)
	}
	srvs, _ := top.get("mcpServers")
	m, _ := parseObject(srvs)
	b, _ := parseObject(m[0].val)
	var bk []string
	for _, x := range b {
		bk = append(bk, x.key)
	}
	if m[0].key != "b" || !slices.Equal(bk, []string{"env", "command", "args"}) {
		t.Errorf("server keys %q", bk)
	}
	a, _ := parseObject(m[1].val)
	if args, _ := a.get("args"); !reflect.DeepEqual(normal(t, args), normal(t, []byte(`["exec","--session","a","--","uvx"]`))) {
		t.Errorf("a server without args: %s", args)
	}
}

func TestWrapRefusesWhatItCannotParse(t *testing.T) {
	for _, in := range []string{``, `[]`, `{"mcpServers": {`, `{"a":1} {"b":2}`, `{"a":1,"a":2}`,
		`{"mcpServers":{"x":{"command":3}}}`, `{"mcpServers":{"x":{"command":"npx","args":"-y"}}}`} {
		if _, _, err := Wrap(JSON, []byte(in), "mcptrace"); err == nil {
			t.Errorf("Wrap(%q) did not refuse", in)
		}
	}
}

func TestSessionForMakesAValidID(t *testing.T) {
	for in, want := range map[string]string{"github": "github", "time server": "time-server", "@acme/x": "mcp-@acme-x", "": "mcp-"} {
		if got := SessionFor(in); got != want {
			t.Errorf("SessionFor(%q) = %q, want %q", in, got, want)
		}
	}
}

// Whatever a file holds, wrapping it gives JSON that unwraps to the same
// configuration, and wrapping twice changes nothing more.
func FuzzWrapUnwrap(f *testing.F) {
	for _, name := range []string{"claude-project.mcp.json", "claude-user.claude.json", "vscode.mcp.json", "cursor.mcp.json"} {
		b, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`{"mcpServers":{"x":{"command":"mcptrace","args":["exec","--session","s","--","npx"]}}}`))
	f.Fuzz(func(t *testing.T, in []byte) {
		out, _, err := Wrap(JSON, in, "mcptrace")
		if err != nil {
			return
		}
		if !json.Valid(out) {
			t.Fatalf("Wrap made invalid JSON: %s", out)
		}
		again, changes, err := Wrap(JSON, out, "mcptrace")
		if err != nil || len(changes) != 0 || !reflect.DeepEqual(normal(t, again), normal(t, out)) {
			t.Fatalf("wrapping twice changed %v (%v)", changes, err)
		}
		back, _, err := Unwrap(JSON, out)
		if err != nil {
			t.Fatalf("Unwrap of Wrap's output: %v", err)
		}
		if _, _, err := Unwrap(JSON, in); err != nil {
			return
		}
		// A file that already held wrapped servers unwraps further than it
		// started; one that did not comes back as it was.
		if _, ch, _ := Unwrap(JSON, in); len(ch) == 0 && !reflect.DeepEqual(normal(t, back), normal(t, in)) {
			t.Fatalf("round trip changed the configuration:\n%s\n->\n%s", in, back)
		}
	})
}
