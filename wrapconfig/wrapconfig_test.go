package wrapconfig

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/pelletier/go-toml/v2"
	"go.yaml.in/yaml/v3"
)

// normal is a configuration as hosts read it: key order and spacing do
// not count, an absent "args" is no arguments.
func normal(t testing.TB, data []byte) any {
	t.Helper()
	var v any
	if err := json.Unmarshal(data, &v); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, data)
	}
	dropEmptyArgs(v)
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

func TestFormatForGoesByTheExtensionOnly(t *testing.T) {
	for name, want := range map[string]Format{".mcp.json": JSON, "/home/u/.claude.json": JSON, "mcp.JSON": JSON,
		"config.toml": TOML, "CONFIG.TOML": TOML, "config.yaml": YAML, "config.YML": YAML} {
		if got, err := FormatFor(name); err != nil || got != want {
			t.Errorf("FormatFor(%q) = %v, %v; want %v", name, got, err, want)
		}
	}
	for _, name := range []string{"config", "mcp.json5", "config.toml.bak", "settings.jsonc"} {
		if _, err := FormatFor(name); err == nil {
			t.Errorf("FormatFor(%q) did not refuse", name)
		}
	}
}

// decoded is a TOML or YAML file as its host reads it, with an absent
// "args" the same as an empty one.
func decoded(t testing.TB, f Format, data []byte) any {
	t.Helper()
	var v any
	var err error
	if f == TOML {
		v, err = decodeTOML(data)
	} else {
		v, err = decodeYAML(data)
	}
	if err != nil {
		t.Fatalf("not %v: %v\n%s", f, err, data)
	}
	dropEmptyArgs(v)
	return v
}

// comments are the comments of a file, as lines from their "#" on.
func comments(data []byte) []string {
	var out []string
	for _, line := range strings.Split(string(data), "\n") {
		if i := strings.Index(line, "#"); i >= 0 {
			out = append(out, line[i:])
		}
	}
	return out
}

// Codex's and goose's files, written as each host writes them (and by
// hand, with comments): Wrap edits only the command and args of each
// stdio server (the wrapped files in testdata are the whole expected
// result), leaves HTTP and builtin servers, projects and every comment
// alone, changes nothing when run again, and Unwrap gives back the file
// byte for byte.
func TestWrapEditsOnlyCommandAndArgsOfCodexAndGooseFiles(t *testing.T) {
	for _, tc := range []struct {
		file    string
		wraps   []string
		already []string // wrapped before: Unwrap unwraps them too
		check   []string // one wrapped server's keys
		want    []string // its args after wrapping
	}{
		{"codex.config.toml", []string{"mcp_servers.docs", "mcp_servers.github", "mcp_servers.sqlite", "mcp_servers.browser tools"},
			[]string{"mcp_servers.time"},
			[]string{"mcp_servers", "browser tools"}, []string{"exec", "--session", "browser-tools", "--", "npx", "@playwright/mcp@latest", "--headless"}},
		{"codex.layouts.toml", []string{"mcp_servers.fetch", "mcp_servers.memory", "mcp_servers.echo", "mcp_servers.git", "mcp_servers.everything"},
			nil,
			[]string{"mcp_servers", "git"}, []string{"exec", "--session", "git", "--", "uvx", "mcp-server-git", "--repository", `C:\src\app`}},
		{"goose.config.yaml", []string{"extensions.github", "extensions.fetch", "extensions.filesystem"},
			[]string{"extensions.time"},
			[]string{"extensions", "filesystem"}, []string{"exec", "--session", "filesystem", "--", "/opt/homebrew/bin/npx", "-y",
				"@modelcontextprotocol/server-filesystem", "/Users/u/Documents", "/Users/u/Desktop"}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			f, err := FormatFor(tc.file)
			if err != nil {
				t.Fatal(err)
			}
			orig, err := os.ReadFile(filepath.Join("testdata", tc.file))
			if err != nil {
				t.Fatal(err)
			}
			ext := filepath.Ext(tc.file)
			golden, err := os.ReadFile(filepath.Join("testdata", strings.TrimSuffix(tc.file, ext)+".wrapped"+ext))
			if err != nil {
				t.Fatal(err)
			}
			out, changes, err := Wrap(f, orig, "mcptrace")
			if err != nil {
				t.Fatal(err)
			}
			if where := wheres(changes); !slices.Equal(where, tc.wraps) {
				t.Errorf("wrapped %q, want %q", where, tc.wraps)
			}
			if !bytes.Equal(out, golden) {
				t.Errorf("wrapped file:\n%s\nwant\n%s", out, golden)
			}
			srv, _ := lookup(decoded(t, f, out), tc.check).(map[string]any)
			if args, _ := stringList(srv["args"]); !slices.Equal(args, tc.want) {
				t.Errorf("%v runs %v %q, want mcptrace %q", tc.check, srv["command"], args, tc.want)
			}
			if missing := slices.DeleteFunc(comments(orig), func(c string) bool { return bytes.Contains(out, []byte(c)) }); len(missing) > 0 {
				t.Errorf("comments lost: %q", missing)
			}

			again, changes, err := Wrap(f, out, "mcptrace")
			if err != nil || len(changes) != 0 || !bytes.Equal(again, out) {
				t.Errorf("wrapping twice changed %v (%v)", changes, err)
			}

			back, changes, err := Unwrap(f, out)
			if err != nil {
				t.Fatal(err)
			}
			if where := wheres(changes); !slices.Equal(slices.Sorted(slices.Values(where)), slices.Sorted(slices.Values(append(tc.wraps, tc.already...)))) {
				t.Errorf("unwrapped %q, want %q and %q", where, tc.wraps, tc.already)
			}
			plain, _, err := Unwrap(f, orig)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(back, plain) {
				t.Errorf("unwrap(wrap(file)) is not unwrap(file):\n%s\nwant\n%s", back, plain)
			}
			// Without the servers wrapped before, the round trip gives the
			// file back byte for byte.
			out, _, err = Wrap(f, plain, "mcptrace")
			if err != nil {
				t.Fatal(err)
			}
			if back, _, err = Unwrap(f, out); err != nil || !bytes.Equal(back, plain) {
				t.Errorf("round trip (%v):\n%s\nwant\n%s", err, back, plain)
			}
			if len(tc.already) == 0 && !bytes.Equal(plain, orig) {
				t.Errorf("unwrap changed a file with nothing wrapped:\n%s", plain)
			}
		})
	}
}

func wheres(changes []Change) []string {
	var out []string
	for _, c := range changes {
		out = append(out, c.Where)
	}
	return out
}

// fuzzWrapUnwrap is the property FuzzWrapUnwrapTOML and YAML check: when
// Wrap takes a file, what it gives parses, wrapping it again changes
// nothing, and Unwrap gives back the same configuration (the same bytes
// when Wrap changed nothing).
func fuzzWrapUnwrap(t *testing.T, f Format, in []byte) {
	out, changes, err := Wrap(f, in, "mcptrace")
	if err != nil {
		if out != nil {
			t.Fatalf("Wrap refused (%v) and gave a file", err)
		}
		return
	}
	if len(changes) == 0 && !bytes.Equal(out, in) {
		t.Fatalf("Wrap changed nothing yet rewrote the file:\n%s\n->\n%s", in, out)
	}
	if f == TOML {
		var v map[string]any
		err = toml.Unmarshal(out, &v)
	} else {
		var v any
		err = yaml.Unmarshal(out, &v)
	}
	if err != nil {
		t.Fatalf("Wrap made a file that does not parse (%v):\n%s", err, out)
	}
	again, changes, err := Wrap(f, out, "mcptrace")
	if err != nil || len(changes) != 0 || !bytes.Equal(again, out) {
		t.Fatalf("wrapping twice changed %v (%v):\n%s", changes, err, out)
	}
	// A file Unwrap cannot take (a server wrapped before, in a layout it
	// does not edit) says nothing of the round trip.
	if _, ch, err := Unwrap(f, in); err != nil || len(ch) > 0 {
		return
	}
	back, _, err := Unwrap(f, out)
	if err != nil {
		t.Fatalf("Unwrap of Wrap's output: %v\n%s", err, out)
	}
	if !reflect.DeepEqual(decoded(t, f, back), decoded(t, f, in)) {
		t.Fatalf("round trip changed the configuration:\n%s\n->\n%s\n->\n%s", in, out, back)
	}
}

func fuzzSeeds(f *testing.F, pattern string, more ...string) {
	files, err := filepath.Glob(filepath.Join("testdata", pattern))
	if err != nil || len(files) == 0 {
		f.Fatalf("no seeds %s: %v", pattern, err)
	}
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	for _, s := range more {
		f.Add([]byte(s))
	}
}

func FuzzWrapUnwrapTOML(f *testing.F) {
	fuzzSeeds(f, "codex.*.toml",
		`mcp_servers.x = { command = "a" }`,
		"mcp_servers.x.command = 'a'\nmcp_servers = { y = { args = [\"b\"], command = \"c\" } }",
		"[mcp_servers.x]\ncommand = \"mcptrace\"\nargs = [\"exec\", \"--session=s\", \"--\", \"a\"] # c",
		"[mcp_servers.x]\r\ncommand = \"a\"\r\nargs = []\r\n",
		`[mcp_servers.x]
command = """a"""
args = [ # c
  'b', "c\td",
]`)
	f.Fuzz(func(t *testing.T, in []byte) { fuzzWrapUnwrap(t, TOML, in) })
}

func FuzzWrapUnwrapYAML(f *testing.F) {
	fuzzSeeds(f, "goose.*.yaml",
		"extensions: {x: {type: stdio, cmd: a, args: []}}",
		"\ufeffextensions:\n  é:\n    type: stdio\n    cmd: \"a b\"\n    args: [\n      'c', d,\n    ]\n",
		"extensions:\n  x:\n    cmd: mcptrace\n    args:\n    - exec\n    - --session\n    - x\n    - --\n    - a\n    type: stdio\n",
		"extensions:\r\n  x:\r\n    cmd: 'a'\r\n    args:\r\n    - \"b\"\r\n",
		"extensions:\n  x:\n    cmd: a\n    args: [b, # c\n      d]\n")
	f.Fuzz(func(t *testing.T, in []byte) { fuzzWrapUnwrap(t, YAML, in) })
}

// wrapsInPlace checks that Wrap turns in into wrapped, byte for byte, and
// Unwrap turns that into unwrapped (in when "").
func wrapsInPlace(t *testing.T, f Format, in, wrapped, unwrapped string) {
	t.Helper()
	out, _, err := Wrap(f, []byte(in), "mcptrace")
	if err != nil {
		t.Fatal(err)
	}
	if string(out) != wrapped {
		t.Fatalf("wrapped:\n%s\nwant\n%s", out, wrapped)
	}
	back, _, err := Unwrap(f, out)
	if err != nil {
		t.Fatal(err)
	}
	if unwrapped == "" {
		unwrapped = in
	}
	if string(back) != unwrapped {
		t.Errorf("unwrapped:\n%s\nwant\n%s", back, unwrapped)
	}
}

// dropEmptyArgs removes every empty "args" list in v: an absent one is
// no arguments, as hosts read it.
func dropEmptyArgs(x any) {
	switch x := x.(type) {
	case map[string]any:
		if a, ok := x["args"].([]any); ok && len(a) == 0 {
			delete(x, "args")
		}
		for _, y := range x {
			dropEmptyArgs(y)
		}
	case []any:
		for _, y := range x {
			dropEmptyArgs(y)
		}
	}
}
