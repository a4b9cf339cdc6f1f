package sessions

import (
	"errors"
	"fmt"
	"regexp"

	"github.com/mcptrace/mcptrace/hosts"
	"github.com/mcptrace/mcptrace/procmatch"
)

// Rule recognises the process of an agent host by the image it executes.
// It is procmatch's rule, compiled with procmatch.Any: a rule matches a
// process image when ANY of its Comm, Exe or Argv patterns matches and
// NONE of its Not patterns does (procmatch documents the fields). Matching
// looks at one image: the filename and argv the kernel captured at exec
// (or, for processes that predate the agent, what /proc shows: the
// resolved /proc/PID/exe, the current cmdline and comm, which a program
// may have rewritten with process.title). An image whose argv[0] or
// filename has the basename "mcptrace" never matches any rule: the
// mcptrace CLI is tags and markers, never a host.
//
// The Name identifies the host in origins ("rule:<name>") and generated
// session IDs ("<name>-<pid>"): lower case letters, digits, '.', '_' and
// '-'. Rules that share a Name describe the same host: they give the same
// origin, and a process inside an active session of a rule never becomes
// the root of a second session of that rule (a wrapper that starts the
// real binary as a child is one session, not two).
type Rule = procmatch.Rule

// Image is what a rule is matched against.
type Image = procmatch.Image

var ruleNamePattern = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]*$`)

// CompileRules checks rules the way NewTracker does and reports every
// invalid one; configuration loaders call it to fail early.
func CompileRules(rules []Rule) error {
	_, err := compileRules(rules)
	return err
}

func compileRules(rules []Rule) ([]*procmatch.Matcher, error) {
	out, err := procmatch.CompileAll(rules, procmatch.Any)
	errs := []error{err}
	for _, r := range rules {
		if !ruleNamePattern.MatchString(r.Name) {
			errs = append(errs, fmt.Errorf("rule %q: name must match %s", r.Name, ruleNamePattern))
		}
	}
	return out, errors.Join(errs...)
}

// isMcptrace reports whether the image is the mcptrace CLI.
func isMcptrace(filename string, argv []string) bool {
	if IsCLI(filename) {
		return true
	}
	return len(argv) > 0 && IsCLI(argv[0])
}

// matchRules returns the first rule matching the image, or nil.
func matchRules(rules []*procmatch.Matcher, im Image) *procmatch.Matcher {
	if isMcptrace(im.Filename, im.Argv) {
		return nil
	}
	return procmatch.First(rules, im)
}

// DefaultRules returns the built-in rules for the agent hosts mcptrace
// knows (package hosts keeps them, one file per host, with what roles
// needs to read each host's tree), most specific first: the first
// matching rule names the session. Each call returns a fresh slice the
// caller may modify.
//
// The rules match the long-lived process that spawns MCP servers, never a
// launcher that starts an application and exits (`code .`, `cursor .`,
// `openclaw gateway start`): a launcher's exit would end the session and
// get the application it started killed.
func DefaultRules() []Rule { return hosts.Rules() }
