package containers

import (
	"strings"
	"testing"
)

func TestParseRequestAcceptsOnlyRequestsThatStartAContainer(t *testing.T) {
	const id = "3f1c9a3b1e2d4c5f6a7b8c9d0e1f2a3b4c5d6e7f8091a2b3c4d5e6f708192a3b"
	for _, tc := range []struct {
		name, line, verb string
		ref              string // what the request names, when not id
	}{
		{"a negotiated start", "POST /v1.41/containers/" + id + "/start HTTP/1.1\r\nHost: api.moby.localhost\r\n", VerbStart, ""},
		{"an unversioned start", "POST /containers/" + id + "/start HTTP/1.1\r\n", VerbStart, ""},
		{"a start with a query", "POST /v1.50/containers/" + id + "/start?checkpoint=x HTTP/1.1", VerbStart, ""},
		{"a restart", "POST /v1.41/containers/" + id + "/restart?t=1 HTTP/1.1", VerbRestart, ""},
		{"the canonical form", Request(id, VerbStart), VerbStart, ""},
		{"create names no container yet", "POST /v1.41/containers/create?name=x HTTP/1.1", "", ""},
		{"attach is not a start", "POST /v1.41/containers/" + id + "/attach?stream=1 HTTP/1.1", "", ""},
		{"wait is not a start", "POST /v1.41/containers/" + id + "/wait?condition=removed HTTP/1.1", "", ""},
		// docker start NAME and docker start SHORTID send what the user
		// typed; the agent resolves it through the engine.
		{"a start by name", "POST /v1.41/containers/svc/start HTTP/1.1", VerbStart, "svc"},
		{"a start by a name with dots, dashes and underscores", "POST /v1.41/containers/my_app.db-1/start HTTP/1.1", VerbStart, "my_app.db-1"},
		{"a start by a short ID", "POST /v1.41/containers/3f1c9a3b1e2d/start HTTP/1.1", VerbStart, "3f1c9a3b1e2d"},
		{"upper-case hex is a name", "POST /v1.41/containers/" + "3F1C9A3B1E2D4C5F6A7B8C9D0E1F2A3B4C5D6E7F8091A2B3C4D5E6F708192A3B" + "/start HTTP/1.1", VerbStart, "3F1C9A3B1E2D4C5F6A7B8C9D0E1F2A3B4C5D6E7F8091A2B3C4D5E6F708192A3B"},
		{"a longer hex string is a name", "POST /v1.41/containers/" + id + "0/start HTTP/1.1", VerbStart, id + "0"},
		{"a one-character name is none", "POST /v1.41/containers/x/start HTTP/1.1", "", ""},
		{"a name starting with a dot is none", "POST /v1.41/containers/.x/start HTTP/1.1", "", ""},
		{"an escaped name is none", "POST /v1.41/containers/a%2F..%2Fb/start HTTP/1.1", "", ""},
		{"a path segment of dots is none", "POST /v1.41/containers/../start HTTP/1.1", "", ""},
		{"a GET is not a start", "GET /v1.41/containers/" + id + "/start HTTP/1.1", "", ""},
		{"a start cut before its end is unsure", "POST /v1.41/containers/" + id + "/sta", "", ""},
		{"a start cut right after its verb is unsure", "POST /v1.41/containers/" + id + "/start", "", ""},
		{"a verb with a suffix is another verb", "POST /v1.41/containers/" + id + "/startx HTTP/1.1", "", ""},
		{"a path below the start is another request", "POST /v1.41/containers/" + id + "/start/x HTTP/1.1", "", ""},
		{"text before the method", "xPOST /v1.41/containers/" + id + "/start HTTP/1.1", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gotID, verb, ok := ParseRequest(tc.line)
			if ok != (tc.verb != "") || verb != tc.verb {
				t.Fatalf("ParseRequest(%q) = %q, %q, %v; want verb %q", tc.line, gotID, verb, ok, tc.verb)
			}
			want := tc.ref
			if want == "" {
				want = id
			}
			if ok && gotID != want {
				t.Fatalf("ParseRequest(%q) names %q, want %q", tc.line, gotID, want)
			}
		})
	}
}

// FuzzParseRequest: whatever bytes a client sends, a request accepted
// names a valid reference (nothing that leaves its URL path segment) and
// a start verb, and its canonical form (what is
// journaled) parses back to the same.
func FuzzParseRequest(f *testing.F) {
	f.Add("POST /v1.41/containers/" + "3f1c9a3b1e2d4c5f6a7b8c9d0e1f2a3b4c5d6e7f8091a2b3c4d5e6f708192a3b" + "/start HTTP/1.1\r\n")
	f.Add("POST /containers/create HTTP/1.1")
	f.Add("")
	f.Fuzz(func(t *testing.T, line string) {
		id, verb, ok := ParseRequest(line)
		if !ok {
			return
		}
		if !ValidRef(id) || strings.ContainsAny(id, "/%?#") || verb != VerbStart && verb != VerbRestart {
			t.Fatalf("ParseRequest(%q) = %q %q", line, id, verb)
		}
		id2, verb2, ok2 := ParseRequest(Request(id, verb))
		if !ok2 || id2 != id || verb2 != verb {
			t.Fatalf("canonical form of %q does not parse back: %q %q %v", line, id2, verb2, ok2)
		}
	})
}
