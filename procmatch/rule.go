package procmatch

import (
	"encoding/json"
	"fmt"
)

// Rule names processes by the image they execute. Its fields mean the same
// wherever a rule is written (sessions.rules, enforcer.spare); how the
// fields combine is the Mode the rule is compiled with.
type Rule struct {
	// Name identifies the rule in logs and errors (and, for host rules,
	// in session origins and IDs, which sessions checks).
	Name string `json:"name"`
	// Comm lists exact process names. The kernel keeps the first CommLen
	// bytes of a name, so a longer pattern is compared by those bytes.
	Comm Patterns `json:"comm,omitempty"`
	// Exe lists globs (path.Match syntax) on the executed file. A pattern
	// without '/' is matched against the file's basename; one starting
	// with '/' against the whole path; any other against as many trailing
	// components of the path as it has ("bin/node" matches
	// /usr/local/bin/node; "claude/versions/*" matches
	// /home/u/.local/share/claude/versions/2.0.14).
	Exe Patterns `json:"exe,omitempty"`
	// Argv lists regular expressions (RE2) matched against argv joined
	// with single spaces. Anchor them: an unanchored pattern matches any
	// process that merely names the program in an argument.
	Argv Patterns `json:"argv,omitempty"`
	// Not lists regular expressions on the joined argv that veto the rule.
	Not Patterns `json:"not,omitempty"`
}

// Patterns is a list of patterns. In configuration files a single pattern
// may be written as a string ("comm: node") or as a list
// ("comm: [node, nodejs]").
type Patterns []string

// UnmarshalJSON accepts a string or a list of strings.
func (p *Patterns) UnmarshalJSON(data []byte) error {
	var one string
	if err := json.Unmarshal(data, &one); err == nil {
		*p = Patterns{one}
		return nil
	}
	var list []string
	if err := json.Unmarshal(data, &list); err != nil {
		return fmt.Errorf("want a pattern or a list of patterns: %s", data)
	}
	*p = list
	return nil
}

// Image is what a rule is matched against: one executed image of a
// process, as the kernel reported it at exec or /proc shows it.
type Image struct {
	Filename string
	Comm     string
	Argv     []string
}

// CommLen is TASK_COMM_LEN - 1: the kernel's bound on a process name.
const CommLen = 15

// TruncComm returns what the kernel keeps of a process name.
func TruncComm(s string) string {
	if len(s) > CommLen {
		return s[:CommLen]
	}
	return s
}
