package exporter

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestProbesAnswerOKOrTheReason(t *testing.T) {
	var live, ready error
	inner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "metrics") })
	srv := httptest.NewServer(WithProbes(inner, Probes{Live: func() error { return live }, Ready: func() error { return ready }}))
	defer srv.Close()
	get := func(path string) (int, string) {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, strings.TrimSpace(string(b))
	}
	for _, tc := range []struct {
		live, ready error
		path        string
		code        int
		body        string
	}{
		{nil, nil, LivePath, 200, "ok"},
		{nil, nil, ReadyPath, 200, "ok"},
		{nil, errors.New("not ready: the agent is starting"), ReadyPath, 503, "not ready: the agent is starting"},
		{errors.New("not live: the agent's lock has been held for over 5s"), nil, LivePath, 503, "not live: the agent's lock has been held for over 5s"},
		{errors.New("x"), errors.New("y"), "/metrics", 200, "metrics"},
	} {
		live, ready = tc.live, tc.ready
		if code, body := get(tc.path); code != tc.code || body != tc.body {
			t.Errorf("GET %s (live %v, ready %v) = %d %q, want %d %q", tc.path, tc.live, tc.ready, code, body, tc.code, tc.body)
		}
	}
}
