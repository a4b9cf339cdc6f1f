//go:build linux

package main

import (
	"bufio"
	"fmt"
	"io"
	"regexp"
	"slices"
	"sort"
	"strings"
)

// A plan says which packages, and which of their tests, run on which
// kernel (vmtests/matrix.txt). One line a rule:
//
//	KERNELS  PACKAGES  [TESTS]
//
// KERNELS is "all" (every kernel of the run) or kernels joined by commas
// (5.10,7); PACKAGES a package pattern as go test takes it (./agent/,
// ./...: patterns with ... leave out vmtests and what -exclude drops);
// TESTS the names of top-level tests to run (with all their subtests),
// or nothing for the whole package; or names each after a '-': the whole
// package but those (tests of pure logic or of waiting, which the host
// runs and which would only cost guest time). Rules add up: a package
// named whole by one rule for a kernel runs whole there, whatever other
// rules list; what two rules leave out, each whole but its own, runs when
// either runs it. '#' starts a comment.
type plan struct {
	rules []planRule
}

type planRule struct {
	line    int
	kernels []string // nil: all
	pkgs    []string // patterns
	tests   []string // nil: whole packages
	skip    []string // whole packages but these (tests is nil)
}

var testNameRE = regexp.MustCompile(`^Test[A-Za-z0-9_]*$`)

func parsePlan(r io.Reader) (*plan, error) {
	p := &plan{}
	sc := bufio.NewScanner(r)
	n := 0
	for sc.Scan() {
		n++
		line := sc.Text()
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if len(f) < 2 {
			return nil, fmt.Errorf("line %d: want KERNELS PACKAGE [TESTS…], got %q", n, strings.TrimSpace(line))
		}
		rule := planRule{line: n, pkgs: []string{f[1]}}
		if f[0] != "all" {
			for _, k := range strings.Split(f[0], ",") {
				if k == "" {
					return nil, fmt.Errorf("line %d: empty kernel in %q", n, f[0])
				}
				rule.kernels = append(rule.kernels, k)
			}
		}
		for _, t := range f[2:] {
			name, skip := strings.CutPrefix(t, "-")
			if !testNameRE.MatchString(name) {
				return nil, fmt.Errorf("line %d: %q is not a top-level test name (TestX, or -TestX to leave it out)", n, t)
			}
			if skip {
				rule.skip = append(rule.skip, name)
			} else {
				rule.tests = append(rule.tests, name)
			}
		}
		if rule.tests != nil && rule.skip != nil {
			return nil, fmt.Errorf("line %d: a rule lists the tests to run or the tests to leave out (-TestX), not both", n)
		}
		p.rules = append(p.rules, rule)
	}
	return p, sc.Err()
}

// selection is what one kernel runs of one package: whole (but skip), or
// the named tests.
type selection struct {
	whole bool
	tests []string // sorted, when not whole
	skip  []string // sorted, when whole: left out
}

// forKernel resolves the plan for one kernel: package import path →
// selection. expand turns a rule's pattern into import paths (already
// without the excluded packages).
func (p *plan) forKernel(kernel string, expand func(pattern string) ([]string, error)) (map[string]*selection, error) {
	out := map[string]*selection{}
	named := map[string][]string{} // package → tests a rule names to run
	for _, r := range p.rules {
		if r.kernels != nil && !contains(r.kernels, kernel) {
			continue
		}
		for _, pat := range r.pkgs {
			pkgs, err := expand(pat)
			if err != nil {
				return nil, fmt.Errorf("plan line %d: %w", r.line, err)
			}
			for _, pkg := range pkgs {
				s := out[pkg]
				if s == nil {
					s = &selection{}
					out[pkg] = s
				}
				if r.tests == nil {
					if !s.whole {
						s.skip = slices.Clone(r.skip)
					} else {
						// Left out only where every rule that runs it whole
						// leaves it out.
						s.skip = slices.DeleteFunc(s.skip, func(t string) bool { return !contains(r.skip, t) })
					}
					s.whole, s.tests = true, nil
					sort.Strings(s.skip)
					continue
				}
				named[pkg] = append(named[pkg], r.tests...)
				if s.whole {
					continue
				}
				for _, t := range r.tests {
					if !contains(s.tests, t) {
						s.tests = append(s.tests, t)
					}
				}
				sort.Strings(s.tests)
			}
		}
	}
	// A test one rule names runs, whatever another rule leaves out.
	for pkg, s := range out {
		s.skip = slices.DeleteFunc(s.skip, func(t string) bool { return contains(named[pkg], t) })
	}
	return out, nil
}

// runPattern is the go test -run pattern of a selection of named tests.
func runPattern(tests []string) string {
	return "^(" + strings.Join(tests, "|") + ")$"
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// hasRunFlag says whether go test flags already choose tests (-run or
// -test.run): a plan's test lists then give way, and each planned
// package runs with the caller's choice.
func hasRunFlag(flags []string) bool {
	for _, f := range flags {
		name := strings.TrimLeft(f, "-")
		if name == "run" || strings.HasPrefix(name, "run=") || name == "test.run" || strings.HasPrefix(name, "test.run=") {
			return true
		}
	}
	return false
}
