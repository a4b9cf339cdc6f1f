package agenttest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/mcptrace/mcptrace/api"
	"github.com/mcptrace/mcptrace/internal/testenv"
	"github.com/mcptrace/mcptrace/procfs"
)

// Proc is a live process a test started, found by an environment marker,
// with its identity (start tick) so it is never mistaken for a process
// that recycled its pid.
type Proc struct {
	PID  uint32
	Tick uint64 // start time in /proc clock ticks
	Argv []string
}

// WithEnv lists the live processes (zombies excluded) whose environment
// holds entry ("NAME=value"): a test's own processes, found from /proc
// independently of the agent.
func WithEnv(entry string) []Proc {
	return procsWhere(func(pid string, _ []string) bool {
		env, err := os.ReadFile(filepath.Join("/proc", pid, "environ"))
		return err == nil && bytes.Contains(append([]byte{0}, env...), []byte("\x00"+entry+"\x00"))
	})
}

// procsWhere lists the live processes (zombies excluded) keep accepts,
// given their PID and argv.
func procsWhere(keep func(pid string, argv []string) bool) []Proc {
	ents, _ := os.ReadDir("/proc")
	var out []Proc
	for _, e := range ents {
		pid, err := strconv.ParseUint(e.Name(), 10, 32)
		if err != nil {
			continue
		}
		s, err := procfs.Read("/proc", uint32(pid))
		if err != nil || !keep(e.Name(), s.Argv) {
			continue
		}
		out = append(out, Proc{PID: uint32(pid), Tick: s.ID.Tick(), Argv: s.Argv})
	}
	return out
}

// WithArgv lists the live processes (zombies excluded) whose command
// line, joined with spaces, contains s: a test's own processes, told by
// an argument only the test gives them.
func WithArgv(s string) []Proc {
	return procsWhere(func(_ string, argv []string) bool { return strings.Contains(strings.Join(argv, " "), s) })
}

// ProcOf is the live process pid, with its identity; what names it in the
// failure.
func ProcOf(t testing.TB, pid uint32, what string) Proc {
	t.Helper()
	s, err := procfs.Read("", pid)
	if err != nil {
		t.Fatalf("%s (%d): %v", what, pid, err)
	}
	return Proc{PID: pid, Tick: s.ID.Tick(), Argv: s.Argv}
}

// Alive reports whether the very process p still runs: not a zombie and
// not a recycled pid.
func (p Proc) Alive() bool {
	s, err := procfs.Read("/proc", p.PID)
	return err == nil && s.ID.Tick() == p.Tick
}

// Kill sends SIGKILL to p if it is still the same process.
func (p Proc) Kill() {
	if p.Alive() {
		syscall.Kill(int(p.PID), syscall.SIGKILL)
	}
}

func (p Proc) String() string { return strconv.Itoa(int(p.PID)) + " " + strings.Join(p.Argv, " ") }

// WaitMembers waits (testenv.Eventually) until the agent behind client
// lists every one of procs alive as a member of session id (of owner, nil
// for any the caller may see).
func WaitMembers(t testing.TB, client *api.Client, id string, owner *uint32, procs []Proc) {
	t.Helper()
	testenv.Eventually(t, "the agent to list the members of "+id, func() (bool, string) {
		d, err := client.Session(context.Background(), id, owner)
		if err != nil {
			return false, err.Error()
		}
		var alive []uint32
		for _, p := range d.Processes {
			if !p.Exited {
				alive = append(alive, p.ID.PID)
			}
		}
		for _, p := range procs {
			if !slices.Contains(alive, p.PID) {
				return false, fmt.Sprintf("alive members %v lack %s", alive, p)
			}
		}
		return true, ""
	})
}
