//go:build linux

// Command vmmatrix runs Go test packages on every kernel of a list, each in
// a QEMU guest through vmexec, and prints a kernel × package table.
//
//	vmmatrix                                  # KERNELS="5.10 6.1 6.12 7", PKGS=./...
//	KERNELS=6.1 PKGS=./lineage/ vmmatrix
//	vmmatrix -kernels "6.1 7" -pkgs "./lineage/ ./agent/" -- -run TestFork
//	vmmatrix -exclude ./e2e/...               # host-only packages
//
// For each kernel it resolves (and on first use downloads) the image with
// "vmexec -resolve", then runs
//
//	go test -json -count=1 -exec "vmexec -kernel <image>" <packages> [go test flags]
//
// and reads the test2json stream. Statuses are the tests' own. The run
// fails if any package fails, does not complete, or does not run at all,
// if a kernel cannot be had, or if go test exits non-zero for any reason.
// Patterns with "..." exclude vmtests itself (its tests boot guests from
// the host); name a package explicitly to include it.
//
// Build it and vmexec with CGO_ENABLED=0; without -vmexec, vmmatrix builds
// vmexec itself into a temporary directory.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"text/tabwriter"
	"time"
	"unicode/utf8"
)

const vmexecPkg = "github.com/mcptrace/mcptrace/vmtests/cmd/vmexec"

// kernelInfo is what "vmexec -resolve" prints (a subset).
type kernelInfo struct {
	Series  string `json:"series"`
	Suite   string `json:"suite"`
	Package string `json:"package"`
	Version string `json:"version"`
	Release string `json:"release"`
	Vmlinuz string `json:"vmlinuz"`
}

type event struct {
	Action      string
	Package     string
	Test        string
	Output      string
	Elapsed     float64
	ImportPath  string
	FailedBuild string
}

type pkgResult struct {
	name      string
	action    string // pass, fail, skip; "" if it never finished
	started   bool
	elapsed   float64
	tests     map[string]string // top-level and subtests → pass/fail/skip
	order     []string
	testOut   map[string]*strings.Builder
	out       strings.Builder // everything the package printed
	buildFail string
}

type kernelRun struct {
	spec     string
	info     *kernelInfo
	err      error // could not resolve, or go test could not run
	goErr    error // go test's exit status
	stderr   string
	wall     time.Duration
	resolve  time.Duration
	pkgs     map[string]*pkgResult
	jsonPath string
	// planned is what the plan runs on this kernel (package → whole or
	// the named tests); nil without a plan: every package, whole.
	planned map[string]*selection
	// callerRun: the caller chose the tests (-run): the plan's lists
	// gave way.
	callerRun bool
}

func main() {
	os.Exit(run())
}

func envOr(name, def string) string {
	if v := strings.TrimSpace(os.Getenv(name)); v != "" {
		return v
	}
	return def
}

func run() int {
	var (
		kernels   = flag.String("kernels", envOr("KERNELS", "5.10 6.1 6.12 7"), "kernels to test, space-separated ($KERNELS)")
		pkgs      = flag.String("pkgs", envOr("PKGS", "./..."), "packages, space-separated ($PKGS); patterns with ... exclude vmtests")
		exclude   = flag.String("exclude", os.Getenv("VMTEST_EXCLUDE"), "packages to leave out, space-separated patterns ($VMTEST_EXCLUDE), e.g. \"./e2e/...\" for host-only tests")
		vmexecBin = flag.String("vmexec", os.Getenv("VMEXEC"), "vmexec binary ($VMEXEC; default: build it)")
		vmexecArg = flag.String("vmexec-flags", os.Getenv("VMEXEC_FLAGS"), "extra vmexec flags, e.g. \"-mem 2G -file bin/mcptrace:/bin/mcptrace\" ($VMEXEC_FLAGS)")
		outDir    = flag.String("out", os.Getenv("VMMATRIX_OUT"), "directory for the raw go test -json streams ($VMMATRIX_OUT; default: a new temporary directory)")
		parallel  = flag.Int("p", 1, "packages run in parallel per kernel (go test -p); each guest uses 2 vCPUs")
		planFile  = flag.String("plan", os.Getenv("VMTEST_PLAN"), "which packages and tests run on which kernel ($VMTEST_PLAN; see vmtests/matrix.txt); empty: every package whole on every kernel")
		verbose   = flag.Bool("v", false, "print the output of every package, not only of failed ones")
	)
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: vmmatrix [flags] [-- go test flags]\n\nflags:\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	goFlags := flag.Args()

	goCmd, err := exec.LookPath("go")
	if err != nil {
		fmt.Fprintln(os.Stderr, "vmmatrix: the go command is not on PATH")
		return 2
	}
	start := time.Now()

	if *outDir == "" {
		if *outDir, err = os.MkdirTemp("", "vmmatrix-"); err != nil {
			fmt.Fprintln(os.Stderr, "vmmatrix:", err)
			return 2
		}
	} else if err := os.MkdirAll(*outDir, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "vmmatrix:", err)
		return 2
	}
	if *vmexecBin == "" {
		*vmexecBin = filepath.Join(*outDir, "vmexec")
		cmd := exec.Command(goCmd, "build", "-o", *vmexecBin, vmexecPkg)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			fmt.Fprintf(os.Stderr, "vmmatrix: building vmexec: %v\n", err)
			return 1
		}
	}
	if abs, err := filepath.Abs(*vmexecBin); err == nil {
		*vmexecBin = abs
	}

	pkgList, err := expandPackages(goCmd, strings.Fields(*pkgs))
	if err != nil {
		fmt.Fprintln(os.Stderr, "vmmatrix:", err)
		return 1
	}
	if ex := strings.Fields(*exclude); len(ex) > 0 {
		drop, err := expandPackages(goCmd, ex)
		if err != nil {
			fmt.Fprintln(os.Stderr, "vmmatrix:", err)
			return 1
		}
		pkgList = subtract(pkgList, drop)
	}
	if len(pkgList) == 0 {
		fmt.Fprintf(os.Stderr, "vmmatrix: %q matches no packages\n", *pkgs)
		return 1
	}
	modPath := modulePath(goCmd)
	var pl *plan
	if *planFile != "" {
		f, err := os.Open(*planFile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "vmmatrix:", err)
			return 2
		}
		pl, err = parsePlan(f)
		f.Close()
		if err != nil {
			fmt.Fprintf(os.Stderr, "vmmatrix: plan %s: %v\n", *planFile, err)
			return 2
		}
	}
	// A plan's patterns are expanded once each, then narrowed to the
	// packages -pkgs and -exclude leave.
	inRun := map[string]bool{}
	for _, p := range pkgList {
		inRun[p] = true
	}
	expanded := map[string][]string{}
	expand := func(pattern string) ([]string, error) {
		if got, ok := expanded[pattern]; ok {
			return got, nil
		}
		all, err := expandPackages(goCmd, []string{pattern})
		if err != nil {
			return nil, err
		}
		var kept []string
		for _, p := range all {
			if inRun[p] {
				kept = append(kept, p)
			}
		}
		expanded[pattern] = kept
		return kept, nil
	}
	planDesc := "no plan: every package whole on every kernel"
	if pl != nil {
		planDesc = "plan " + *planFile
	}
	fmt.Fprintf(os.Stderr, "vmmatrix: kernels %s; %d packages; %s; go test -p %d; raw results in %s\n",
		*kernels, len(pkgList), planDesc, *parallel, *outDir)

	var runs []*kernelRun
	for _, spec := range strings.Fields(*kernels) {
		kr := &kernelRun{spec: spec, pkgs: map[string]*pkgResult{}}
		runs = append(runs, kr)
		t0 := time.Now()
		kr.info, kr.err = resolve(*vmexecBin, spec)
		kr.resolve = time.Since(t0)
		if kr.err != nil {
			fmt.Fprintf(os.Stderr, "vmmatrix: kernel %s: %v\n", spec, kr.err)
			continue
		}
		fmt.Fprintf(os.Stderr, "\nvmmatrix: === kernel %s: %s %s (%s), uname -r %s\n", spec, kr.info.Package, kr.info.Version, kr.info.Suite, kr.info.Release)
		jobs := []goTestJob{{pkgs: pkgList}}
		if pl != nil {
			if kr.planned, kr.err = pl.forKernel(spec, expand); kr.err != nil {
				fmt.Fprintf(os.Stderr, "vmmatrix: kernel %s: %v\n", spec, kr.err)
				continue
			}
			kr.callerRun = hasRunFlag(goFlags)
			jobs = planJobs(pkgList, kr.planned, kr.callerRun)
		}
		runKernel(goCmd, kr, *vmexecBin, *vmexecArg, jobs, goFlags, *parallel, *outDir, *verbose, modPath)
	}

	failed := report(os.Stdout, runs, pkgList, modPath, time.Since(start), *outDir)
	fmt.Printf("\nraw go test -json streams and guest consoles (console-<kernel>/<package>.console.log): %s\n", *outDir)
	if failed {
		fmt.Println("vmmatrix: FAIL")
		return 1
	}
	fmt.Println("vmmatrix: PASS")
	return 0
}

func modulePath(goCmd string) string {
	out, err := exec.Command(goCmd, "list", "-m").Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(strings.Split(string(out), "\n")[0])
}

// expandPackages turns patterns into import paths. Wildcard patterns drop
// vmtests and everything under it; explicit packages are kept.
func expandPackages(goCmd string, patterns []string) ([]string, error) {
	seen := map[string]bool{}
	var out []string
	for _, p := range patterns {
		cmd := exec.Command(goCmd, "list", "-e", "-f", "{{.ImportPath}}", p)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		res, err := cmd.Output()
		if err != nil {
			return nil, fmt.Errorf("go list %s: %v: %s", p, err, stderr.String())
		}
		for _, ip := range strings.Fields(string(res)) {
			if strings.Contains(p, "...") && (strings.HasSuffix(ip, "/vmtests") || strings.Contains(ip, "/vmtests/")) {
				continue
			}
			if !seen[ip] {
				seen[ip] = true
				out = append(out, ip)
			}
		}
	}
	return out, nil
}

func subtract(a, b []string) []string {
	drop := map[string]bool{}
	for _, x := range b {
		drop[x] = true
	}
	var out []string
	for _, x := range a {
		if !drop[x] {
			out = append(out, x)
		}
	}
	return out
}

func resolve(vmexec, spec string) (*kernelInfo, error) {
	cmd := exec.Command(vmexec, "-kernel", spec, "-resolve")
	cmd.Stderr = os.Stderr // download progress
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("vmexec -kernel %s -resolve: %v", spec, err)
	}
	var k kernelInfo
	if err := json.Unmarshal(out, &k); err != nil {
		return nil, fmt.Errorf("vmexec -resolve printed %q: %v", out, err)
	}
	return &k, nil
}

// shellQuote quotes a word for go test's -exec splitting (cmd/internal/quoted).
func shellQuote(s string) (string, error) {
	if !strings.ContainsAny(s, " \t\n'\"") {
		return s, nil
	}
	if !strings.Contains(s, "'") {
		return "'" + s + "'", nil
	}
	if !strings.Contains(s, `"`) {
		return `"` + s + `"`, nil
	}
	return "", fmt.Errorf("cannot quote %q for go test -exec", s)
}

// goTestJob is one go test run on a kernel: packages and the flags that
// choose their tests.
type goTestJob struct {
	pkgs  []string
	flags []string
}

// planJobs turns a kernel's planned packages into go test runs: one for
// every package run whole, one per package run in part (its -run or
// -skip pattern is its own). With callerRun (the caller passed -run) every planned
// package runs in one go test with the caller's choice.
func planJobs(pkgList []string, planned map[string]*selection, callerRun bool) []goTestJob {
	var whole []string
	var jobs []goTestJob
	for _, p := range pkgList {
		s := planned[p]
		switch {
		case s == nil:
		case (s.whole && len(s.skip) == 0) || callerRun:
			whole = append(whole, p)
		case s.whole:
			jobs = append(jobs, goTestJob{pkgs: []string{p}, flags: []string{"-skip", runPattern(s.skip)}})
		default:
			jobs = append(jobs, goTestJob{pkgs: []string{p}, flags: []string{"-run", runPattern(s.tests)}})
		}
	}
	if len(whole) > 0 {
		jobs = append([]goTestJob{{pkgs: whole}}, jobs...)
	}
	return jobs
}

func runKernel(goCmd string, kr *kernelRun, vmexec, vmexecFlags string, jobs []goTestJob, goFlags []string, parallel int, outDir string, verbose bool, modPath string) {
	qv, err := shellQuote(vmexec)
	if err == nil {
		var qk string
		qk, err = shellQuote(kr.info.Vmlinuz)
		qv += " -kernel " + qk
	}
	if err != nil {
		kr.err = err
		return
	}
	if vmexecFlags != "" {
		qv += " " + vmexecFlags
	}
	// A package's tests run ten times slower in an emulated guest than on
	// the host (make test allows 20m there): go test's default 10m would
	// cut the slowest package short.
	kr.jsonPath = filepath.Join(outDir, "kernel-"+kr.spec+".json")
	raw, err := os.Create(kr.jsonPath)
	if err != nil {
		kr.err = err
		return
	}
	defer raw.Close()
	consoleDir := filepath.Join(outDir, "console-"+kr.spec)
	os.MkdirAll(consoleDir, 0o755)
	t0 := time.Now()
	var stderrAll strings.Builder
	for _, job := range jobs {
		args := []string{"test", "-json", "-count=1", "-timeout=30m", fmt.Sprintf("-p=%d", parallel), "-exec", qv}
		args = append(args, job.flags...)
		args = append(args, job.pkgs...)
		args = append(args, goFlags...)
		goErr, stderr := runGoTest(goCmd, args, kr, raw, consoleDir, verbose, modPath)
		if goErr != nil && kr.goErr == nil {
			kr.goErr = goErr
		}
		stderrAll.WriteString(stderr)
	}
	kr.wall = time.Since(t0)
	kr.stderr = stderrAll.String()
	fmt.Fprintf(os.Stderr, "vmmatrix: [%s] go test done in %s (%v)\n", kr.spec, kr.wall.Round(100*time.Millisecond), exitDesc(kr.goErr))
}

// runGoTest runs one go test command for kr, adding its results to
// kr.pkgs and its raw stream to raw. It returns go test's exit error and
// what it printed that was not an event.
func runGoTest(goCmd string, args []string, kr *kernelRun, raw io.Writer, consoleDir string, verbose bool, modPath string) (error, string) {
	cmd := exec.Command(goCmd, args...)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "MCPTRACE_VM_CONSOLE_LOG="+consoleDir)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err, ""
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return err, ""
	}
	buildOut := map[string]*strings.Builder{}
	var mu sync.Mutex
	get := func(name string) *pkgResult {
		p := kr.pkgs[name]
		if p == nil {
			p = &pkgResult{name: name, tests: map[string]string{}, testOut: map[string]*strings.Builder{}}
			kr.pkgs[name] = p
		}
		return p
	}
	sc := bufio.NewScanner(io.TeeReader(stdout, raw))
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var ev event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			// Not an event: go test itself printed something. Keep it.
			fmt.Fprintf(&stderr, "%s\n", sc.Text())
			continue
		}
		mu.Lock()
		if ev.Action == "build-output" {
			b := buildOut[ev.ImportPath]
			if b == nil {
				b = &strings.Builder{}
				buildOut[ev.ImportPath] = b
			}
			b.WriteString(ev.Output)
			mu.Unlock()
			continue
		}
		if ev.Package == "" {
			mu.Unlock()
			continue
		}
		p := get(ev.Package)
		switch ev.Action {
		case "start":
			p.started = true
		case "run":
			if _, ok := p.tests[ev.Test]; !ok {
				p.order = append(p.order, ev.Test)
				p.tests[ev.Test] = "run" // until it reports a result
			}
		case "output":
			p.out.WriteString(ev.Output)
			if ev.Test != "" {
				b := p.testOut[ev.Test]
				if b == nil {
					b = &strings.Builder{}
					p.testOut[ev.Test] = b
				}
				b.WriteString(ev.Output)
			}
		case "pass", "fail", "skip":
			if ev.Test != "" {
				if _, ok := p.tests[ev.Test]; !ok {
					p.order = append(p.order, ev.Test)
				}
				p.tests[ev.Test] = ev.Action
				break
			}
			p.action, p.elapsed = ev.Action, ev.Elapsed
			if ev.FailedBuild != "" {
				p.buildFail = ev.FailedBuild
				if b := buildOut[ev.FailedBuild]; b != nil {
					p.out.WriteString(b.String())
				}
			}
			status, _ := pkgStatus(p)
			fmt.Fprintf(os.Stderr, "vmmatrix: [%s] %-5s %s (%.1fs)\n", kr.spec, strings.ToUpper(status), short(p.name, modPath), p.elapsed)
			if ev.Action == "fail" || verbose {
				for _, l := range strings.Split(strings.TrimRight(p.out.String(), "\n"), "\n") {
					fmt.Fprintf(os.Stderr, "    %s\n", l)
				}
			}
		}
		mu.Unlock()
	}
	if err := sc.Err(); err != nil {
		fmt.Fprintf(&stderr, "reading go test output: %v\n", err)
	}
	goErr := cmd.Wait()
	if s := strings.TrimSpace(stderr.String()); s != "" {
		fmt.Fprintf(os.Stderr, "vmmatrix: [%s] go test stderr:\n%s\n", kr.spec, indent(s))
	}
	return goErr, stderr.String()
}

func exitDesc(err error) string {
	if err == nil {
		return "exit 0"
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return fmt.Sprintf("exit %d", ee.ExitCode())
	}
	return err.Error()
}

func indent(s string) string {
	return "    " + strings.ReplaceAll(s, "\n", "\n    ")
}

func short(pkg, mod string) string {
	if mod != "" && strings.HasPrefix(pkg, mod+"/") {
		return "./" + strings.TrimPrefix(pkg, mod+"/")
	}
	if pkg == mod && mod != "" {
		return "."
	}
	return pkg
}

// outputOf is what test and its subtests printed, test by test in the
// order they started.
func (p *pkgResult) outputOf(test string) string {
	var b strings.Builder
	for _, t := range p.order {
		if t == test || strings.HasPrefix(t, test+"/") {
			if o := p.testOut[t]; o != nil {
				b.WriteString(o.String())
			}
		}
	}
	return b.String()
}

// pkgStatus summarizes a package: pass, fail, skip, or incomplete/missing.
func pkgStatus(p *pkgResult) (status, detail string) {
	if p == nil {
		return "missing", "did not run"
	}
	var passed, failed, skipped, unfinished int
	for name, a := range p.tests {
		if strings.Contains(name, "/") {
			continue // count top-level tests
		}
		switch a {
		case "pass":
			passed++
		case "fail":
			failed++
		case "skip":
			skipped++
		case "run":
			unfinished++
		}
	}
	counts := fmt.Sprintf("%d ok", passed)
	if failed > 0 {
		counts += fmt.Sprintf(", %d failed", failed)
	}
	if unfinished > 0 {
		counts += fmt.Sprintf(", %d unfinished", unfinished)
		failed += unfinished
	}
	if skipped > 0 {
		counts += fmt.Sprintf(", %d skipped", skipped)
	}
	switch p.action {
	case "fail":
		if p.buildFail != "" {
			return "fail", "build failed"
		}
		if failed == 0 {
			return "fail", counts + "; the test binary failed outside a test"
		}
		return "fail", counts
	case "skip":
		return "skip", "no test files"
	case "pass":
		if passed == 0 && skipped > 0 {
			return "skip", counts
		}
		if passed == 0 {
			return "pass", "no tests ran"
		}
		return "pass", counts
	}
	if p.started {
		return "incomplete", "started but did not finish"
	}
	return "missing", "did not run"
}

var fileLineRE = regexp.MustCompile(`^\s*[\w.-]+\.go:\d+: `)

// skipReason extracts what a skipped test printed, minus the framing lines.
func skipReason(out string) string {
	var lines []string
	for _, l := range strings.Split(out, "\n") {
		t := strings.TrimSpace(l)
		if t == "" || strings.HasPrefix(t, "=== ") || strings.HasPrefix(t, "--- SKIP") {
			continue
		}
		lines = append(lines, fileLineRE.ReplaceAllString(l, ""))
	}
	r := strings.Join(lines, " / ")
	if r == "" {
		return "(no message)"
	}
	return r
}

// testFileLineRE is a line a test file printed (t.Log, t.Error, t.Fatal,
// or a helper's failure attributed to its caller), not a line of the
// agent's logs (log.go) or another package's helpers.
var testFileLineRE = regexp.MustCompile(`^\s*[\w.-]+_test\.go:\d+: `)

// failReason is what a failed test said last: the last line its test
// files printed before its "--- FAIL", without the file and line, cut to
// 200 bytes, and the first such line when there were more. A test's
// failure is most often its last line (t.Fatal ends the test; its
// cleanup's logs come from helpers), but t.Error goes on, and a test's
// summary t.Logf may come after the errors: the first line is then the
// one that says why. The table says why without the raw streams.
func failReason(out string) string {
	var first, last string
	n := 0
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "--- FAIL") {
			break
		}
		if testFileLineRE.MatchString(l) {
			last = cut(strings.TrimSpace(testFileLineRE.ReplaceAllString(l, "")), 200)
			if n == 0 {
				first = last
			}
			n++
		}
	}
	switch n {
	case 0:
		return "failed"
	case 1:
		return "failed: " + last
	}
	return fmt.Sprintf("failed: %s (its first of %d lines: %s)", last, n, first)
}

// cut shortens s to at most n bytes, at a character's start, marking
// the cut.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// note is one row of the report's skip and failure tables.
type note struct{ kernel, pkg, test, text string }

// printRows prints a titled table of notes, nothing when there are none.
func printRows(w io.Writer, title string, rows []note) {
	if len(rows) == 0 {
		return
	}
	fmt.Fprintf(w, "\n%s:\n", title)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, r := range rows {
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", r.kernel, r.pkg, r.test, r.text)
	}
	tw.Flush()
}

// failedTestFile writes a failed test's whole output to a file in the
// run's directory (failed-<kernel>/<package>.<test>.log) and returns its
// path: the table shows one line of it, the file the rest, readable after
// the run.
func failedTestFile(outDir, kernel, pkg, test, out string) string {
	dir := filepath.Join(outDir, "failed-"+kernel)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return ""
	}
	name := strings.NewReplacer("/", "_", " ", "_", ".", "_").Replace(strings.TrimPrefix(pkg, "./"))
	if test != "" {
		name += "." + strings.NewReplacer("/", "__", " ", "_").Replace(test)
	}
	path := filepath.Join(dir, name+".log")
	if err := os.WriteFile(path, []byte(out), 0o644); err != nil {
		return ""
	}
	return path
}

func report(w io.Writer, runs []*kernelRun, pkgs []string, mod string, total time.Duration, outDir string) (failed bool) {
	fmt.Fprintf(w, "\n==== VM kernel matrix ====\n\nKernels:\n")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  KERNEL\tPACKAGE\tVERSION\tSUITE\tUNAME -R\tGO TEST WALL\tRESOLVE\t")
	for _, kr := range runs {
		if kr.info == nil {
			fmt.Fprintf(tw, "  %s\tunavailable: %v\t\t\t\t\t%s\t\n", kr.spec, kr.err, kr.resolve.Round(100*time.Millisecond))
			failed = true
			continue
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", kr.spec, kr.info.Package, kr.info.Version, kr.info.Suite, kr.info.Release,
			kr.wall.Round(100*time.Millisecond), kr.resolve.Round(100*time.Millisecond))
	}
	tw.Flush()

	fmt.Fprintf(w, "\nResults (package × kernel):\n")
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprint(tw, "  PACKAGE\t")
	for _, kr := range runs {
		fmt.Fprintf(tw, "%s\t", kr.spec)
	}
	fmt.Fprintln(tw)
	var skips, fails []note
	noTests := map[string]bool{}
	var noTestList []string
	for _, name := range pkgs {
		fmt.Fprintf(tw, "  %s\t", short(name, mod))
		for _, kr := range runs {
			if kr.info == nil {
				fmt.Fprint(tw, "FAIL (no kernel)\t")
				continue
			}
			p := kr.pkgs[name]
			sel := kr.planned[name]
			if kr.planned != nil && sel == nil {
				fmt.Fprint(tw, "-\t") // not in this kernel's plan
				continue
			}
			if kr.err != nil && p == nil {
				fmt.Fprint(tw, "FAIL (not run)\t")
				failed = true
				continue
			}
			status, detail := pkgStatus(p)
			label := status
			if status != "pass" && status != "skip" {
				label = strings.ToUpper(status)
				failed = true
				text := detail
				if p != nil {
					if f := failedTestFile(outDir, kr.spec, short(name, mod), "", p.out.String()); f != "" {
						text += "; output: " + f
					}
				}
				fails = append(fails, note{kr.spec, short(name, mod), "", text})
			}
			if sel != nil && !sel.whole {
				detail += fmt.Sprintf(", %d of the plan", len(sel.tests))
			}
			if sel != nil && sel.whole && len(sel.skip) > 0 && !kr.callerRun {
				detail += fmt.Sprintf(", %d left to the host", len(sel.skip))
			}
			fmt.Fprintf(tw, "%s (%s)\t", label, detail)
			if p == nil {
				continue
			}
			// A test the plan names must have run: a rename must not
			// drop a kernel's coverage without a word.
			if sel != nil && !sel.whole && status != "fail" && !kr.callerRun {
				for _, test := range sel.tests {
					if _, ok := p.tests[test]; !ok {
						failed = true
						fails = append(fails, note{kr.spec, short(name, mod), test, "named in the plan but did not run: renamed or removed? (fix vmtests/matrix.txt)"})
					}
				}
			}
			for _, test := range p.order {
				switch p.tests[test] {
				case "skip":
					reason := "(no message)"
					if b := p.testOut[test]; b != nil {
						reason = skipReason(b.String())
					}
					skips = append(skips, note{kr.spec, short(name, mod), test, reason})
				case "fail":
					reason := "failed"
					if b := p.testOut[test]; b != nil {
						reason = failReason(b.String())
					}
					if !strings.Contains(test, "/") {
						if f := failedTestFile(outDir, kr.spec, short(name, mod), test, p.outputOf(test)); f != "" {
							reason += " (output: " + f + ")"
						}
					}
					fails = append(fails, note{kr.spec, short(name, mod), test, reason})
				case "run":
					fails = append(fails, note{kr.spec, short(name, mod), test, "started but never finished (the test binary or the guest died)"})
				}
			}
			if status == "skip" && detail == "no test files" && !noTests[name] {
				noTests[name] = true
				noTestList = append(noTestList, short(name, mod))
			}
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()

	printRows(w, "Skips", skips)
	if len(noTestList) > 0 {
		fmt.Fprintf(w, "\nNo test files: %s\n", strings.Join(noTestList, " "))
	}
	printRows(w, "Failures", fails)
	for _, kr := range runs {
		if kr.info == nil {
			continue
		}
		if kr.err != nil {
			fmt.Fprintf(w, "\nkernel %s: go test could not run: %v\n", kr.spec, kr.err)
			failed = true
		} else if kr.goErr != nil {
			// go test failed; make sure that is visible even if every
			// package we know of passed (e.g. a package missing from the
			// stream, or go test's own error).
			anyFail := false
			for _, p := range kr.pkgs {
				if s, _ := pkgStatus(p); s != "pass" && s != "skip" {
					anyFail = true
				}
			}
			if !anyFail {
				fmt.Fprintf(w, "\nkernel %s: go test %s although no package failed; stderr:\n%s\n", kr.spec, exitDesc(kr.goErr), indent(strings.TrimSpace(kr.stderr)))
			}
			failed = true
		}
	}
	fmt.Fprintf(w, "\nTotal wall time: %s for %d kernel(s) × %d package(s)\n", total.Round(100*time.Millisecond), len(runs), len(pkgs))
	return failed
}
