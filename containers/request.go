package containers

import (
	"regexp"
	"strings"
)

// Verbs of the engine API requests that start a container: a client
// that sends one for a container is what started it (docker run,
// docker start, docker compose run, docker restart).
const (
	VerbStart   = "start"
	VerbRestart = "restart"
)

// MaxRefBytes bounds a container reference a request may carry: the
// kernel reads 128 bytes of a request line, so no longer one fits.
const MaxRefBytes = 128

// request is an engine API request line that starts a container:
// `POST [/v1.41]/containers/<ref>/start[?…] HTTP/1.1`, where ref is a
// full ID (docker run, compose), or what a user typed after `docker
// start`: a name or an ID prefix. The version segment is optional
// (clients that do not negotiate send none).
var request = regexp.MustCompile(`^POST (?:/v[0-9]{1,2}\.[0-9]{1,3})?/containers/([a-zA-Z0-9][a-zA-Z0-9_.-]{1,127})/(start|restart)[? ]`)

// ParseRequest reads the first bytes a container client sent to an
// engine (lineage.Event.Request as the kernel read them) and returns the
// container the request starts, as the request names it (ValidRef: a
// full ID, a name or an ID prefix), and its verb. ok is false for every
// other request (create, attach, wait, anything else), which callers
// drop unread: only a start names a container its sender is responsible
// for.
func ParseRequest(line string) (ref, verb string, ok bool) {
	m := request.FindStringSubmatch(line)
	if m == nil {
		return "", "", false
	}
	return m[1], m[2], true
}

// ValidRef reports whether s may name a container in a request the
// agent keeps and in a URL path it sends: a full ID, or a name or ID
// prefix as the engine accepts them (`[a-zA-Z0-9][a-zA-Z0-9_.-]+`, the
// engine's own rule for names), at most MaxRefBytes. Nothing in it can
// leave its path segment ("/", "%", "?" and ".." alone cannot occur).
func ValidRef(s string) bool {
	if len(s) < 2 || len(s) > MaxRefBytes || !isAlnum(s[0]) {
		return false
	}
	for i := 1; i < len(s); i++ {
		if c := s[i]; !isAlnum(c) && c != '_' && c != '.' && c != '-' {
			return false
		}
	}
	return true
}

func isAlnum(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
}

// Request is the canonical form of a request ParseRequest accepts: what
// the agent keeps and journals instead of the bytes the client sent
// (query strings and whatever else the line held are never kept).
func Request(ref, verb string) string {
	var b strings.Builder
	b.WriteString("POST /containers/")
	b.WriteString(ref)
	b.WriteString("/")
	b.WriteString(verb)
	b.WriteString(" ")
	return b.String()
}
