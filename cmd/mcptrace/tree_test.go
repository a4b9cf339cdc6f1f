package main

import (
	"strings"
	"testing"
	"time"

	"github.com/mcptrace/mcptrace/api"
	"github.com/mcptrace/mcptrace/lineage"
	"github.com/mcptrace/mcptrace/sessions"
)

// A session from the history says when its markers fell and when it
// ended as times; a live one says how long ago.
func TestEndingsFromTheHistoryAreTimes(t *testing.T) {
	const sec = uint64(time.Second)
	d := api.SessionDetail{Now: 1000 * sec}
	d.Session.ID, d.Session.EndReason, d.Session.EndedAt = "claude-1", "root-exit", 940*sec
	d.Session.State = sessions.Ended
	d.Endings = []api.Ending{
		{Marker: &sessions.Marker{Ended: 1, At: 938 * sec, Via: "exec", Sender: lineage.ID{PID: 77}}, Enforcement: &api.Enforcement{Killed: 2}},
		{Enforcement: &api.Enforcement{Killed: 1}},
	}
	var live strings.Builder
	printEndings(&live, d, nil)
	if !strings.Contains(live.String(), "1m2s ago") {
		t.Errorf("a live session's marker is not said as how long ago:\n%s", live.String())
	}
	recorded := time.Date(2026, 11, 26, 9, 30, 0, 0, time.Local) // 14 minutes and more before any now
	var past strings.Builder
	printEndings(&past, d, wallClock(recorded, d.Now))
	for _, want := range []string{"exec, from pid 77 uid 0, at 2026-11-26 09:28:58) ended generation 1", "session claude-1 ended (root-exit, at 2026-11-26 09:29:00)"} {
		if !strings.Contains(past.String(), want) {
			t.Errorf("the history's endings lack %q:\n%s", want, past.String())
		}
	}
	if strings.Contains(past.String(), "ago") {
		t.Errorf("the history's endings say \"ago\" (from the recording):\n%s", past.String())
	}
}
