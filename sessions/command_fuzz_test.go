package sessions

import (
	"slices"
	"strings"
	"testing"
)

// FuzzParseCommand feeds the command-line reader what any user may exec:
// argv joined by NUL bytes. It must never panic, and what it reads must be
// in the line: a tag or marker only from an argv[0] naming mcptrace (on
// either system: /usr/bin/mcptrace, C:\Tools\McpTrace.exe), a
// session ID only from an argv element, a tag only before a "--" that is
// followed by a command.
func FuzzParseCommand(f *testing.F) {
	for _, s := range []string{
		"mcptrace\x00run\x00--session\x00s1\x00--\x00node",
		"mcptrace\x00--config\x00F\x00run\x00--session\x00S\x00--\x00cmd",
		"mcptrace\x00mark\x00--session\x00b\x00destroy",
		"mcptrace\x00mark\x00destroy\x00--kernel-only=true\x00--session=x",
		"/usr/bin/mcptrace\x00exec\x00--session=\x00--\x00x",
		"mcptrace\x00-h\x00run\x00--\x00x",
		"mcptrace\x00run\x00--session",
		"C:\\Tools\\McpTrace.EXE\x00run\x00--session\x00w\x00--\x00node.exe",
		"mCptrACe\x000000000", // the name in any case: the CLI, read as no tag
	} {
		f.Add(s, false)
		f.Add(s, true)
	}
	f.Fuzz(func(t *testing.T, line string, truncated bool) {
		argv := strings.Split(line, "\x00")
		if len(argv) > 64 {
			argv = argv[:64] // the kernel captures a bounded argv
		}
		c := parseCommand(argv, truncated)
		if !IsCLI(argv[0]) {
			if c != (command{}) {
				t.Fatalf("%q read as %+v", argv, c)
			}
			return
		}
		if c.kind == cmdNone {
			t.Fatalf("%q: the mcptrace CLI read as not the CLI", argv)
		}
		if c != parseCommand(slices.Clone(argv), truncated) {
			t.Fatalf("%q: read two ways", argv)
		}
		if c.kind < cmdRun {
			if c.id != "" || c.bad {
				t.Fatalf("%q: not a tag nor a marker, yet %+v", argv, c)
			}
			return
		}
		if c.id != "" && !slices.ContainsFunc(argv[1:], func(a string) bool { return a == c.id || a == "--session="+c.id }) {
			t.Fatalf("%q: session %q is no argv element", argv, c.id)
		}
		if c.idLast && !strings.HasSuffix(argv[len(argv)-1], c.id) {
			t.Fatalf("%q: idLast, but the session %q is not last", argv, c.id)
		}
		if (c.kind == cmdRun || c.kind == cmdExec) && !truncated && !c.bad {
			i := slices.Index(argv, "--")
			if i < 0 || i == len(argv)-1 {
				t.Fatalf("%q: a tag with no command after --", argv)
			}
		}
		if c.kind == cmdExec && c.id == "" && !c.bad {
			t.Fatalf("%q: exec without an ID not marked bad", argv)
		}
	})
}
