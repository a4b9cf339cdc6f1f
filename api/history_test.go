//go:build !windows

// Not on Windows: the history journal is Linux's for now (it syncs its
// directory, which Windows refuses, and wine 8 cannot remove a test's
// temporary directory).

package api

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/mcptrace/mcptrace/enforcer"
	"github.com/mcptrace/mcptrace/history"
	"github.com/mcptrace/mcptrace/lineage"
	"github.com/mcptrace/mcptrace/sessions"
)

// pastStart is the wall time the past sessions began at; their boot
// times start at pastBoot.
var pastStart = time.Date(2026, 11, 25, 9, 0, 0, 0, time.UTC)

const pastBoot = 1000 * sec

// pastJournal is a history holding three ended sessions the agent no
// longer has: root's "past" (a member with ROOTSECRET in its argv, a
// kill record with HOSTSECRET), uid 1000's "mine", and uid 1000's
// "legacy", recorded without the pid index (as before it). The argv are not
// redacted, so that any leak across uids shows.
func pastJournal(t testing.TB) *history.Journal {
	t.Helper()
	j, err := history.Open(history.Options{Dir: t.TempDir(), BootID: "boot", Now: func() time.Time { return pastStart.Add(time.Hour) },
		BootNow: func() uint64 { return pastBoot + uint64(time.Hour) }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.Close() })
	put := func(owner uint32, id string, pid uint32, argv ...string) {
		root := lineage.ID{PID: pid, Start: pastBoot}
		child := lineage.ID{PID: pid + 1, Start: pastBoot + sec}
		rec := SessionRecord{
			Now:     pastBoot + 10*sec,
			Session: sessions.Session{ID: id, Tag: id, Root: root, Owner: owner, Origin: "run", State: sessions.Ended, Began: pastBoot, EndedAt: pastBoot + 5*sec, EndReason: "root-exit"},
			Members: []lineage.Process{
				{ID: root, UID: owner, Comm: "host", Exited: true, ExitTime: pastBoot + 5*sec, Images: []lineage.Image{{Argv: []string{"host"}, UID: owner}}},
				{ID: child, Creator: root, UID: owner, Comm: argv[0], Exited: true, ExitTime: pastBoot + 6*sec, Signal: 15, Images: []lineage.Image{{Time: pastBoot + sec, Argv: argv, UID: owner}}},
			},
			Generations: []uint32{0, 1},
			Reports:     map[uint32]enforcer.Report{0: {Session: id, Owner: owner, Killed: 1}},
			Records:     []enforcer.KillRecord{{Session: id, Owner: owner, Process: child, UID: owner, Comm: argv[0], Argv: append([]string{"--key=HOSTSECRET"}, argv...), Signal: "SIGTERM", Result: enforcer.ResultKilled, At: pastStart.Add(5 * time.Second)}},
		}
		b, err := json.Marshal(rec)
		if err != nil {
			t.Fatal(err)
		}
		hs := history.Session{Owner: owner, ID: id, Began: pastStart, Ended: pastStart.Add(5 * time.Second), Members: 2, Killed: 1, Written: pastStart.Add(10 * time.Second), Detail: b}
		if id != "legacy" { // a record written before the pid index has none
			hs.PIDs = []uint32{pid, pid + 1}
		}
		j.PutSession(hs)
	}
	put(0, "past", 500, "mysql", "-pROOTSECRET")
	put(1000, "mine", 600, "node", "server.js")
	put(1000, "legacy", 700, "python3", "worker.py")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := j.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	return j
}

func get(t *testing.T, w *world, uid uint32, path string) (int, string) {
	t.Helper()
	return getAs(w, callerOf(w.spawn(init1, 200+uid%1000, uid, "sh"), uid), path)
}

// getAs is a GET of path by caller c, through the API's handler.
func getAs(w *world, c Caller, path string) (int, string) {
	req := httptest.NewRequest(http.MethodGet, "http://mcptrace"+path, nil)
	req = req.WithContext(context.WithValue(req.Context(), callerKey{}, c))
	rec := httptest.NewRecorder()
	w.s.handler().ServeHTTP(rec, req)
	b, _ := io.ReadAll(rec.Body)
	return rec.Code, string(b)
}

// TestHistoryAnswersAreNarrowedToTheCaller: past sessions go through
// the narrowing of live ones; another uid's answers as absent.
func TestHistoryAnswersAreNarrowedToTheCaller(t *testing.T) {
	w := newWorld(t)
	j := pastJournal(t)
	w.s.History = func() (*history.Journal, error) { return j, nil }
	_, unknown := get(t, w, 1000, "/v1/sessions/nosuch")
	at := rfc3339(pastStart.Add(2 * time.Second))
	for _, tc := range []struct {
		name       string
		uid        uint32
		path       string
		code       int
		has, hasnt []string
	}{
		{"root lists every owner's sessions", 0, "/v1/history", 200, []string{`"id":"past"`, `"id":"mine"`}, nil},
		{"a user lists its own sessions only", 1000, "/v1/history", 200, []string{`"id":"mine"`}, []string{`"past"`}},
		{"a user naming another owner lists nothing", 1000, "/v1/history?owner=0", 200, []string{`"sessions":[]`}, []string{`"past"`}},
		// The history's clock is an hour past the session's end: a
		// session that ended an hour ago, with its dead members and kills.
		{"a user sees its own session that ended an hour ago", 1000, "/v1/sessions/mine", 200,
			[]string{`"recorded":`, "server.js", `"exited":true`, `"result":"killed"`, `"state":"ended"`}, nil},
		{"another owner's past session answers as absent", 1000, "/v1/sessions/past?owner=0", 404, nil, []string{"ROOTSECRET", "HOSTSECRET", "mysql"}},
		{"root sees a past session redacted", 0, "/v1/sessions/past", 200, []string{"mysql", `"recorded":`}, []string{"ROOTSECRET", "HOSTSECRET"}},
		{"a past session by time", 1000, "/v1/sessions/mine?at=" + at, 200, []string{"server.js"}, nil},
		{"a past session at a time it did not exist", 1000, "/v1/sessions/mine?at=" + rfc3339(pastStart.Add(-time.Hour)), 404, nil, nil},
		{"a user's own process at a past time", 1000, "/v1/tree/600?at=" + at, 200, []string{`"pid":600`, `"pid":601`}, nil},
		{"another owner's process at a past time", 1000, "/v1/tree/500?at=" + at, 404, nil, []string{"mysql"}},
		{"a process found through the pid index below its root", 1000, "/v1/tree/601?at=" + at, 200, []string{`"processes":[{"id":{"pid":601`}, nil},
		{"a process of a record without the index", 1000, "/v1/tree/701?at=" + at, 200, []string{`"pid":701`, "worker.py"}, nil},
		{"a bad time is refused and says what it wants", 1000, "/v1/history?from=yesterday", 400, []string{"2026-11-26T09:30:00Z"}, nil},
		{"a limit beyond the bound is refused", 0, "/v1/history?limit=100000", 400, nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body := get(t, w, tc.uid, tc.path)
			if code != tc.code {
				t.Fatalf("%s as uid %d: %d, want %d: %s", tc.path, tc.uid, code, tc.code, body)
			}
			for _, s := range tc.has {
				if !strings.Contains(body, s) {
					t.Errorf("answer lacks %s: %s", s, body)
				}
			}
			for _, s := range tc.hasnt {
				if strings.Contains(body, s) {
					t.Errorf("answer shows %s: %s", s, body)
				}
			}
			if code == 404 && strings.HasPrefix(tc.path, "/v1/sessions/past") && strings.ReplaceAll(body, "past", "nosuch") != unknown {
				t.Errorf("the refusal %q differs from the answer for an unknown session %q", body, unknown)
			}
		})
	}
}

func rfc3339(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// TestHistoryRequestsAreBoundedPerUID: a user with historyPerUID history
// requests running gets 429 for the next, counted, whichever history
// endpoint it asks; another user and root still get their answers; a
// finished request gives its slot back.
func TestHistoryRequestsAreBoundedPerUID(t *testing.T) {
	w := newWorld(t)
	j := pastJournal(t)
	w.s.History = func() (*history.Journal, error) { return j, nil }
	at := rfc3339(pastStart.Add(2 * time.Second))
	var held []func()
	for range historyPerUID {
		release, ok := w.s.histWork.take(httptest.NewRecorder(), Caller{UID: 1000})
		if !ok {
			t.Fatal("a slot of uid 1000's was refused before its bound")
		}
		held = append(held, release)
	}
	for _, path := range []string{"/v1/history", "/v1/sessions/mine", "/v1/sessions/mine?at=" + at, "/v1/tree/600?at=" + at} {
		if code, body := get(t, w, 1000, path); code != http.StatusTooManyRequests || !strings.Contains(body, "too many history requests") {
			t.Errorf("%s with uid 1000's slots taken: %d %s", path, code, body)
		}
	}
	if n := w.s.apiStatus().RefusedHistoryBusy; n != 4 {
		t.Errorf("refused_history_busy_total %d, want 4", n)
	}
	if code, body := get(t, w, 1001, "/v1/history"); code != 200 {
		t.Errorf("uid 1001 was refused while uid 1000 held its slots: %d %s", code, body)
	}
	if code, body := get(t, w, 0, "/v1/tree/500?at="+at); code != 200 {
		t.Errorf("root was refused: %d %s", code, body)
	}
	held[0]()
	if code, body := get(t, w, 1000, "/v1/tree/600?at="+at); code != 200 {
		t.Errorf("uid 1000 with a slot given back: %d %s", code, body)
	}
	held[1]()
	// All users together: historyTotal.
	for uid := range uint32(historyTotal) {
		release, ok := w.s.histWork.take(httptest.NewRecorder(), Caller{UID: 2000 + uid})
		if !ok {
			t.Fatalf("slot %d of all users refused", uid)
		}
		defer release()
	}
	if code, _ := get(t, w, 1000, "/v1/history"); code != http.StatusTooManyRequests {
		t.Errorf("with every user's slot taken: %d, want 429", code)
	}
}
