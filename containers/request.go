package containers

import (
	"regexp"
	"strings"
)

// Verbs of the engine API requests that start a container: a client
// that sends one for a container ID is what started it (docker run,
// docker start, docker compose run, docker restart).
const (
	VerbStart   = "start"
	VerbRestart = "restart"
)

// request is an engine API request line that starts a container:
// `POST [/v1.41]/containers/<64 hex>/start[?…] HTTP/1.1`. The version
// segment is optional (clients that do not negotiate send none).
var request = regexp.MustCompile(`^POST (?:/v[0-9]{1,2}\.[0-9]{1,3})?/containers/([0-9a-f]{64})/(start|restart)[? ]`)

// ParseRequest reads the first bytes a container client sent to an
// engine (lineage.Event.Request as the kernel read them) and returns the
// container the request starts and its verb. ok is false for every other
// request (create, attach, wait, anything else), which callers drop
// unread: only a start names a container its sender is responsible for.
func ParseRequest(line string) (id, verb string, ok bool) {
	m := request.FindStringSubmatch(line)
	if m == nil {
		return "", "", false
	}
	return m[1], m[2], true
}

// Request is the canonical form of a request ParseRequest accepts: what
// the agent keeps and journals instead of the bytes the client sent
// (query strings and whatever else the line held are never kept).
func Request(id, verb string) string {
	var b strings.Builder
	b.WriteString("POST /containers/")
	b.WriteString(id)
	b.WriteString("/")
	b.WriteString(verb)
	b.WriteString(" ")
	return b.String()
}
