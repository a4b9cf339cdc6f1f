//go:build linux

package main

import "testing"

func TestPkgStatus(t *testing.T) {
	mk := func(action string, tests map[string]string) *pkgResult {
		return &pkgResult{action: action, started: true, tests: tests}
	}
	for _, c := range []struct {
		name         string
		p            *pkgResult
		status, want string
	}{
		{"missing", nil, "missing", "did not run"},
		{"incomplete", &pkgResult{started: true, tests: map[string]string{}}, "incomplete", "started but did not finish"},
		{"no test files", mk("skip", nil), "skip", "no test files"},
		{"pass", mk("pass", map[string]string{"A": "pass", "A/sub": "pass", "B": "skip"}), "pass", "1 ok, 1 skipped"},
		{"all skipped", mk("pass", map[string]string{"A": "skip"}), "skip", "0 ok, 1 skipped"},
		{"fail", mk("fail", map[string]string{"A": "fail", "B": "pass"}), "fail", "1 ok, 1 failed"},
		{"fail outside a test", mk("fail", map[string]string{"A": "pass"}), "fail", "1 ok; the test binary failed outside a test"},
		{"died in a test", mk("fail", map[string]string{"A": "pass", "B": "run"}), "fail", "1 ok, 1 unfinished"},
		{"build", &pkgResult{action: "fail", buildFail: "x [x.test]", tests: map[string]string{}}, "fail", "build failed"},
	} {
		s, d := pkgStatus(c.p)
		if s != c.status || d != c.want {
			t.Errorf("%s: pkgStatus = %q, %q; want %q, %q", c.name, s, d, c.status, c.want)
		}
	}
}

func TestSkipReason(t *testing.T) {
	out := "=== RUN   TestX\n    smoke_test.go:112: kernel 5.10.0-46-amd64 lacks bpf_get_current_task_btf (added in 5.11)\n--- SKIP: TestX (0.46s)\n"
	if got, want := skipReason(out), "kernel 5.10.0-46-amd64 lacks bpf_get_current_task_btf (added in 5.11)"; got != want {
		t.Errorf("skipReason = %q, want %q", got, want)
	}
	if got := skipReason("=== RUN   TestY\n--- SKIP: TestY (0.00s)\n"); got != "(no message)" {
		t.Errorf("skipReason without message = %q", got)
	}
}

func TestFailReasonIsWhatTheTestSaidLast(t *testing.T) {
	for _, c := range []struct{ name, out, want string }{
		{"fatal after logs",
			"=== RUN   TestX\n    x_test.go:10: started\n    log.go:18: time=… level=WARN msg=agent\n    x_test.go:42: timed out waiting for the member: 123 sh\n    process_linux.go:60: agent logs:\n--- FAIL: TestX (3.00s)\n",
			"failed: timed out waiting for the member: 123 sh"},
		{"nothing from a test file", "=== RUN   TestY\n    log.go:18: msg\n--- FAIL: TestY (0.10s)\n", "failed"},
		{"lines after the verdict are not the reason", "=== RUN   TestZ\n    z_test.go:5: the reason\n--- FAIL: TestZ (0.10s)\n    z_test.go:9: a subtest's line\n", "failed: the reason"},
	} {
		if got := failReason(c.out); got != c.want {
			t.Errorf("%s: failReason = %q, want %q", c.name, got, c.want)
		}
	}
}

func TestShellQuote(t *testing.T) {
	for in, want := range map[string]string{"/a/b": "/a/b", "/a b/c": "'/a b/c'", "it's here": `"it's here"`} {
		if got, err := shellQuote(in); err != nil || got != want {
			t.Errorf("shellQuote(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := shellQuote(`'"`); err == nil {
		t.Error("both quote kinds: want an error")
	}
}
