//go:build linux

package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

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

func TestFailReasonIsWhatTheTestSaidFirstAndLast(t *testing.T) {
	for _, c := range []struct{ name, out, want string }{
		{"fatal after logs",
			"=== RUN   TestX\n    x_test.go:10: started\n    log.go:18: time=… level=WARN msg=agent\n    x_test.go:42: timed out waiting for the member: 123 sh\n    process_linux.go:60: agent logs:\n--- FAIL: TestX (3.00s)\n",
			"failed: timed out waiting for the member: 123 sh (its first of 2 lines: started)"},
		{"errors before a summary",
			"=== RUN   TestW\n    w_test.go:148: stdio closed (pid 453):\n         iterator {…}\n    w_test.go:203: 89 processes by the iterator\n--- FAIL: TestW (0.67s)\n",
			"failed: 89 processes by the iterator (its first of 2 lines: stdio closed (pid 453):)"},
		{"a cut inside a character", "=== RUN   TestV\n    v_test.go:1: " + strings.Repeat("x", 199) + "é\n--- FAIL: TestV (0.10s)\n",
			"failed: " + strings.Repeat("x", 199) + "…"},
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

func TestPlanSaysWhatEachKernelRuns(t *testing.T) {
	pl, err := parsePlan(strings.NewReader(`# comment
all   ./sensor/ -TestW -TestX
6.12  ./sensor/ -TestW -TestY  # left out where both leave it out
all   ./agent/   TestB TestA   # a comment after
7     ./agent/   TestC
5.10  ./...
6.1,7 ./api/
`))
	if err != nil {
		t.Fatal(err)
	}
	pkgs := map[string][]string{
		"./sensor/": {"m/sensor"}, "./agent/": {"m/agent"}, "./api/": {"m/api"},
		"./...": {"m/agent", "m/api", "m/sensor", "m/state"},
	}
	expand := func(p string) ([]string, error) { return pkgs[p], nil }
	show := func(sel map[string]*selection) string {
		var out []string
		for _, p := range []string{"m/agent", "m/api", "m/sensor", "m/state"} {
			switch s := sel[p]; {
			case s == nil:
			case s.whole && len(s.skip) > 0:
				out = append(out, p+"-["+strings.Join(s.skip, ",")+"]")
			case s.whole:
				out = append(out, p)
			default:
				out = append(out, p+"["+strings.Join(s.tests, ",")+"]")
			}
		}
		return strings.Join(out, " ")
	}
	for kernel, want := range map[string]string{
		"5.10": "m/agent m/api m/sensor m/state", // ./... makes the agent and the sensor whole
		"6.1":  "m/agent[TestA,TestB] m/api m/sensor-[TestW,TestX]",
		"6.12": "m/agent[TestA,TestB] m/sensor-[TestW]",
		"7":    "m/agent[TestA,TestB,TestC] m/api m/sensor-[TestW,TestX]",
	} {
		sel, err := pl.forKernel(kernel, expand)
		if err != nil {
			t.Fatal(err)
		}
		if got := show(sel); got != want {
			t.Errorf("kernel %s runs %q, want %q", kernel, got, want)
		}
	}
	sel, _ := pl.forKernel("7", expand)
	jobs := planJobs([]string{"m/agent", "m/api", "m/sensor", "m/state"}, sel, false)
	if len(jobs) != 3 || strings.Join(jobs[0].pkgs, " ") != "m/api" || len(jobs[0].flags) != 0 ||
		strings.Join(jobs[1].pkgs, " ") != "m/agent" || strings.Join(jobs[1].flags, " ") != "-run ^(TestA|TestB|TestC)$" ||
		strings.Join(jobs[2].pkgs, " ") != "m/sensor" || strings.Join(jobs[2].flags, " ") != "-skip ^(TestW|TestX)$" {
		t.Errorf("jobs for kernel 7: %+v", jobs)
	}
	// A test one rule names runs, whatever another leaves out.
	named, err := parsePlan(strings.NewReader("all ./sensor/ -TestW -TestX\n7 ./sensor/ TestX\n"))
	if err != nil {
		t.Fatal(err)
	}
	if sel, _ := named.forKernel("7", expand); !sel["m/sensor"].whole || strings.Join(sel["m/sensor"].skip, ",") != "TestW" {
		t.Errorf("kernel 7 runs m/sensor %+v, want whole but TestW", sel["m/sensor"])
	}
	if jobs := planJobs([]string{"m/agent", "m/api"}, sel, true); len(jobs) != 1 || len(jobs[0].pkgs) != 2 {
		t.Errorf("with the caller's -run every planned package runs in one go test: %+v", jobs)
	}
	for _, bad := range []string{"all", "all ./x/ NotATest", ",7 ./x/", "all ./x/ TestA -TestB", "all ./x/ -NotATest"} {
		if _, err := parsePlan(strings.NewReader(bad)); err == nil {
			t.Errorf("plan %q: want an error", bad)
		}
	}
	if !hasRunFlag([]string{"-count=2", "-run", "X"}) || !hasRunFlag([]string{"-test.run=X"}) || hasRunFlag([]string{"-runs"}) {
		t.Error("hasRunFlag")
	}
}

// TestTheRepositorysPlanNamesTestsThatExist: vmtests/matrix.txt, as make
// vmtest uses it, parses, and every test it names is a func of its
// package's test files (a rename is caught here, on the host, before a
// guest would report it as not run).
func TestTheRepositorysPlanNamesTestsThatExist(t *testing.T) {
	f, err := os.Open("../../matrix.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	pl, err := parsePlan(f)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range pl.rules {
		for _, pkg := range r.pkgs {
			if strings.Contains(pkg, "...") {
				continue
			}
			files, _ := filepath.Glob(filepath.Join("../../..", pkg, "*_test.go"))
			var src strings.Builder
			for _, f := range files {
				b, err := os.ReadFile(f)
				if err != nil {
					t.Fatal(err)
				}
				src.Write(b)
			}
			if len(files) == 0 {
				t.Errorf("line %d: %s has no test files", r.line, pkg)
			}
			for _, test := range append(slices.Clone(r.tests), r.skip...) {
				if !strings.Contains(src.String(), "\nfunc "+test+"(t *testing.T)") {
					t.Errorf("line %d: %s has no test %s", r.line, pkg, test)
				}
			}
		}
	}
}
