//go:build !windows

// Not on Windows: the history journal is Linux's for now (it syncs its
// directory, which Windows refuses, and wine 8 cannot remove a test's
// temporary directory).

package api

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/mcptrace/mcptrace/history"
)

// FuzzRequest drives every route with arbitrary methods, paths, query
// strings and bodies, as root or as another user, against a synthetic
// node: nothing panics, every answer is one of the API's statuses, and a
// caller other than root never reads root's secrets (of live sessions or
// of the history's) nor a session's owner or root pid in a refusal.
func FuzzRequest(f *testing.F) {
	for _, seed := range []struct {
		method uint8
		path   string
		body   string
		uid    uint32
	}{
		{0, "/v1/processes?raw=1", "", nobody},
		{0, "/v1/tree/300", "", 0},
		{0, "/v1/ancestors/311?raw=1", "", nobody},
		{0, "/v1/sessions/victim", "", nobody},
		{0, "/v1/sessions", "", nobody},
		{0, "/v1/status", "", nobody},
		{1, "/v1/sessions", `{"pid":310,"id":"x"}`, nobody},
		{1, "/v1/sessions/victim/end", "{}", nobody},
		{1, "/v1/mark", `{"session":"victim"}`, nobody},
		{1, "/v1/mark", `{"session":`, nobody},
		{1, "/v1/mark", `{}`, 0},
		{2, "/v1/sessions/%2e%2e/end", "", nobody},
		{0, "/v1/history?from=2026-11-25T08:00:00Z&owner=0", "", nobody},
		{0, "/v1/sessions/past?owner=0", "", nobody},
		{0, "/v1/sessions/past?at=2026-11-25T09:00:02Z", "", nobody},
		{0, "/v1/orphans?raw=1", "", nobody},
		{1, "/v1/orphans/end", `{"dry_run":true}`, nobody},
		{0, "/v1/tree/501?at=2026-11-25T09:00:02Z", "", nobody},
	} {
		f.Add(seed.method, seed.path, []byte(seed.body), seed.uid)
	}
	methods := []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodDelete, "PATCH", http.MethodHead}
	allowed := map[int]bool{200: true, 400: true, 403: true, 404: true, 405: true, 409: true, 413: true}
	past := pastJournal(f) // root's past session holds ROOTSECRET and HOSTSECRET unredacted
	f.Fuzz(func(t *testing.T, m uint8, path string, body []byte, uid uint32) {
		w := newWorld(t)
		w.s.History = func() (*history.Journal, error) { return past, nil }
		host := w.spawn(init1, 310, 0, "gateway", "--api-key=HOSTSECRET")
		w.begin(host, "victim")
		w.spawn(host, 311, 0, "sh", "-c", "mysql -pROOTSECRET")
		caller := w.spawn(init1, 200, uid, "sh")
		req, err := http.NewRequest(methods[int(m)%len(methods)], "http://mcptrace/"+strings.TrimPrefix(path, "/"), bytes.NewReader(body))
		if err != nil {
			return // not a request a client can send
		}
		req = req.WithContext(context.WithValue(req.Context(), callerKey{}, callerOf(caller, uid)))
		rec := httptest.NewRecorder()
		w.s.handler().ServeHTTP(rec, req)
		if !allowed[rec.Code] && rec.Code != http.StatusMovedPermanently && rec.Code != http.StatusTemporaryRedirect {
			t.Fatalf("%s %q: status %d: %s", req.Method, path, rec.Code, rec.Body)
		}
		out := rec.Body.String()
		if uid != 0 {
			for _, secret := range []string{"ROOTSECRET", "HOSTSECRET", "owner uid 0", "root pid"} {
				if strings.Contains(out, secret) {
					t.Fatalf("%s %q as uid %d: answer shows %q: %s", req.Method, path, uid, secret, out)
				}
			}
		}
	})
}
