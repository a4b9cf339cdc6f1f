package api

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/mcptrace/mcptrace/lineage"
)

// Anyone sees the orphans of their own uid and totals over those only;
// root sees every uid's. Command lines are redacted for everyone unless
// root asks for them raw.
func TestOrphansAreTheCallersOwnAndRedacted(t *testing.T) {
	w := newWorld(t)
	init1 := lineage.ID{PID: 1}
	rootHost := w.spawn(init1, 100, 0, "claude")
	npx := w.spawn(rootHost, 101, 0, "npx", "-y", "@acme/server-root", "--token=ROOTSECRET")
	w.spawn(npx, 102, 0, "node", "/root/.npm/_npx/1/node_modules/@acme/server-root/index.js", "--token=ROOTSECRET")
	userHost := w.spawn(init1, 200, nobody, "codex")
	unpx := w.spawn(userHost, 201, nobody, "npx", "-y", "@acme/server-user", "--api-key=USERSECRET")
	w.spawn(unpx, 202, nobody, "node", "/home/u/.npm/_npx/1/node_modules/@acme/server-user/index.js", "--api-key=USERSECRET")
	caller := w.spawn(init1, 300, nobody, "sh")
	rootCaller := w.spawn(init1, 301, 0, "sh")

	list := func(c Caller, target string) (OrphanList, string) {
		t.Helper()
		code, body := w.request(c, "GET", target, "")
		if !statusOK(code) {
			t.Fatalf("GET %s: %d %s", target, code, body)
		}
		var l OrphanList
		if err := json.Unmarshal([]byte(body), &l); err != nil {
			t.Fatal(err)
		}
		return l, body
	}
	l, body := list(callerOf(caller, nobody), "/v1/orphans?raw=1")
	if len(l.Orphans) != 1 || l.Orphans[0].Name != "@acme/server-user" || l.Totals.Servers != 1 {
		t.Errorf("nobody sees %+v, want its own server only", l)
	}
	if strings.Contains(body, "SECRET") || strings.Contains(body, "server-root") {
		t.Errorf("nobody's answer shows a secret or root's server: %s", body)
	}
	l, body = list(callerOf(rootCaller, 0), "/v1/orphans")
	if len(l.Orphans) != 2 || l.Totals.Servers != 2 || strings.Contains(body, "SECRET") {
		t.Errorf("root sees %d orphans (totals %+v), want both redacted: %s", len(l.Orphans), l.Totals, body)
	}
	_, body = list(callerOf(rootCaller, 0), "/v1/orphans?raw=1")
	if !strings.Contains(body, "ROOTSECRET") {
		t.Errorf("root asked for raw command lines and did not get them: %s", body)
	}
}
