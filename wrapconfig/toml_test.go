package wrapconfig

import (
	"strings"
	"testing"

	"github.com/pelletier/go-toml/v2"
)

// Each way TOML lets a server be written is wrapped in place: only the
// command and the args change, in the style described in the package
// doc, and Unwrap gives the original back (the same bytes, unless
// unwrapped says otherwise).
func TestTOMLLayoutsWrapInPlaceAndUnwrapBack(t *testing.T) {
	for _, tc := range []struct {
		name, in, wrapped string
		unwrapped         string // when not in
	}{
		{name: "a table with command and args",
			in:      "[mcp_servers.docs]\ncommand = \"npx\"\nargs = [\"-y\", \"@acme/docs-mcp\"]\nenv = { K = \"v\" }\n",
			wrapped: "[mcp_servers.docs]\ncommand = \"mcptrace\"\nargs = [\"exec\", \"--session\", \"docs\", \"--\", \"npx\", \"-y\", \"@acme/docs-mcp\"]\nenv = { K = \"v\" }\n"},
		{name: "a table without args gets an args line after its command",
			in:      "[mcp_servers.x]\n  command = \"srv\"  # the server\n  cwd = \"/tmp\"\n",
			wrapped: "[mcp_servers.x]\n  command = \"mcptrace\"  # the server\n  args = [\"exec\", \"--session\", \"x\", \"--\", \"srv\"]\n  cwd = \"/tmp\"\n"},
		{name: "a command on the last line, without a newline",
			in:      "[mcp_servers.x]\ncommand = \"srv\"",
			wrapped: "[mcp_servers.x]\ncommand = \"mcptrace\"\nargs = [\"exec\", \"--session\", \"x\", \"--\", \"srv\"]"},
		{name: "CRLF line endings",
			in:      "[mcp_servers.x]\r\ncommand = \"srv\"\r\n[mcp_servers.y]\r\ncommand = \"a\"\r\nargs = [\"b\"]\r\n",
			wrapped: "[mcp_servers.x]\r\ncommand = \"mcptrace\"\r\nargs = [\"exec\", \"--session\", \"x\", \"--\", \"srv\"]\r\n[mcp_servers.y]\r\ncommand = \"mcptrace\"\r\nargs = [\"exec\", \"--session\", \"y\", \"--\", \"a\", \"b\"]\r\n"},
		{name: "dotted keys at the top level",
			in:      "mcp_servers.x.command = \"srv\"\nmcp_servers . y . command = \"a\"\nmcp_servers.y.args = [\"b\"]\n",
			wrapped: "mcp_servers.x.command = \"mcptrace\"\nmcp_servers.x.args = [\"exec\", \"--session\", \"x\", \"--\", \"srv\"]\nmcp_servers . y . command = \"mcptrace\"\nmcp_servers.y.args = [\"exec\", \"--session\", \"y\", \"--\", \"a\", \"b\"]\n"},
		{name: "inline tables, with and without args",
			in:      "mcp_servers = { x = { command = \"srv\" }, y = { args = ['b'], command = 'a' } }\n",
			wrapped: "mcp_servers = { x = { command = \"mcptrace\", args = [\"exec\", \"--session\", \"x\", \"--\", \"srv\"] }, y = { args = [\"exec\", \"--session\", \"y\", \"--\", 'a', 'b'], command = \"mcptrace\" } }\n"},
		{name: "strings keep their quoting: literal, multi-line, escaped",
			in:      "[mcp_servers.x]\ncommand = '''C:\\bin\\srv.exe'''\nargs = ['C:\\data', \"tab\\there\", \"\"\"multi\nline\"\"\"]\n",
			wrapped: "[mcp_servers.x]\ncommand = \"mcptrace\"\nargs = [\"exec\", \"--session\", \"x\", \"--\", '''C:\\bin\\srv.exe''', 'C:\\data', \"tab\\there\", \"\"\"multi\nline\"\"\"]\n"},
		{name: "a list over several lines keeps its comments and layout",
			in:      "[mcp_servers.x]\ncommand = \"a\"\nargs = [ # what it runs\n  \"b\", # first\n  \"c\",\n] # after\n",
			wrapped: "[mcp_servers.x]\ncommand = \"mcptrace\"\nargs = [ # what it runs\n  \"exec\", \"--session\", \"x\", \"--\", \"a\", \"b\", # first\n  \"c\",\n] # after\n"},
		{name: "an empty list is written whole; unwrapping leaves no args",
			in:        "[mcp_servers.x]\ncommand = \"a\"\nargs = []\n",
			wrapped:   "[mcp_servers.x]\ncommand = \"mcptrace\"\nargs = [\"exec\", \"--session\", \"x\", \"--\", \"a\"]\n",
			unwrapped: "[mcp_servers.x]\ncommand = \"a\"\n"},
		{name: "an args line with a comment unwraps to an empty list, keeping the comment",
			in:        "[mcp_servers.x]\ncommand = \"a\"\nargs = [] # none\n",
			wrapped:   "[mcp_servers.x]\ncommand = \"mcptrace\"\nargs = [\"exec\", \"--session\", \"x\", \"--\", \"a\"] # none\n",
			unwrapped: "[mcp_servers.x]\ncommand = \"a\"\nargs = [] # none\n"},
		{name: "names that are not session IDs, and strings TOML must escape",
			in:      "[mcp_servers.\"my docs\"]\ncommand = \"npx\"\n[mcp_servers.'@acme/x']\ncommand = \"say \\\"hi\\\"\"\n",
			wrapped: "[mcp_servers.\"my docs\"]\ncommand = \"mcptrace\"\nargs = [\"exec\", \"--session\", \"my-docs\", \"--\", \"npx\"]\n[mcp_servers.'@acme/x']\ncommand = \"mcptrace\"\nargs = [\"exec\", \"--session\", \"mcp-@acme-x\", \"--\", \"say \\\"hi\\\"\"]\n"},
		{name: "servers over HTTP, other tables and a file without servers are left alone",
			in:      "[mcp_servers.web]\nurl = \"https://x/mcp\"\n[mcp_servers.t]\ntype = \"sse\"\ncommand = \"x\"\n[projects.\"/home/u/app\"]\ntrust_level = \"trusted\"\n",
			wrapped: "[mcp_servers.web]\nurl = \"https://x/mcp\"\n[mcp_servers.t]\ntype = \"sse\"\ncommand = \"x\"\n[projects.\"/home/u/app\"]\ntrust_level = \"trusted\"\n"},
	} {
		t.Run(tc.name, func(t *testing.T) { wrapsInPlace(t, TOML, tc.in, tc.wrapped, tc.unwrapped) })
	}
}

// What Wrap or Unwrap cannot do safely it refuses, naming the server and
// what to change, and gives no file.
func TestTOMLRefusesWhatItCannotEditSafely(t *testing.T) {
	for _, tc := range []struct {
		name   string
		unwrap bool
		in     string
		says   string
	}{
		{name: "a file that does not parse", in: "[mcp_servers.x\ncommand = \"a\"\n", says: "not a TOML configuration"},
		{name: "a key twice", in: "[mcp_servers.x]\ncommand = \"a\"\ncommand = \"b\"\n", says: "not a TOML configuration"},
		{name: "a table twice", in: "[mcp_servers.x]\ncommand = \"a\"\n[mcp_servers.x]\nargs = []\n", says: "not a TOML configuration"},
		{name: "mcp_servers that is not a table", in: "mcp_servers = [\"a\"]\n", says: "mcp_servers is not a table"},
		{name: "a command that is not a string", in: "[mcp_servers.x]\ncommand = 3\n", says: "mcp_servers.x: command is not a program name"},
		{name: "an empty command", in: "[mcp_servers.x]\ncommand = \"\"\n", says: "mcp_servers.x: command is not a program name"},
		{name: "args that are not strings", in: "[mcp_servers.x]\ncommand = \"a\"\nargs = [\"b\", 1]\n", says: "mcp_servers.x: args is not a list of strings"},
		{name: "args that are one string", in: "[mcp_servers.x]\ncommand = \"a\"\nargs = \"-y b\"\n", says: "mcp_servers.x: args is not a list of strings"},
		{name: "a comment in an empty list", in: "[mcp_servers.x]\ncommand = \"a\"\nargs = [ # none yet\n]\n", says: "mcp_servers.x: args has comments inside its list"},
		{name: "comments among the arguments Unwrap removes", unwrap: true,
			in:   "[mcp_servers.x]\ncommand = \"mcptrace\"\nargs = [\"exec\", # sub-session\n  \"--session\", \"x\", \"--\", \"a\", \"b\"]\n",
			says: "mcp_servers.x: args has comments among the mcptrace exec arguments"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out []byte
			var err error
			if tc.unwrap {
				out, _, err = Unwrap(TOML, []byte(tc.in))
			} else {
				out, _, err = Wrap(TOML, []byte(tc.in), "mcptrace")
			}
			if err == nil || out != nil || !strings.Contains(err.Error(), tc.says) {
				t.Errorf("gave %q, %v; want a refusal saying %q", out, err, tc.says)
			}
		})
	}
}

func TestTOMLStringReadsBackAsTheSameString(t *testing.T) {
	for _, s := range []string{"", "npx", `C:\Program Files\x.exe`, `say "hi"`, "tab\there", "new\nline\r", "\x00\x1f\x7f", "é€😀", "'"} {
		var v struct{ S string }
		if err := toml.Unmarshal([]byte("S = "+tomlString(s)), &v); err != nil || v.S != s {
			t.Errorf("tomlString(%q) = %s reads back as %q (%v)", s, tomlString(s), v.S, err)
		}
	}
}
