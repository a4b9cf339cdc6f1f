package procmatch

import (
	"errors"
	"fmt"
	"path"
	"regexp"
	"strings"
)

// Mode says how the fields of a rule combine (see the package doc).
type Mode int

const (
	// Any: any pattern of any field matches, and no Not pattern.
	Any Mode = iota
	// All: every field that is set matches, and no Not pattern.
	All
)

func (m Mode) String() string {
	if m == All {
		return "all"
	}
	return "any"
}

// Matcher is a compiled Rule.
type Matcher struct {
	rule Rule
	mode Mode
	comm []string
	exe  []string
	argv []*regexp.Regexp
	not  []*regexp.Regexp
}

// Compile checks a rule and compiles it. The error names the rule and
// lists every problem in it.
func Compile(r Rule, mode Mode) (*Matcher, error) {
	m := &Matcher{rule: r, mode: mode}
	var errs []error
	if len(r.Comm)+len(r.Exe)+len(r.Argv) == 0 {
		errs = append(errs, errors.New("no comm, exe or argv pattern: it would match nothing"))
	}
	for _, s := range r.Comm {
		if s == "" {
			errs = append(errs, errors.New("empty comm"))
			continue
		}
		m.comm = append(m.comm, TruncComm(s))
	}
	for _, s := range r.Exe {
		if _, err := path.Match(s, ""); err != nil || s == "" {
			errs = append(errs, fmt.Errorf("bad exe glob %q", s))
			continue
		}
		m.exe = append(m.exe, s)
	}
	var err error
	if m.argv, err = compileRegexps(r.Argv); err != nil {
		errs = append(errs, fmt.Errorf("argv: %w", err))
	}
	if m.not, err = compileRegexps(r.Not); err != nil {
		errs = append(errs, fmt.Errorf("not: %w", err))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("rule %q: %w", r.Name, err)
	}
	return m, nil
}

func compileRegexps(patterns []string) ([]*regexp.Regexp, error) {
	var out []*regexp.Regexp
	var errs []error
	for _, s := range patterns {
		re, err := regexp.Compile(s)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, re)
	}
	return out, errors.Join(errs...)
}

// CompileAll compiles every rule. It returns the rules that compiled and
// an error that names every one that did not.
func CompileAll(rules []Rule, mode Mode) ([]*Matcher, error) {
	out := make([]*Matcher, 0, len(rules))
	var errs []error
	for _, r := range rules {
		m, err := Compile(r, mode)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, m)
	}
	return out, errors.Join(errs...)
}

// Rule returns the rule as written.
func (m *Matcher) Rule() Rule { return m.rule }

// Name returns the rule's name, or, for an unnamed rule, its first
// pattern ("comm=node"), for logs.
func (m *Matcher) Name() string {
	r := m.rule
	switch {
	case r.Name != "":
		return r.Name
	case len(r.Comm) > 0:
		return "comm=" + r.Comm[0]
	case len(r.Exe) > 0:
		return "exe=" + r.Exe[0]
	case len(r.Argv) > 0:
		return "argv=" + r.Argv[0]
	}
	return ""
}

// Comms returns the process names the rule requires, as the kernel keeps
// them, and whether it requires one at all: an All rule with comm
// patterns matches no process whose comm is not among them, which lets a
// caller decide in the kernel what the rule cannot match.
func (m *Matcher) Comms() ([]string, bool) {
	return m.comm, m.mode == All && len(m.comm) > 0
}

// Match reports whether the rule matches the image. A Windows image is
// read both as given and as windows.go reads it: a pattern matches when
// it matches either reading, and a Not pattern vetoes when it matches
// either.
func (m *Matcher) Match(im Image) bool {
	return m.match(newReadings(im))
}

// readings are the forms an image is matched in.
type readings struct {
	im, win      Image
	joined, wjoi string
	isWin        bool
}

func newReadings(im Image) readings {
	r := readings{im: im, joined: strings.Join(im.Argv, " ")}
	if w, ok := portable(im); ok {
		r.win, r.wjoi, r.isWin = w, strings.Join(w.Argv, " "), true
	}
	return r
}

func (m *Matcher) match(r readings) bool {
	if !m.positive(r.im, r.joined) && !(r.isWin && m.positive(r.win, r.wjoi)) {
		return false
	}
	if len(r.im.Argv) > 0 {
		for _, re := range m.not {
			if re.MatchString(r.joined) || r.isWin && re.MatchString(r.wjoi) {
				return false
			}
		}
	}
	return true
}

func (m *Matcher) positive(im Image, joined string) bool {
	if m.mode == All {
		return m.matchAll(im, joined)
	}
	return m.matchAny(im, joined)
}

func (m *Matcher) matchAny(im Image, joined string) bool {
	return m.commMatches(im.Comm) || m.exeMatches(im.Filename) || m.argvMatches(im.Argv, joined)
}

func (m *Matcher) matchAll(im Image, joined string) bool {
	return (len(m.comm) == 0 || m.commMatches(im.Comm)) &&
		(len(m.exe) == 0 || m.exeMatches(im.Filename)) &&
		(len(m.argv) == 0 || m.argvMatches(im.Argv, joined))
}

func (m *Matcher) commMatches(comm string) bool {
	if comm == "" {
		return false
	}
	comm = TruncComm(comm)
	for _, c := range m.comm {
		if c == comm {
			return true
		}
	}
	return false
}

func (m *Matcher) exeMatches(filename string) bool {
	if filename == "" {
		return false
	}
	for _, g := range m.exe {
		if MatchExe(g, filename) {
			return true
		}
	}
	return false
}

func (m *Matcher) argvMatches(argv []string, joined string) bool {
	if len(argv) == 0 {
		return false
	}
	for _, re := range m.argv {
		if re.MatchString(joined) {
			return true
		}
	}
	return false
}

// First returns the first matcher that matches the image (as Match
// reads it), or nil.
func First(ms []*Matcher, im Image) *Matcher {
	r := newReadings(im)
	for _, m := range ms {
		if m.match(r) {
			return m
		}
	}
	return nil
}

// MatchExe applies an exe glob (see Rule.Exe) to a filename.
func MatchExe(glob, filename string) bool {
	switch {
	case !strings.Contains(glob, "/"):
		ok, _ := path.Match(glob, path.Base(filename))
		return ok
	case strings.HasPrefix(glob, "/"):
		ok, _ := path.Match(glob, filename)
		return ok
	}
	// Trailing components: as many as the glob has.
	n := strings.Count(glob, "/") + 1
	parts := strings.Split(filename, "/")
	if len(parts) < n {
		return false
	}
	ok, _ := path.Match(glob, strings.Join(parts[len(parts)-n:], "/"))
	return ok
}
