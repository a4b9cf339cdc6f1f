package wrapconfig

import (
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// Each way goose's file (or a hand-written one) lists an extension's
// arguments is wrapped in place: only cmd and args change, in the style
// described in the package doc, and Unwrap gives the original back (the
// same bytes, unless unwrapped says otherwise).
func TestYAMLLayoutsWrapInPlaceAndUnwrapBack(t *testing.T) {
	for _, tc := range []struct {
		name, in, wrapped string
		unwrapped         string // when not in
	}{
		{name: "a flow list",
			in:      "extensions:\n  gh:\n    type: stdio\n    cmd: npx\n    args: [-y, \"@modelcontextprotocol/server-github\"]  # from npm\n",
			wrapped: "extensions:\n  gh:\n    type: stdio\n    cmd: mcptrace\n    args: [exec, --session, gh, --, npx, -y, \"@modelcontextprotocol/server-github\"]  # from npm\n"},
		{name: "a block list, indented",
			in:      "extensions:\n  gh:\n    cmd: npx\n    args:\n      - -y\n      # the package\n      - '@modelcontextprotocol/server-github'\n    type: stdio\n",
			wrapped: "extensions:\n  gh:\n    cmd: mcptrace\n    args:\n      - exec\n      - --session\n      - gh\n      - --\n      - npx\n      - -y\n      # the package\n      - '@modelcontextprotocol/server-github'\n    type: stdio\n"},
		{name: "a block list at the key's indentation, as goose writes it",
			in:      "extensions:\n  gh:\n    args:\n    - x\n    cmd: uvx\n    type: stdio\n",
			wrapped: "extensions:\n  gh:\n    args:\n    - exec\n    - --session\n    - gh\n    - --\n    - uvx\n    - x\n    cmd: mcptrace\n    type: stdio\n"},
		{name: "CRLF line endings",
			in:      "extensions:\r\n  gh:\r\n    type: stdio\r\n    cmd: npx\r\n    args:\r\n    - x\r\n",
			wrapped: "extensions:\r\n  gh:\r\n    type: stdio\r\n    cmd: mcptrace\r\n    args:\r\n    - exec\r\n    - --session\r\n    - gh\r\n    - --\r\n    - npx\r\n    - x\r\n"},
		{name: "a flow mapping",
			in:      "extensions: {gh: {type: stdio, cmd: 'npx', args: [x]}}\n",
			wrapped: "extensions: {gh: {type: stdio, cmd: mcptrace, args: [exec, --session, gh, --, 'npx', x]}}\n"},
		{name: "a byte order mark and a multi-line flow list",
			in:      "\ufeffextensions:\n  é:\n    type: stdio\n    cmd: npx\n    args: [\n      a,\n      b\n    ]\n",
			wrapped: "\ufeffextensions:\n  é:\n    type: stdio\n    cmd: mcptrace\n    args: [\n      exec, --session, mcp---, --, npx, a,\n      b\n    ]\n"},
		{name: "an empty list is written whole and unwrapped to args: []",
			in:      "extensions:\n  x:\n    type: stdio\n    cmd: a\n    args: []\n",
			wrapped: "extensions:\n  x:\n    type: stdio\n    cmd: mcptrace\n    args: [exec, --session, x, --, a]\n"},
		{name: "strings YAML would read as something else are double-quoted",
			in:      "extensions:\n  x:\n    type: stdio\n    cmd: \"yes\"\n    args: []\n",
			wrapped: "extensions:\n  x:\n    type: stdio\n    cmd: mcptrace\n    args: [exec, --session, x, --, \"yes\"]\n"},
		{name: "builtin, sse and streamable_http extensions, and a disabled stdio one's neighbours, are left alone",
			in:      "extensions:\n  developer:\n    type: builtin\n    name: developer\n  f:\n    type: sse\n    uri: http://x/sse\n  l:\n    type: streamable_http\n    uri: https://x/mcp\nGOOSE_MODEL: m\n",
			wrapped: "extensions:\n  developer:\n    type: builtin\n    name: developer\n  f:\n    type: sse\n    uri: http://x/sse\n  l:\n    type: streamable_http\n    uri: https://x/mcp\nGOOSE_MODEL: m\n"},
	} {
		t.Run(tc.name, func(t *testing.T) { wrapsInPlace(t, YAML, tc.in, tc.wrapped, tc.unwrapped) })
	}
}

// A block list whose only argument Unwrap leaves is the command becomes
// args: [] on the key's line (goose needs the key).
func TestYAMLUnwrapOfABlockListWithNothingLeftIsAnEmptyList(t *testing.T) {
	in := "extensions:\n  x:\n    cmd: mcptrace\n    args:\n    - exec\n    - --session\n    - x\n    - --\n    - a\n    type: stdio\n"
	out, changes, err := Unwrap(YAML, []byte(in))
	want := "extensions:\n  x:\n    cmd: a\n    args: []\n    type: stdio\n"
	if err != nil || len(changes) != 1 || string(out) != want {
		t.Errorf("unwrapped %v (%v):\n%s\nwant\n%s", changes, err, out, want)
	}
}

// What Wrap or Unwrap cannot do safely it refuses, naming the extension
// and what to change, and gives no file.
func TestYAMLRefusesWhatItCannotEditSafely(t *testing.T) {
	ext := func(body string) string { return "extensions:\n  x:\n    type: stdio\n" + body }
	for _, tc := range []struct {
		name   string
		unwrap bool
		in     string
		says   string
	}{
		{name: "a file that does not parse", in: "extensions:\n  x: [\n", says: "not a YAML configuration"},
		{name: "a key twice", in: ext("    cmd: a\n    cmd: b\n    args: []\n"), says: "not a YAML configuration"},
		{name: "two documents", in: "a: 1\n---\nb: 2\n", says: "more than one YAML document"},
		{name: "an empty file", in: "# nothing\n", says: "no YAML document"},
		{name: "a list at the top", in: "- a\n", says: "not a YAML mapping"},
		{name: "extensions that are not a mapping", in: "extensions: [a]\n", says: "extensions is not a mapping"},
		{name: "a cmd that is not a string", in: ext("    cmd: 3\n    args: []\n"), says: "extensions.x: cmd is not a program name"},
		{name: "args that are not strings", in: ext("    cmd: a\n    args: [b, 1.0]\n"), says: "extensions.x: args is not a list of strings"},
		{name: "args that are one string", in: ext("    cmd: a\n    args: -y b\n"), says: "extensions.x: args is not a list of strings"},
		{name: "no args", in: ext("    cmd: a\n"), says: "extensions.x: has no args, which goose needs"},
		{name: "a block scalar cmd", in: ext("    cmd: |\n      npx\n    args: []\n"), says: "extensions.x: cmd is a block scalar"},
		{name: "a cmd over two lines", in: ext("    cmd: \"n\n      px\"\n    args: []\n"), says: "extensions.x: cmd is not a string on one line"},
		{name: "a plain cmd over two lines", in: ext("    cmd: n\n      px\n    args: []\n"), says: "extensions.x: cmd is not a string on one line"},
		{name: "a tagged cmd", in: ext("    cmd: !!str npx\n    args: []\n"), says: "extensions.x: cmd has a tag"},
		{name: "an anchor on args", in: ext("    cmd: a\n    args: &common [b]\n"), says: "extensions.x: args has an anchor"},
		{name: "an alias for args", in: "common: &c [b]\n" + ext("    cmd: a\n    args: *c\n"), says: "extensions.x: args is an alias"},
		{name: "an alias for an argument", in: ext("    cmd: &c a\n    args: [*c]\n"), says: "extensions.x: cmd has an anchor"},
		{name: "cmd from a merge key", in: "base: &b {type: stdio, cmd: a}\nextensions:\n  x:\n    <<: *b\n    args: []\n", says: "extensions.x: cmd comes from a merge key"},
		{name: "an extension that is an alias", in: "base: &b {type: stdio, cmd: a, args: []}\nextensions:\n  x: *b\n", says: "extensions.x: is an alias"},
		{name: "an extension shared with another key, by an anchor",
			in:   "extensions:\n  x: &b\n    type: stdio\n    cmd: a\n    args: []\nother: *b\n",
			says: "does not read back as it was"},
		{name: "comments among the arguments Unwrap removes", unwrap: true,
			in:   ext("    cmd: mcptrace\n    args:\n    - exec\n    # sub-session\n    - --session\n    - x\n    - --\n    - a\n"),
			says: "extensions.x: args has comments among the mcptrace exec arguments"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out []byte
			var err error
			if tc.unwrap {
				out, _, err = Unwrap(YAML, []byte(tc.in))
			} else {
				out, _, err = Wrap(YAML, []byte(tc.in), "mcptrace")
			}
			if err == nil || out != nil || !strings.Contains(err.Error(), tc.says) {
				t.Errorf("gave %q, %v; want a refusal saying %q", out, err, tc.says)
			}
		})
	}
}

// yamlScalar writes what YAML reads back as the same string, plain where
// it can be and double-quoted where it cannot, in a flow list and in a
// block one.
func TestYAMLScalarReadsBackAsTheSameString(t *testing.T) {
	plain := []string{"npx", "-y", "--session", "/usr/bin/x", "é", "mcp-server-git", "a#b"}
	quoted := []string{"@scope/pkg", "yes", "No", "on", "null", "~", "1.0", "0x1F", "12", ":", "a: b", "x #y", "",
		"-", "?", "'", `"`, "*a", "&a", "!t", "%x", "`x", "|", ">", "tab\there", "new\nline", " lead", "trail "}
	for _, flow := range []bool{true, false} {
		for _, s := range append(append([]string{"a,b", `C:\Program Files\x.exe`}, plain...), quoted...) {
			text, err := yamlScalar(s, flow)
			if err != nil {
				t.Errorf("yamlScalar(%q): %v", s, err)
				continue
			}
			if q := strings.HasPrefix(text, `"`); q != slices.Contains(quoted, s) && !strings.ContainsAny(s, ",:") {
				t.Errorf("yamlScalar(%q, flow %v) = %s", s, flow, text)
			}
			doc := "a: [" + text + "]"
			if !flow {
				doc = "a:\n- " + text
			}
			var v struct{ A []any }
			if err := yaml.Unmarshal([]byte(doc), &v); err != nil || len(v.A) != 1 || v.A[0] != s {
				t.Errorf("yamlScalar(%q, flow %v) = %s reads back as %#v (%v)", s, flow, text, v.A, err)
			}
		}
	}
	// A comma needs quotes in a flow list only.
	if text, _ := yamlScalar("a,b", true); text != `"a,b"` {
		t.Errorf("a flow indicator in a flow list: %s", text)
	}
	if text, _ := yamlScalar("a,b", false); text != "a,b" {
		t.Errorf("a flow indicator in a block list: %s", text)
	}
}
