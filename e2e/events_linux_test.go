package e2e_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcptrace/mcptrace/agent"
	"github.com/mcptrace/mcptrace/enforcer"
	"github.com/mcptrace/mcptrace/events"
	"github.com/mcptrace/mcptrace/internal/agenttest"
	"github.com/mcptrace/mcptrace/internal/testenv"
)

// `mcptrace events --follow --json`, started before a real MCP host
// (the official SDK client starting servers through npx), sees its
// session from begin to kill: the session's begin, its servers' execs
// with their command lines, the host's destroy marker, the enforcer's
// kills of the servers the marker ended, and the session's end when the
// host exits. The export file holds the same story; another user sees
// none of it.
func TestEventsFollowSeesARealHostsSessionFromBeginToKill(t *testing.T) {
	export := filepath.Join(t.TempDir(), "events", "events.jsonl")
	a := agenttest.Start(t, agent.Options{
		Enforcer:   enforcer.Config{Mode: enforcer.ModeEnforce, Policy: enforcer.PolicyGraceful, Grace: time.Second},
		ExportFile: export,
		Node:       "node-e2e",
	})
	follower := exec.Command(testenv.Binary(t), "events", "--follow", "--json", "--api.socket", a.Socket())
	out, err := follower.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	follower.Stderr = os.Stderr
	if err := follower.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { follower.Process.Kill(); follower.Wait() })
	lines := make(chan events.Event, 4096)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(out)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var e events.Event
			if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
				t.Errorf("a line of events --json that is not an event (%v): %q", err, sc.Text())
				return
			}
			lines <- e
		}
	}()
	// The follower and the export file both follow before the host starts.
	testenv.Eventually(t, "the follower to connect", func() (bool, string) {
		st := a.Status().Stream.Stream
		return st.Followers >= 2, fmt.Sprintf("%+v", st)
	})

	const session = "mcp-events"
	marker := fmt.Sprintf("MCPTRACE_E2E=%s-%d", session, os.Getpid())
	h := startHost(t, session, marker, a.Socket())
	if line := h.say(t, "mark", "marked"); line != "marked 0" {
		t.Fatalf("the host's `mcptrace mark destroy` ended %q, want exit code 0", line)
	}
	rep := waitReport(t, a, session, 1)
	io.WriteString(h.in, "exit\n")
	waitReport(t, a, session, 0)

	// The story, in the order the follower read it.
	var story []string
	seen := map[events.Kind]int{}
	var kills []events.Event
	want := []events.Kind{events.SessionBegin, events.Exec, events.Marker, events.Kill, events.SessionEnd}
	next := 0
	deadline := time.After(testenv.Bound(30 * time.Second))
	for next < len(want) {
		var e events.Event
		select {
		case e = <-lines:
		case <-deadline:
			t.Fatalf("the follower read %v; still waiting for %s:\n%s", seen, want[next], strings.Join(story, "\n"))
		}
		if e.Session != session {
			continue
		}
		seen[e.Kind]++
		story = append(story, fmt.Sprintf("%s pid %d %s %s", e.Kind, e.PID, e.Result, strings.Join(e.Argv, " ")))
		if e.Node != "node-e2e" || e.HostKind != "run" || e.Owner == nil || *e.Owner != 0 || e.Time.IsZero() {
			t.Errorf("event %+v: want node node-e2e, host kind run, owner 0 and a time", e)
		}
		if e.Kind != events.Marker && e.Kind != events.SessionEnd && (e.PID == 0 || e.StartNS == 0 || e.UID == nil) {
			t.Errorf("event %+v names no process", e)
		}
		switch e.Kind {
		case events.Exec:
			if !strings.Contains(strings.Join(e.Argv, " "), "server-filesystem") {
				continue // the host's own execs and the wrappers' come first
			}
		case events.Marker:
			if e.Generation != 1 {
				t.Errorf("marker ended generation %d, want 1", e.Generation)
			}
		case events.Kill:
			kills = append(kills, e)
			if e.Result != enforcer.ResultKilled {
				continue
			}
		}
		if e.Kind == want[next] {
			next++
		}
	}
	t.Logf("the follower read, for session %s:\n%s", session, strings.Join(story, "\n"))
	if len(kills) < rep.Killed {
		t.Errorf("%d kill events for a marker that killed %d", len(kills), rep.Killed)
	}

	// The export file tells the same story: the agent writes it as it
	// stops, at the latest.
	testenv.Eventually(t, "the export file to hold the session's end", func() (bool, string) {
		b, _ := os.ReadFile(export)
		return strings.Contains(string(b), `"kind":"session.end","session":"`+session+`"`), fmt.Sprintf("%d bytes", len(b))
	})
	b, _ := os.ReadFile(export)
	for _, k := range want {
		if !strings.Contains(string(b), `"kind":"`+string(k)+`","session":"`+session+`"`) {
			t.Errorf("the export file has no %s of session %s", k, session)
		}
	}

	// Without --follow: the kept events, for people. Root sees the
	// session; another user, none of it.
	text, err := exec.Command(testenv.Binary(t), "events", "--api.socket", a.Socket()).CombinedOutput()
	if err != nil || !strings.Contains(string(text), "session.begin   "+session+" (run)") || !strings.Contains(string(text), "kill") {
		t.Errorf("mcptrace events as root: %v\n%s", err, text)
	}
	if code, other := agenttest.CLIAs(t, a.Socket(), 65534, "events"); code != 0 || strings.Contains(other, session) {
		t.Errorf("mcptrace events as uid 65534 (exit %d) shows root's session:\n%s", code, other)
	}
}
