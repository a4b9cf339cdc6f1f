package api

import (
	"strings"
	"testing"
)

// A socket path on Windows is a local named pipe's, \\.\pipe\NAME, at
// most 256 characters as Windows counts them; anything else is refused,
// saying why.
func TestPipePathsAreLocalPipeNamesOnly(t *testing.T) {
	for _, tc := range []struct {
		name, path, err string
	}{
		{"the default", `\\.\pipe\mcptrace`, ""},
		{"prefix in any case", `\\.\PIPE\mcptrace`, ""},
		{"longest", `\\.\pipe\` + strings.Repeat("p", MaxPipePath-len(pipePrefix)), ""},
		{"one character too long", `\\.\pipe\` + strings.Repeat("p", MaxPipePath-len(pipePrefix)+1), "at most 256 characters"},
		// U+1F600 is two UTF-16 characters.
		{"too long in UTF-16", `\\.\pipe\` + strings.Repeat("p", MaxPipePath-len(pipePrefix)-1) + "\U0001F600", "got 257"},
		{"a unix socket path", "/run/mcptrace/mcptrace.sock", "must be a named pipe path"},
		{"a file", `C:\mcptrace.sock`, "must be a named pipe path"},
		{"another machine's pipe", `\\server\pipe\mcptrace`, "must be a named pipe path"},
		{"no name", `\\.\pipe\`, "must name the pipe"},
		{"a backslash in the name", `\\.\pipe\a\b`, "no backslash"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkPipePath(tc.path)
			if tc.err == "" && err != nil || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
				t.Errorf("checkPipePath(%q) = %v, want %q", tc.path, err, tc.err)
			}
		})
	}
}

// The default socket is one the configuration accepts, on every system.
func TestDefaultSocketIsAValidSocketPath(t *testing.T) {
	if err := CheckSocketPath(DefaultSocket); err != nil {
		t.Errorf("CheckSocketPath(%q): %v", DefaultSocket, err)
	}
}
