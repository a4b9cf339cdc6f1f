package api

import (
	"encoding/json"
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/mcptrace/mcptrace/enforcer"
	"github.com/mcptrace/mcptrace/lineage"
	"github.com/mcptrace/mcptrace/sessions"
)

// A session the caller may not act on answers exactly like one that does
// not exist: same status, same body but for the ID asked, nothing about
// its owner or root.
func TestRefusedSessionAnswersLikeAMissingOne(t *testing.T) {
	w := newWorld(t)
	host := w.spawn(init1, 100, 0, "gateway")
	w.begin(host, "victim")
	attacker := w.spawn(init1, 200, nobody, "sh")
	c := callerOf(attacker, nobody)
	for _, tc := range []struct {
		name, method, path, body string
	}{
		{"get", http.MethodGet, "/v1/sessions/%s", ""},
		{"end", http.MethodPost, "/v1/sessions/%s/end", "{}"},
		{"mark", http.MethodPost, "/v1/mark", `{"session":"%s"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ask := func(id string) (int, string) {
				body := tc.body
				if strings.Contains(body, "%s") {
					body = fmt.Sprintf(body, id)
				}
				path := tc.path
				if strings.Contains(path, "%s") {
					path = fmt.Sprintf(path, id)
				}
				code, out := w.request(c, tc.method, path, body)
				return code, strings.ReplaceAll(out, id, "ID")
			}
			code1, body1 := ask("victim")
			code2, body2 := ask("nosuch")
			if code1 != code2 || body1 != body2 {
				t.Errorf("refused: %d %s\nmissing: %d %s", code1, body1, code2, body2)
			}
			for _, leak := range []string{"owner", "uid 0", "100", "root pid"} {
				if strings.Contains(body1, leak) {
					t.Errorf("refusal tells %q: %s", leak, body1)
				}
			}
		})
	}
	if s, _ := w.tr.Find("victim"); s.State.String() != "active" {
		t.Errorf("the victim's session ended: %+v", s)
	}
}

// The owner of a session sees and counts only the members and kill
// records of its own uid; root sees all of them.
func TestSessionDetailShowsOnlyTheCallersMembersAndKills(t *testing.T) {
	w := newWorld(t)
	host := w.spawn(init1, 100, nobody, "agent")
	w.begin(host, "mine")
	own := w.spawn(host, 101, nobody, "node", "server.js")
	helper := w.spawn(host, 102, nobody, "sudo", "apt-get")
	w.exec(helper, 0, "apt-get", "upgrade", "--password=ROOTSECRET")
	enf := &enforcer.Enforcer{}
	enf.AddRecords([]enforcer.KillRecord{
		{Session: "mine", Owner: nobody, Process: own, UID: nobody, Comm: "node", Argv: []string{"node", "server.js"}, Result: enforcer.ResultKilled, At: time.Unix(1, 0)},
		{Session: "mine", Owner: nobody, Process: helper, UID: 0, Comm: "apt-get", Argv: []string{"apt-get", "upgrade"}, Result: enforcer.ResultKilled, At: time.Unix(1, 0)},
	})
	w.s.Enforcer = enf
	for _, tc := range []struct {
		name          string
		c             Caller
		members, kill int
		apt           bool
	}{
		{"owner", callerOf(host, nobody), 2, 1, false},
		{"root", Caller{UID: 0}, 3, 2, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body := w.request(tc.c, http.MethodGet, "/v1/sessions/mine", "")
			if code != http.StatusOK {
				t.Fatalf("%d %s", code, body)
			}
			if want := fmt.Sprintf(`"members":%d,`, tc.members); !strings.Contains(body, want) {
				t.Errorf("detail lacks %s: %s", want, body)
			}
			if want := fmt.Sprintf(`"killed":%d`, tc.kill); !strings.Contains(body, want) {
				t.Errorf("detail lacks %s: %s", want, body)
			}
			if strings.Contains(body, "apt-get") != tc.apt {
				t.Errorf("apt-get shown: %v, want %v: %s", !tc.apt, tc.apt, body)
			}
			if strings.Contains(body, "ROOTSECRET") {
				t.Errorf("secret shown: %s", body)
			}
			_, list := w.request(tc.c, http.MethodGet, "/v1/sessions", "")
			if want := fmt.Sprintf(`"members":%d,"alive":%d,"killed":%d`, tc.members, tc.members, tc.kill); !strings.Contains(list, want) {
				t.Errorf("list lacks %s: %s", want, list)
			}
		})
	}
}

// Argv is redacted by the server for every caller but root, whatever it
// asks; a user sees only the images executed under its own uid (not the
// root-run script before a setpriv, nor the image inherited from a root
// creator); root gets raw argv only when it asks.
func TestNonRootSeesRedactedArgvOfItsOwnImagesOnly(t *testing.T) {
	w := newWorld(t)
	p := w.spawn(init1, 300, 0, "sh", "-c", "mysql -uroot -pROOTSECRET db; exec setpriv --reuid 65534 app")
	w.exec(p, 0, "setpriv", "--reuid", "65534", "app")
	w.exec(p, nobody, "app", "--token=USERSECRET", "--verbose")
	host := w.spawn(init1, 310, 0, "gateway", "--api-key=HOSTSECRET")
	child := w.spawn(host, 311, 0) // runs the host's image, then drops to nobody
	w.exec(child, nobody, "tool", "run")
	for _, tc := range []struct {
		name, query string
		c           Caller
		want, not   []string
	}{
		{"user", "", Caller{UID: nobody}, []string{`"app"`, "--token=<redacted>", `"tool"`},
			[]string{"ROOTSECRET", "setpriv", "USERSECRET", "HOSTSECRET", "gateway", "mysql"}},
		{"user asking raw", "?raw=1", Caller{UID: nobody}, []string{"--token=<redacted>"},
			[]string{"ROOTSECRET", "setpriv", "USERSECRET", "HOSTSECRET"}},
		{"root", "", Caller{UID: 0}, []string{"setpriv", "--token=<redacted>", "--api-key=<redacted>"},
			[]string{"ROOTSECRET", "USERSECRET", "HOSTSECRET"}},
		{"root asking raw", "?raw=1", Caller{UID: 0}, []string{"ROOTSECRET", "USERSECRET", "HOSTSECRET"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, path := range []string{"/v1/processes", "/v1/tree/300", "/v1/ancestors/311"} {
				code, body := w.request(tc.c, http.MethodGet, path+tc.query, "")
				if code != http.StatusOK {
					t.Fatalf("%s: %d %s", path, code, body)
				}
				if path != "/v1/processes" {
					// Each of the other two answers shows one of the processes.
					continue
				}
				for _, s := range tc.want {
					if !strings.Contains(body, s) {
						t.Errorf("%s lacks %q: %s", path, s, body)
					}
				}
				for _, s := range tc.not {
					if strings.Contains(body, s) {
						t.Errorf("%s shows %q: %s", path, s, body)
					}
				}
			}
		})
	}
	// The graph itself keeps every image and its argv.
	if got, _ := w.g.Get(p); len(got.Images) != 4 || got.Images[1].UID != 0 || got.Images[3].UID != nobody {
		t.Errorf("graph images: %+v", got.Images)
	}
}

// Bodies over the limit are refused as too large, on every endpoint that
// reads one, and counted.
func TestOversizedBodyIsRefusedAndCounted(t *testing.T) {
	w := newWorld(t)
	big := `{"session":"` + strings.Repeat("a", 2*maxBody) + `"}`
	for i, path := range []string{"/v1/mark", "/v1/sessions"} {
		code, body := w.request(Caller{UID: nobody}, http.MethodPost, path, big)
		if code != http.StatusRequestEntityTooLarge {
			t.Errorf("%s: %d %s, want 413", path, code, body)
		}
		if got := w.s.oversize.Load(); got != uint64(i+1) {
			t.Errorf("%s: oversize counter %d, want %d", path, got, i+1)
		}
	}
}

var _ = lineage.ID{}

// The tracker's and the enforcer's counters, and the endings under way,
// move with other users' sessions (a refused marker counts differently
// for a session that exists), so only root reads them; the API's own
// counters stay visible.
func TestStatusTellsAnotherUserNothingAboutSessions(t *testing.T) {
	w := newWorld(t)
	w.s.Status = func() Status {
		return Status{Sessions: sessions.Stats{MarkersRefused: 3, MarkersUnmatched: 5}, Enforcer: EnforcerStatus{Killed: 2}, PendingEndings: 4}
	}
	for _, tc := range []struct {
		name   string
		caller Caller
		shown  bool
	}{
		{"root reads the counters", Caller{UID: 0}, true},
		{"another user does not", Caller{UID: nobody}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body := w.request(tc.caller, "GET", "/v1/status", "")
			if code != 200 {
				t.Fatalf("status %d: %s", code, body)
			}
			for _, c := range []string{`"markers_refused_total":3`, `"markers_unmatched_total":5`, `"killed_total":2`, `"pending_endings":4`} {
				if strings.Contains(body, c) != tc.shown {
					t.Errorf("%s in the answer: %v, want %v: %s", c, !tc.shown, tc.shown, body)
				}
			}
		})
	}
}

// A session's owner sees a marker root sent without its sender, and the
// ending's counts only over the members of its own uid.
func TestOwnerSeesNeitherRootsMarkerSenderNorCountsOfOtherUIDs(t *testing.T) {
	w := newWorld(t)
	host := w.spawn(init1, 100, nobody, "agent")
	sess := w.begin(host, "mine")
	own := w.spawn(host, 101, nobody, "node", "server.js")
	helper := w.spawn(host, 102, 0, "apt-get", "upgrade")
	rootTool := w.spawn(init1, 200, 0, "mcptrace")
	w.clock += sec
	if _, res, err := w.tr.Do(sessions.Op{Kind: sessions.OpMark, Caller: rootTool, UID: 0, Session: "mine"}); err != nil || len(res.Actions) == 0 {
		t.Fatalf("root's marker: %+v %v", res, err)
	}
	enf := &enforcer.Enforcer{}
	enf.AddRecords([]enforcer.KillRecord{
		{Session: "mine", Generation: 1, Owner: nobody, Process: own, UID: nobody, Comm: "node", Result: enforcer.ResultKilled},
		{Session: "mine", Generation: 1, Owner: nobody, Process: helper, UID: 0, Comm: "apt-get", Result: enforcer.ResultSparedPrivilege + ": uids"},
	})
	w.s.Enforcer = enf
	w.s.Report = func(key string) (enforcer.Report, bool) {
		return enforcer.Report{Session: sess.ID, Generation: 1, Killed: 1, Spared: 1}, key == sessions.EndingKey(sess, 1)
	}
	_, owner := w.request(Caller{UID: nobody}, "GET", "/v1/sessions/mine", "")
	_, root := w.request(Caller{UID: 0}, "GET", "/v1/sessions/mine", "")
	if !strings.Contains(root, `"sender":{"pid":200`) || !strings.Contains(root, `"spared":1`) {
		t.Errorf("root's answer lacks the sender or the spared count: %s", root)
	}
	if strings.Contains(owner, `"pid":200`) {
		t.Errorf("the owner sees root's marker sender: %s", owner)
	}
	if !strings.Contains(owner, `"killed":1,`) || strings.Contains(owner, `"spared":1`) {
		t.Errorf("the owner's counts include another uid's member (want killed 1, spared 0): %s", owner)
	}
}

// Listing sessions counts their members without copying them: a session
// of 2,000 members, each with a 64-word command line, is listed in under
// 1 MiB of allocations (~0.3 MiB: the answer, sort scratch, the member
// filter's set). The listing used to copy every member, images and argv,
// only to count them, under the tracker's lock (5-7 MiB here, growing
// with every word of every command line).
func TestListingSessionsCopiesNoMemberArgv(t *testing.T) {
	w := newWorld(t)
	host := w.spawn(init1, 100, nobody, "agent")
	w.begin(host, "big")
	argv := append([]string{"node"}, strings.Fields(strings.Repeat("--flag ", 63))...)
	const members = 2000
	for i := range members {
		w.spawn(host, uint32(1000+i), nobody, argv...)
	}
	for _, c := range []Caller{callerOf(host, nobody), {UID: 0}} {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		code, body := w.request(c, http.MethodGet, "/v1/sessions", "")
		runtime.ReadMemStats(&after)
		if code != http.StatusOK || !strings.Contains(body, fmt.Sprintf(`"members":%d,"alive":%d`, members+1, members+1)) {
			t.Fatalf("uid %d: %d %.300s", c.UID, code, body)
		}
		const most = 1 << 20
		if got := after.TotalAlloc - before.TotalAlloc; got > most {
			t.Errorf("uid %d: listing a session of %d members allocated %d KiB, want at most %d KiB",
				c.UID, members+1, got>>10, most>>10)
		}
	}
}

// Session IDs are scoped by owner: another user's session of the same ID,
// asked for with or without ?owner=, answers exactly as an ID nobody has;
// the caller's own ID names its own session; root says whose with
// ?owner= when several users have one, and is told which uids do.
func TestAnotherUsersSessionOfTheSameIDAnswersAsAbsent(t *testing.T) {
	w := newWorld(t)
	victim := w.spawn(init1, 100, other, "agent")
	w.begin(victim, "work")
	mine := w.spawn(init1, 200, nobody, "agent")
	w.begin(mine, "work")
	attacker := w.spawn(init1, 300, nobody, "sh")
	c := callerOf(attacker, nobody)
	absent := func(method, path, body string) {
		t.Helper()
		code1, body1 := w.request(c, method, path, body)
		code2, body2 := w.request(c, method, strings.Replace(path, "work", "nosuch", 1), body)
		if code1 != code2 || strings.ReplaceAll(body1, "work", "ID") != strings.ReplaceAll(body2, "nosuch", "ID") {
			t.Errorf("%s %s: %d %s\nmissing: %d %s", method, path, code1, body1, code2, body2)
		}
	}
	absent(http.MethodGet, "/v1/sessions/work?owner=1000", "")
	absent(http.MethodPost, "/v1/sessions/work/end?owner=1000", "{}")
	if s, _ := w.tr.Get(sessions.Ref{Owner: other, ID: "work"}); s.State != sessions.Active {
		t.Fatalf("uid %d's work ended: %+v", other, s)
	}
	t.Run("the caller's own ID is its own session", func(t *testing.T) {
		code, body := w.request(c, http.MethodGet, "/v1/sessions/work", "")
		if code != http.StatusOK || !strings.Contains(body, `"owner_uid":65534`) || strings.Contains(body, `"owner_uid":1000`) {
			t.Errorf("%d %s", code, body)
		}
	})
	t.Run("root says whose", func(t *testing.T) {
		code, body := w.request(Caller{UID: 0}, http.MethodGet, "/v1/sessions/work", "")
		if code != http.StatusConflict || !strings.Contains(body, "uids 1000, 65534") || !strings.Contains(body, "--owner") {
			t.Errorf("ambiguous: %d %s", code, body)
		}
		code, body = w.request(Caller{UID: 0}, http.MethodGet, "/v1/sessions/work?owner=1000", "")
		if code != http.StatusOK || !strings.Contains(body, `"owner_uid":1000`) {
			t.Errorf("?owner=1000: %d %s", code, body)
		}
		for _, bad := range []string{"?owner=x", "?owner=-1", "?owner=4294967296", "?owner=1&owner=2"} {
			if code, body := w.request(Caller{UID: 0}, http.MethodGet, "/v1/sessions/work"+bad, ""); code != http.StatusBadRequest {
				t.Errorf("%s: %d %s, want 400", bad, code, body)
			}
		}
	})
}

// A session nested in another owner's (a tenant's tool below a root
// gateway) does not name that session to its owner; root sees it.
func TestNestedSessionDoesNotNameAnotherOwnersParent(t *testing.T) {
	w := newWorld(t)
	gateway := w.spawn(init1, 100, 0, "gateway")
	w.begin(gateway, "gw-tenants")
	tool := w.spawn(gateway, 101, nobody, "tool")
	w.begin(tool, "mine")
	for _, tc := range []struct {
		name  string
		c     Caller
		shown bool
	}{
		{"owner", callerOf(tool, nobody), false},
		{"root", Caller{UID: 0}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, path := range []string{"/v1/sessions/mine", "/v1/sessions"} {
				code, body := w.request(tc.c, http.MethodGet, path, "")
				if code != http.StatusOK {
					t.Fatalf("%s: %d %s", path, code, body)
				}
				if strings.Contains(body, "gw-tenants") != tc.shown {
					t.Errorf("%s names the parent: %v, want %v: %s", path, !tc.shown, tc.shown, body)
				}
			}
		})
	}
}

// A user's process that is already the root of another owner's session
// (it began as root, then changed uid) cannot begin one of the user's;
// the refusal says so without naming that session.
func TestBeginRefusalNamesNoSessionOfAnotherOwner(t *testing.T) {
	w := newWorld(t)
	p := w.spawn(init1, 300, 0, "setup")
	w.begin(p, "root-private-name")
	w.exec(p, nobody, "app")
	code, body := w.request(callerOf(p, nobody), http.MethodPost, "/v1/sessions", `{"pid":300,"id":"mine"}`)
	if code != http.StatusConflict || strings.Contains(body, "root-private-name") {
		t.Errorf("begin: %d %s; want 409 without the other owner's session", code, body)
	}
	code, body = w.request(Caller{UID: 0}, http.MethodPost, "/v1/sessions", `{"pid":300,"id":"mine"}`)
	if code != http.StatusConflict || !strings.Contains(body, "root-private-name") {
		t.Errorf("root's begin: %d %s; want 409 naming the session", code, body)
	}
}

// An ending that finishes while a request is being answered never shows
// its report without its kill records: the enforcer stores the records
// before the agent keeps the report, and the API reads the reports first.
// Here the ending finishes at the moment the report is first asked for.
func TestAReportIsNeverShownWithoutItsRecords(t *testing.T) {
	for _, path := range []string{"/v1/sessions/done", "/v1/sessions"} {
		t.Run(path, func(t *testing.T) {
			w := newWorld(t)
			host := w.spawn(init1, 100, 0, "host")
			sess := w.begin(host, "done")
			server := w.spawn(host, 101, 0, "node", "server.js")
			w.observe(lineage.Event{Kind: lineage.KindExit, Time: w.next(), Proc: host})
			ended, ok := w.tr.Find("done")
			if !ok || ended.State != sessions.Ended {
				t.Fatalf("session done: %+v, want ended", ended)
			}
			enf := &enforcer.Enforcer{}
			w.s.Enforcer = enf
			finished := false
			w.s.Report = func(key string) (enforcer.Report, bool) {
				if key != sessions.EndingKey(ended, 0) {
					return enforcer.Report{}, false
				}
				if !finished { // the ending finishes now: records, then the report
					enf.AddRecords([]enforcer.KillRecord{{Session: sess.ID, Process: server, Comm: "node", Result: enforcer.ResultKilled, Signal: "SIGTERM"}})
					finished = true
				}
				return enforcer.Report{Session: sess.ID, Killed: 1, Empty: true}, true
			}
			code, body := w.request(Caller{UID: 0}, http.MethodGet, path, "")
			if code != http.StatusOK {
				t.Fatalf("%d %s", code, body)
			}
			var info SessionInfo
			records := 0
			if path == "/v1/sessions" {
				var list []SessionInfo
				if err := json.Unmarshal([]byte(body), &list); err != nil || len(list) != 1 {
					t.Fatalf("%v: %s", err, body)
				}
				info = list[0]
				records = info.Killed
			} else {
				var d SessionDetail
				if err := json.Unmarshal([]byte(body), &d); err != nil {
					t.Fatalf("%v: %s", err, body)
				}
				info, records = d.Session, len(d.Kills)
			}
			if info.Enforcement == nil || info.Enforcement.Killed != 1 {
				t.Fatalf("no report in the answer: %s", body)
			}
			if records != 1 {
				t.Errorf("the report (killed 1) is shown with %d kill records: %s", records, body)
			}
		})
	}
}

func TestRequestsAreCountedByEndpointNeverByPath(t *testing.T) {
	w := newWorld(t)
	c := callerOf(lineage.ID{PID: 4242, Start: 1}, 1000)
	w.request(c, "GET", "/v1/sessions", "")
	w.request(c, "GET", "/v1/sessions/secret-token-abc", "")
	w.request(c, "GET", "/v1/tree/77", "")
	w.request(c, "GET", "/v1/no/such/path/ghp_0123456789", "")
	got := w.s.apiStatus().Requests // Serve is not running: read the counters directly
	want := map[string]uint64{"GET /v1/sessions": 1, "GET /v1/sessions/{id}": 1, "GET /v1/tree/{pid}": 1, otherRoute: 1}
	for k, n := range want {
		if got[k] != n {
			t.Errorf("requests[%q] = %d, want %d (all: %v)", k, got[k], n, got)
		}
	}
	for k := range got {
		if strings.Contains(k, "secret") || strings.Contains(k, "ghp_") || strings.Contains(k, "77") {
			t.Errorf("a request path became a key: %q", k)
		}
	}
}
