package sessions

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcptrace/mcptrace/lineage"
)

const (
	alice = uint32(1000)
	bob   = uint32(1001)
)

func TestRunTagRootsTheSessionAtTheMcptraceProcess(t *testing.T) {
	tests := []struct {
		name   string
		argv   []string
		wantID string
	}{
		{"--session ID", []string{"mcptrace", "run", "--session", "s1", "--", "node", "host.js"}, "s1"},
		{"--session=ID", []string{"/usr/local/bin/mcptrace", "run", "--session=s1", "--", "node", "host.js"}, "s1"},
		{"generated ID", []string{"mcptrace", "run", "--", "node", "host.js"}, "run-1001"},
		{"Windows' mcptrace.exe", []string{`C:\Program Files\mcptrace\McpTrace.exe`, "run", "--session", "s1", "--", "node", "host.js"}, "s1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newWorld(t, Config{})
			shell := w.spawn(initID, 900, alice, "bash")
			p := w.fork(shell, 1001, alice)
			if acts := w.exec(p, alice, tt.argv...); len(acts) > 0 {
				t.Fatalf("tag ended something: %v", acts)
			}
			if acts := w.exec(p, alice, "node", "host.js"); len(acts) > 0 {
				t.Fatalf("exec of the command ended something: %v", acts)
			}
			s := w.session(tt.wantID)
			if s.Root != p || s.Origin != OriginRun || s.Owner != alice || s.State != Active || s.Parent != "" || s.Tag != tt.wantID {
				t.Errorf("session = %+v", s)
			}
			wrapper := w.spawn(p, 1002, alice, "npx", "-y", "@modelcontextprotocol/server-filesystem", "/tmp")
			server := w.spawn(wrapper, 1003, alice, "node", "/home/u/.npm/_npx/1/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js", "/tmp")
			w.exit(wrapper) // the wrapper dies; its server runs on
			w.wantMembers(tt.wantID, p, wrapper, server)
			w.wantSessionOf(server, tt.wantID)
			w.wantSessionOf(shell, "")

			acts := w.exit(p)
			wantEnded(t, acts, tt.wantID)
			if acts[0].End.EndReason != ReasonRootExit || acts[0].End.Root != p {
				t.Errorf("action = %+v", acts[0])
			}
			w.wantState(tt.wantID, Ended)
			w.wantMembers(tt.wantID, p, wrapper, server) // the kill set: server still alive
			if acts := w.exit(p); len(acts) > 0 {
				t.Errorf("duplicate exit ended %v", ended(acts))
			}
		})
	}
}

func TestRunTagRefusals(t *testing.T) {
	tests := []struct {
		name      string
		argv      []string
		truncated bool
	}{
		{"ID in use", []string{"mcptrace", "run", "--session", "taken", "--", "x"}, false},
		{"invalid ID", []string{"mcptrace", "run", "--session", "bad id!", "--", "x"}, false},
		{"missing value", []string{"mcptrace", "run", "--session"}, false},
		{"ID cut by argv truncation", []string{"mcptrace", "run", "--session", "tak"}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newWorld(t, Config{})
			first := w.spawn(initID, 900, alice, "mcptrace", "run", "--session", "taken", "--", "x")
			p := w.fork(initID, 901, alice)
			w.observe(lineage.Event{Kind: lineage.KindExec, Time: w.next(), Proc: p, UID: alice,
				Filename: "/usr/local/bin/mcptrace", Argv: tt.argv, ArgvTruncated: tt.truncated})
			if id, ok := w.tr.SessionOf(p); ok {
				t.Errorf("refused tag still put the process in session %q", id)
			}
			if st := w.tr.Stats(); st.TagsRefused != 1 || st.Active != 1 {
				t.Errorf("stats = %+v", st)
			}
			w.wantSessionOf(first, "taken")
		})
	}
}

// copilotSDK builds the situation of the Copilot SDK report: one copilot
// server process (a rule root) running logical sessions a, b and c, each
// with its MCP server started through `mcptrace exec`, each server with a
// child of its own.
type copilotSDK struct {
	*world
	host                      lineage.ID
	hostID                    string
	roots, kids               map[string]lineage.ID
	sdkClient, hostChildShell lineage.ID
}

func newCopilotSDK(t *testing.T) *copilotSDK {
	w := newWorld(t, Config{DefaultRules: true})
	c := &copilotSDK{world: w, roots: map[string]lineage.ID{}, kids: map[string]lineage.ID{}}
	c.sdkClient = w.spawn(initID, 500, alice, "python3", "conductor.py")
	c.host = w.fork(c.sdkClient, 600, alice)
	w.execFile(c.host, alice, "/home/u/.cache/github-copilot-sdk/cli/1.0.64/copilot",
		"/home/u/.cache/github-copilot-sdk/cli/1.0.64/copilot", "--headless", "--no-auto-update", "--stdio")
	c.hostID = "copilot-sdk-600"
	w.wantState(c.hostID, Active)
	for i, name := range []string{"a", "b", "c"} {
		r := w.fork(c.host, uint32(700+10*i), alice)
		w.exec(r, alice, "mcptrace", "exec", "--session", name, "--", "node", "server.js")
		w.exec(r, alice, "node", "server.js")
		c.roots[name] = r
		c.kids[name] = w.spawn(r, uint32(701+10*i), alice, "docker", "run", "-i", "--rm", "ghcr.io/github/github-mcp-server")
	}
	return c
}

func TestExecTagsNestSubSessionsInTheHostSession(t *testing.T) {
	c := newCopilotSDK(t)
	for _, name := range []string{"a", "b", "c"} {
		s := c.session(name)
		if s.Parent != c.hostID || s.Origin != OriginExec || s.Root != c.roots[name] || s.Tag != name {
			t.Errorf("sub-session %s = %+v", name, s)
		}
		c.wantSessionOf(c.kids[name], name)
	}
	c.wantSessionOf(c.host, c.hostID)
	c.wantMembers(c.hostID, c.host, c.roots["a"], c.kids["a"], c.roots["b"], c.kids["b"], c.roots["c"], c.kids["c"])
}

func TestDestroyMarkerEndsOnlyTheNamedSubSession(t *testing.T) {
	c := newCopilotSDK(t)
	marker := c.fork(c.host, 800, alice)
	acts := c.exec(marker, alice, "mcptrace", "mark", "destroy", "--session", "b")
	wantEnded(t, acts, "b")
	if r := acts[0].End.EndReason; r != ReasonMarker {
		t.Errorf("reason %q", r)
	}
	c.wantMembers("b", c.roots["b"], c.kids["b"])
	for _, id := range []string{"a", "c", c.hostID} {
		c.wantState(id, Active)
	}
	c.wantSessionOf(c.kids["a"], "a")

	// The same marker through the API, as the CLI also sends it.
	acts, err := c.tr.Mark(marker, alice, "b")
	wantErr(t, err, nil)
	wantEnded(t, acts)
	if st := c.tr.Stats(); st.MarkersAccepted != 1 || st.MarkersDuplicate != 1 || st.MarkersRefused != 0 {
		t.Errorf("stats = %+v", st)
	}
}

func TestDestroyMarkerWithoutSessionEndsTheCreatorsSession(t *testing.T) {
	tests := []struct {
		name    string
		creator func(c *copilotSDK) lineage.ID
		via     string
		want    []string
		err     error
	}{
		{"child of a sub-session root, exec", func(c *copilotSDK) lineage.ID { return c.roots["a"] }, "exec", []string{"a"}, nil},
		{"child of a sub-session root, api", func(c *copilotSDK) lineage.ID { return c.roots["a"] }, "api", []string{"a"}, nil},
		{"child of the host ends its generation with its sub-sessions, not the host", func(c *copilotSDK) lineage.ID { return c.host }, "exec", []string{"a", "b", "c", "copilot-sdk-600#1"}, nil},
		{"grandchild of a root is not enough", func(c *copilotSDK) lineage.ID { return c.kids["a"] }, "api", nil, ErrNoSession},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCopilotSDK(t)
			caller := c.fork(tt.creator(c), 900, alice)
			var acts []Action
			var err error
			if tt.via == "exec" {
				acts = c.exec(caller, alice, "mcptrace", "mark", "destroy")
			} else {
				c.exec(caller, alice, "sh", "-c", "mcptrace mark destroy")
				acts, err = c.tr.Mark(caller, alice, "")
			}
			wantErr(t, err, tt.err)
			wantEnded(t, acts, tt.want...)
			if tt.err == nil && len(tt.want) == 1 {
				for _, other := range []string{"b", "c", c.hostID} {
					c.wantState(other, Active)
				}
			}
		})
	}
}

func TestDestroyMarkerForATagEndsEveryServerOfIt(t *testing.T) {
	w := newWorld(t, Config{})
	host := w.spawn(initID, 600, alice, "mcptrace", "run", "--session", "h", "--", "agent")
	var roots []lineage.ID
	for i := range 3 {
		r := w.fork(host, uint32(700+i), alice)
		w.exec(r, alice, "mcptrace", "exec", "--session", "s1", "--", fmt.Sprintf("server%d", i))
		roots = append(roots, r)
	}
	other := w.spawn(host, 710, alice, "mcptrace", "exec", "--session", "s2", "--", "server")
	for i, id := range []string{"s1", "s1.2", "s1.3"} {
		s := w.session(id)
		if s.Tag != "s1" || s.Root != roots[i] || s.Parent != "h" {
			t.Errorf("session %s = %+v", id, s)
		}
	}
	t.Run("one server of the tag by its ID", func(t *testing.T) {
		acts, err := w.tr.Mark(host, alice, "s1.2")
		wantErr(t, err, nil)
		wantEnded(t, acts, "s1.2")
	})
	t.Run("every remaining server of the tag", func(t *testing.T) {
		acts, err := w.tr.Mark(host, alice, "s1")
		wantErr(t, err, nil)
		wantEnded(t, acts, "s1", "s1.3")
		w.wantSessionOf(other, "s2")
		w.wantState("h", Active)
	})
	t.Run("the tag again is a duplicate", func(t *testing.T) {
		acts, err := w.tr.Mark(host, alice, "s1")
		wantErr(t, err, nil)
		wantEnded(t, acts)
	})
}

func TestDestroyMarkerAuthorization(t *testing.T) {
	type setup struct {
		w            *world
		supervisor   lineage.ID // alice's process that started bob's session
		root, member lineage.ID
		stranger     lineage.ID // alice's process outside the session and its chain
	}
	build := func(t *testing.T) setup {
		w := newWorld(t, Config{})
		var s setup
		s.w = w
		s.supervisor = w.spawn(initID, 500, alice, "supervisor")
		s.root = w.fork(s.supervisor, 600, bob)
		w.exec(s.root, bob, "mcptrace", "run", "--session", "bobs", "--", "agent")
		s.member = w.spawn(s.root, 601, alice, "setuid-helper") // a member, not in the chain
		s.stranger = w.spawn(initID, 700, alice, "bash")
		return s
	}
	tests := []struct {
		name   string
		caller func(s setup) lineage.ID
		uid    uint32
		err    error
	}{
		// IDs are scoped by owner: alice's "bobs" names nothing of hers,
		// and a session she is not related to is not looked for.
		{"another user outside the chain finds no such session", func(s setup) lineage.ID { return s.stranger }, alice, ErrNoSession},
		{"a member that is not the owner is refused", func(s setup) lineage.ID { return s.member }, alice, ErrNotAuthorized},
		{"root user is allowed", func(s setup) lineage.ID { return s.stranger }, 0, nil},
		{"the owner is allowed", func(s setup) lineage.ID { return s.stranger }, bob, nil},
		{"a creator of the root is allowed", func(s setup) lineage.ID { return s.supervisor }, alice, nil},
		{"the root itself is allowed", func(s setup) lineage.ID { return s.root }, bob, nil},
		{"an unknown session is unmatched", func(s setup) lineage.ID { return s.stranger }, 0, ErrNoSession},
	}
	for _, tt := range tests {
		for _, via := range []string{"api", "exec"} {
			t.Run(tt.name+" via "+via, func(t *testing.T) {
				s := build(t)
				target := "bobs"
				if strings.HasPrefix(tt.name, "an unknown") {
					target = "nope"
				}
				var acts []Action
				var err error
				if via == "api" {
					acts, err = s.w.tr.Mark(tt.caller(s), tt.uid, target)
				} else {
					// The caller itself execs the marker, as that uid.
					acts = s.w.exec(tt.caller(s), tt.uid, "mcptrace", "mark", "destroy", "--session", target)
				}
				if via == "api" {
					wantErr(t, err, tt.err)
				}
				st := s.w.tr.Stats()
				switch tt.err {
				case nil:
					wantEnded(t, acts, "bobs#1")
					if st.MarkersAccepted != 1 {
						t.Errorf("accepted = %d", st.MarkersAccepted)
					}
				case ErrNotAuthorized:
					wantEnded(t, acts)
					s.w.wantState("bobs", Active)
					if st.MarkersRefused != 1 || st.MarkersAccepted != 0 {
						t.Errorf("stats = %+v, want one refusal", st)
					}
				case ErrNoSession:
					wantEnded(t, acts)
					s.w.wantState("bobs", Active)
					if st.MarkersUnmatched != 1 {
						t.Errorf("unmatched = %d", st.MarkersUnmatched)
					}
				}
			})
		}
	}
}

func TestRootExitEndsTheSessionAndItsSubSessions(t *testing.T) {
	newNested := func(t *testing.T) (*world, map[string]lineage.ID) {
		w := newWorld(t, Config{})
		r := map[string]lineage.ID{}
		r["h"] = w.spawn(initID, 600, alice, "mcptrace", "run", "--session", "h", "--", "agent")
		r["a"] = w.spawn(r["h"], 700, alice, "mcptrace", "exec", "--session", "a", "--", "sh", "-c", "server")
		r["a2"] = w.spawn(r["a"], 701, alice, "mcptrace", "exec", "--session", "a2", "--", "server")
		r["b"] = w.spawn(r["h"], 710, alice, "mcptrace", "exec", "--session", "b", "--", "server")
		if s := w.session("a2"); s.Parent != "a" {
			t.Fatalf("a2 nested in %q, want a", s.Parent)
		}
		return w, r
	}
	tests := []struct {
		name    string
		exit    string
		want    []string
		reasons []string
		active  []string
	}{
		{"host exit ends everything, innermost first", "h", []string{"a2", "a", "b", "h"},
			[]string{ReasonParentEnded, ReasonParentEnded, ReasonParentEnded, ReasonRootExit}, nil},
		{"sub-session root exit ends it and what it nests", "a", []string{"a2", "a"},
			[]string{ReasonParentEnded, ReasonRootExit}, []string{"h", "b"}},
		{"innermost root exit ends only it", "a2", []string{"a2"}, []string{ReasonRootExit}, []string{"h", "a", "b"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, r := newNested(t)
			acts := w.exit(r[tt.exit])
			wantEnded(t, acts, tt.want...)
			for i, a := range acts {
				if i < len(tt.reasons) && a.End.EndReason != tt.reasons[i] {
					t.Errorf("%s ended with %q, want %q", a.End.ID, a.End.EndReason, tt.reasons[i])
				}
			}
			for _, id := range tt.active {
				w.wantState(id, Active)
			}
		})
	}
}

func TestRecycledPIDIsNeverTheOldRootNorAMember(t *testing.T) {
	w := newWorld(t, Config{})
	shell := w.spawn(initID, 500, alice, "bash")
	root := w.spawn(shell, 4242, alice, "mcptrace", "run", "--session", "s", "--", "agent")
	kid := w.spawn(root, 4243, alice, "server")

	t.Run("root exits, then its PID is reused outside the session", func(t *testing.T) {
		wantEnded(t, w.exit(root), "s")
		w.exit(kid)
		reused := w.spawn(shell, 4242, alice, "node", "other.js")
		child := w.spawn(reused, 4300, alice, "worker")
		w.wantMembers("s", root, kid)
		w.wantSessionOf(reused, "")
		w.wantSessionOf(child, "")
		// A child of the new process marking "its" session finds none.
		m := w.fork(reused, 4301, alice)
		wantEnded(t, w.exec(m, alice, "mcptrace", "mark", "destroy"))
		if st := w.tr.Stats(); st.MarkersUnmatched != 1 || st.MarkersDuplicate != 0 {
			t.Errorf("stats = %+v", st)
		}
		if acts := w.exit(reused); len(acts) > 0 {
			t.Errorf("exit of the reused PID ended %v", ended(acts))
		}
	})

	t.Run("a fork reusing a live root's PID ends the session as gone", func(t *testing.T) {
		w := newWorld(t, Config{})
		root := w.spawn(initID, 5000, alice, "mcptrace", "run", "--session", "t", "--", "agent")
		// The root's exit event is lost; the PID shows up again.
		reused, acts := w.forkActs(initID, 5000, alice)
		wantEnded(t, acts, "t")
		if acts[0].End.EndReason != ReasonRootGone {
			t.Errorf("reason %q, want %q", acts[0].End.EndReason, ReasonRootGone)
		}
		w.wantMembers("t", root)
		w.wantSessionOf(reused, "")
		if _, err := w.tr.Begin(reused, "t", ""); err != nil {
			t.Errorf("the reused PID cannot begin a session: %v", err)
		}
	})
}

func TestProcessesWithUnknownCreatorsAreNotMembers(t *testing.T) {
	w := newWorld(t, Config{})
	root := w.spawn(initID, 600, alice, "mcptrace", "run", "--session", "s", "--", "agent")
	known := w.spawn(root, 601, alice, "server")

	// An exec for a process whose fork was never seen: its parent says the
	// root, but the graph has no creator for it.
	orphan := lineage.ID{PID: 650, Start: w.next()}
	w.observe(lineage.Event{Kind: lineage.KindExec, Time: w.next(), Proc: orphan, Parent: root, UID: alice,
		Filename: "/usr/bin/node", Argv: []string{"node", "x.js"}})
	orphanKid := w.fork(orphan, 651, alice)

	// A fork naming a creator the graph never saw.
	ghost := lineage.ID{PID: 660, Start: w.next()}
	ghostKid, _ := w.forkActs(ghost, 661, alice)

	w.wantMembers("s", root, known)
	for _, p := range []lineage.ID{orphan, orphanKid, ghost, ghostKid} {
		w.wantSessionOf(p, "")
	}
	// Nor can such a process mark the session as a child of its root.
	m := w.fork(orphan, 670, alice)
	wantEnded(t, w.exec(m, alice, "mcptrace", "mark", "destroy"))
	w.wantState("s", Active)

	t.Run("a child of a stand-in creator joins once the creator's fork is seen", func(t *testing.T) {
		w := newWorld(t, Config{})
		q := lineage.ID{PID: 800, Start: w.next()}
		// The child's fork arrives before anything about its creator: the
		// graph stands in for q and flags the child GapUnknownCreator.
		kid, _ := w.forkActs(q, 801, alice)
		w.observe(lineage.Event{Kind: lineage.KindExec, Time: w.next(), Proc: q, UID: alice,
			Filename: "/usr/local/bin/mcptrace", Argv: []string{"mcptrace", "run", "--session", "q", "--", "x"}})
		w.wantMembers("q", q)
		w.wantSessionOf(kid, "")
		// q's own fork arrives: the graph clears the flag.
		w.observe(lineage.Event{Kind: lineage.KindFork, Time: q.Start, Proc: q, Creator: initID, Parent: initID, UID: alice})
		w.wantMembers("q", q, kid)
		w.wantSessionOf(kid, "q")
	})
}

func TestDaemonizedDescendantsStayMembers(t *testing.T) {
	w := newWorld(t, Config{})
	root := w.spawn(initID, 600, alice, "mcptrace", "run", "--session", "s", "--", "agent")
	sh := w.spawn(root, 601, alice, "sh", "-c", "server --daemon")
	d := w.spawn(sh, 602, alice, "server", "--daemon")
	// Double fork + setsid: the middle process exits, the daemon is
	// reparented to init.
	daemon := w.fork(d, 603, alice)
	w.exit(d)
	w.observe(lineage.Event{Kind: lineage.KindExec, Time: w.next(), Proc: daemon, Parent: initID, UID: alice,
		Filename: "/usr/bin/server", Argv: []string{"server", "--worker"}})
	w.exit(sh)
	w.wantMembers("s", root, sh, d, daemon)
	w.wantSessionOf(daemon, "s")
	wantEnded(t, w.exit(root), "s")
	w.wantMembers("s", root, sh, d, daemon)
}

func TestOneSessionPerHostThroughWrappers(t *testing.T) {
	tests := []struct {
		name   string
		wantID string
		start  func(w *world, shell lineage.ID) lineage.ID // returns the wrapper
	}{
		{"codex node wrapper spawns the native binary", "codex-1100", func(w *world, shell lineage.ID) lineage.ID {
			p := w.fork(shell, 1100, alice)
			w.execFile(p, alice, "/usr/local/bin/codex", "/usr/bin/env", "node", "/usr/local/bin/codex")
			w.execFile(p, alice, "/usr/bin/node", "node", "/usr/local/bin/codex")
			return p
		}},
		{"mcptrace run -- codex", "run-1100", func(w *world, shell lineage.ID) lineage.ID {
			p := w.fork(shell, 1100, alice)
			w.exec(p, alice, "mcptrace", "run", "--", "codex")
			w.execFile(p, alice, "/usr/local/bin/codex", "/usr/bin/env", "node", "/usr/local/bin/codex")
			return p
		}},
	}
	native := "/usr/lib/node_modules/@openai/codex/vendor/x86_64-unknown-linux-musl/codex/codex"
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newWorld(t, Config{DefaultRules: true})
			shell := w.spawn(initID, 900, alice, "bash")
			wrapper := tt.start(w, shell)
			n := w.fork(wrapper, 1101, alice)
			w.execFile(n, alice, native, native)
			server := w.spawn(n, 1102, alice, "npx", "-y", "@modelcontextprotocol/server-github")
			if got := sessionIDs(w.tr.Sessions()); !slices.Equal(got, []string{tt.wantID}) {
				t.Fatalf("sessions %v, want [%s]", got, tt.wantID)
			}
			w.wantSessionOf(server, tt.wantID)
			if st := w.tr.Stats(); st.Deduplicated != 1 {
				t.Errorf("deduplicated = %d, want 1", st.Deduplicated)
			}
			wantEnded(t, w.exit(wrapper), tt.wantID)
		})
	}
}

func TestHostOfAnotherRuleInsideASessionIsNested(t *testing.T) {
	w := newWorld(t, Config{DefaultRules: true})
	ext := w.fork(initID, 600, alice)
	w.execFile(ext, alice, "/usr/share/code/code", "/usr/share/code/code", "--type=utility",
		"--utility-sub-type=node.mojom.NodeService", "--vscode-utility-kind=extensionHost")
	claude := w.fork(ext, 601, alice)
	bin := "/home/u/.vscode/extensions/anthropic.claude-code-2.0.14-linux-x64/resources/native-binary/claude"
	w.execFile(claude, alice, bin, bin, "--output-format", "stream-json")
	s := w.session("claude-601")
	if s.Parent != "vscode-600" || s.Origin != "rule:claude" {
		t.Errorf("claude session = %+v", s)
	}
	wantEnded(t, w.exit(ext), "claude-601", "vscode-600")
}

func TestOutOfOrderEvents(t *testing.T) {
	t.Run("a root whose exit was applied first begins and ends at once", func(t *testing.T) {
		w := newWorld(t, Config{})
		p := w.fork(initID, 600, alice)
		kid := w.fork(p, 601, alice)
		execTime := w.next()
		w.exit(p)
		acts := w.observe(lineage.Event{Kind: lineage.KindExec, Time: execTime, Proc: p, UID: alice,
			Filename: "/usr/local/bin/mcptrace", Argv: []string{"mcptrace", "run", "--session", "late", "--", "x"}})
		wantEnded(t, acts, "late")
		w.wantMembers("late", p, kid)
	})
	t.Run("a late fork nests a top-level sub-session", func(t *testing.T) {
		w := newWorld(t, Config{})
		host := w.spawn(initID, 600, alice, "mcptrace", "run", "--session", "h", "--", "agent")
		r := lineage.ID{PID: 700, Start: w.next()}
		w.observe(lineage.Event{Kind: lineage.KindExec, Time: w.next(), Proc: r, UID: alice,
			Filename: "/usr/local/bin/mcptrace", Argv: []string{"mcptrace", "exec", "--session", "a", "--", "srv"}})
		if s := w.session("a"); s.Parent != "" {
			t.Fatalf("parent %q before the fork", s.Parent)
		}
		w.observe(lineage.Event{Kind: lineage.KindFork, Time: r.Start, Proc: r, Creator: host, Parent: host, UID: alice})
		if s := w.session("a"); s.Parent != "h" {
			t.Errorf("parent %q after the fork, want h", s.Parent)
		}
		wantEnded(t, w.exit(host), "a", "h")
	})
	t.Run("the same tag exec twice begins one session", func(t *testing.T) {
		w := newWorld(t, Config{})
		p := w.fork(initID, 600, alice)
		ev := lineage.Event{Kind: lineage.KindExec, Time: w.next(), Proc: p, UID: alice,
			Filename: "/usr/local/bin/mcptrace", Argv: []string{"mcptrace", "exec", "--session", "a", "--", "srv"}}
		w.observe(ev)
		w.observe(ev)
		if got := sessionIDs(w.tr.Sessions()); !slices.Equal(got, []string{"a"}) {
			t.Errorf("sessions %v", got)
		}
		if st := w.tr.Stats(); st.TagsRefused != 0 {
			t.Errorf("tags refused = %d", st.TagsRefused)
		}
	})
}

func TestScanFindsProcessesThatPredateTheAgent(t *testing.T) {
	g := lineage.New(lineage.Config{})
	tr, err := NewTracker(g, Config{DefaultRules: true, Now: func() uint64 { return 10 * sec }}, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	exact := func(pid uint32, start uint64) lineage.ID { return lineage.ID{PID: pid, Start: start} }
	coarse := func(x lineage.ID) lineage.ID {
		return lineage.ID{PID: x.PID, Start: x.Tick() * lineage.TickNS}
	}
	shell := exact(500, 1*sec+3)
	claude := exact(600, 2*sec+7)
	server := exact(601, 2*sec+900)
	copilot := exact(700, 3*sec+11)
	tagged := exact(701, 3*sec+500) // still shows `mcptrace exec` in /proc
	execd := exact(702, 4*sec+3)    // exec'd past the tag; the agent saw the exec events
	cli := "/home/u/.cache/github-copilot-sdk/cli/1.0.64/copilot"

	// Events the sensor buffered before the seed: 702's tag and exec.
	for i, argv := range [][]string{{"mcptrace", "exec", "--session", "b", "--", "node", "server.js"}, {"node", "server.js"}} {
		ev := lineage.Event{Kind: lineage.KindExec, Time: 5*sec + uint64(i), Proc: execd, UID: alice, Argv: argv, Filename: "/usr/bin/" + argv[0]}
		g.Apply(ev)
	}
	g.Seed([]lineage.Snapshot{
		{ID: lineage.ID{PID: 1}, Comm: "systemd", Filename: "/usr/lib/systemd/systemd", Argv: []string{"/sbin/init"}},
		{ID: coarse(shell), PPID: 1, UID: alice, Comm: "bash", Filename: "/usr/bin/bash", Argv: []string{"-bash"}},
		{ID: coarse(claude), PPID: 500, UID: alice, Comm: "claude", Filename: "/home/u/.local/share/claude/versions/2.0.14", Argv: []string{"claude"}},
		{ID: coarse(server), PPID: 600, UID: alice, Comm: "node", Filename: "/usr/bin/node", Argv: []string{"node", "/x/server-github/dist/index.js"}},
		{ID: coarse(copilot), PPID: 500, UID: alice, Comm: "copilot", Filename: cli, Argv: []string{cli, "--headless", "--no-auto-update", "--stdio"}},
		{ID: coarse(tagged), PPID: 700, UID: alice, Comm: "mcptrace", Filename: "/usr/local/bin/mcptrace", Argv: []string{"mcptrace", "exec", "--session", "a", "--", "node", "server.js"}},
		{ID: coarse(execd), PPID: 700, UID: alice, Comm: "node", Filename: "/usr/bin/node", Argv: []string{"node", "server.js"}},
	}, 6*sec)

	wantEnded(t, tr.Scan())
	want := []struct{ id, parent, origin string }{
		{"claude-600", "", "rule:claude"},
		{"copilot-sdk-700", "", "rule:copilot-sdk"},
		{"a", "copilot-sdk-700", OriginExec},
		{"b", "copilot-sdk-700", OriginExec},
	}
	check := func(t *testing.T) {
		t.Helper()
		ss := tr.Sessions()
		if len(ss) != len(want) {
			t.Fatalf("sessions %v", sessionIDs(ss))
		}
		for _, wt := range want {
			s, ok := tr.Find(wt.id)
			if !ok || s.Parent != wt.parent || s.Origin != wt.origin || s.State != Active || s.Owner != alice {
				t.Errorf("session %s = %+v, %v; want parent %q origin %q", wt.id, s, ok, wt.parent, wt.origin)
			}
		}
		if id, _ := tr.SessionOf(server); id != "claude-600" {
			t.Errorf("server in %q", id)
		}
	}
	t.Run("finds hosts and tagged servers", check)
	t.Run("scanning again changes nothing", func(t *testing.T) {
		wantEnded(t, tr.Scan())
		check(t)
		if st := tr.Stats(); st.Begun["rule:claude"] != 1 || st.Begun[OriginExec] != 2 {
			t.Errorf("begun = %v", st.Begun)
		}
	})
	t.Run("the exact exit of a seeded root ends its session", func(t *testing.T) {
		ev := lineage.Event{Kind: lineage.KindExit, Time: 11 * sec, Proc: claude}
		g.Apply(ev)
		acts := tr.Observe(ev)
		wantEnded(t, acts, "claude-600")
		if len(acts) == 1 && acts[0].End.Root != claude {
			t.Errorf("root %v, want the exact %v", acts[0].End.Root, claude)
		}
	})
	t.Run("a root lost between scans ends as gone", func(t *testing.T) {
		// A repair no longer finds 701.
		g.Repair([]lineage.Snapshot{
			{ID: lineage.ID{PID: 1}, Comm: "systemd"},
			{ID: coarse(shell), PPID: 1, UID: alice},
			{ID: coarse(copilot), PPID: 500, UID: alice, Filename: cli, Argv: []string{cli, "--headless"}},
			{ID: coarse(execd), PPID: 700, UID: alice},
			{ID: coarse(server), PPID: 600, UID: alice},
		}, 12*sec)
		acts := tr.Scan()
		wantEnded(t, acts, "a")
		if len(acts) == 1 && acts[0].End.EndReason != ReasonRootGone {
			t.Errorf("reason %q", acts[0].End.EndReason)
		}
	})
}

func TestBegin(t *testing.T) {
	w := newWorld(t, Config{})
	host := w.spawn(initID, 600, alice, "agent")
	worker := w.spawn(host, 601, alice, "worker")
	dead := w.spawn(host, 602, alice, "gone")
	w.exit(dead)
	free := w.spawn(host, 603, alice, "other")
	kthread := lineage.ID{PID: 2, Start: 1}
	w.g.Seed([]lineage.Snapshot{{ID: lineage.ID{PID: 2}, Kernel: true, Comm: "kthreadd"}}, 2)

	s, err := w.tr.Begin(host, "", "")
	if err != nil || s.ID != "api-600" || s.Origin != OriginAPI || s.State != Active {
		t.Fatalf("Begin = %+v, %v", s, err)
	}
	tests := []struct {
		name           string
		root           lineage.ID
		id, origin     string
		wantID, parent string
		err            error
	}{
		{"nested in the enclosing session", worker, "w", "", "w", "api-600", nil},
		{"a root twice", host, "again", "", "", "", ErrAlreadyRoot},
		{"an ID in use", free, "api-600", "", "", "", ErrIDInUse},
		{"an invalid ID", free, "no spaces", "", "", "", ErrBadID},
		{"an exited process", dead, "", "", "", "", ErrExited},
		{"an unknown process", lineage.ID{PID: 9999, Start: 1}, "", "", "", "", ErrUnknownProcess},
		{"init", initID, "", "", "", "", ErrNotRootable},
		{"a kernel thread", kthread, "", "", "", "", ErrNotRootable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := w.tr.Begin(tt.root, tt.id, tt.origin)
			wantErr(t, err, tt.err)
			if tt.err == nil && (s.ID != tt.wantID || s.Parent != tt.parent) {
				t.Errorf("Begin = %+v", s)
			}
		})
	}
	t.Run("an unknown origin", func(t *testing.T) {
		if _, err := w.tr.Begin(free, "", "magic"); err == nil {
			t.Error("accepted")
		}
	})
	t.Run("a later outer session adopts sessions below it", func(t *testing.T) {
		w := newWorld(t, Config{})
		outer := w.spawn(initID, 600, alice, "agent")
		inner := w.spawn(outer, 601, alice, "mcptrace", "exec", "--session", "in", "--", "srv")
		if _, err := w.tr.Begin(outer, "out", OriginAPI); err != nil {
			t.Fatal(err)
		}
		if s := w.session("in"); s.Parent != "out" {
			t.Errorf("inner parent %q, want out", s.Parent)
		}
		w.wantSessionOf(inner, "in")
		wantEnded(t, w.exit(outer), "in", "out")
	})
}

func TestEndedSessionsAreRetainedThenDropped(t *testing.T) {
	w := newWorld(t, Config{Retention: time.Minute, MaxEnded: 2})
	for i := range 3 {
		p := w.spawn(initID, uint32(600+i), alice, "mcptrace", "run", "--", "x")
		w.exit(p)
	}
	t.Run("at most MaxEnded are kept", func(t *testing.T) {
		if got := sessionIDs(w.tr.Sessions()); !slices.Equal(got, []string{"run-601", "run-602"}) {
			t.Errorf("sessions %v", got)
		}
		if _, ok := w.tr.Find("run-600"); ok {
			t.Error("the oldest ended session is still there")
		}
	})
	t.Run("retention drops the rest", func(t *testing.T) {
		active := w.spawn(initID, 700, alice, "mcptrace", "run", "--session", "live", "--", "x")
		wantEnded(t, w.tr.Sweep(w.clock+61*sec))
		if got := sessionIDs(w.tr.Sessions()); !slices.Equal(got, []string{"live"}) {
			t.Errorf("sessions %v", got)
		}
		w.wantSessionOf(active, "live")
		if st := w.tr.Stats(); st.Dropped != 3 || st.Retained != 0 || st.Active != 1 || st.Ended[OriginRun] != 3 {
			t.Errorf("stats = %+v", st)
		}
	})
}

func TestSessionJSON(t *testing.T) {
	s := Session{ID: "a", Tag: "a", Root: lineage.ID{PID: 7, Start: 9}, Origin: OriginRun, State: Active, Generation: 2,
		Markers: []Marker{{Ended: 1, At: 12, Via: "api", Sender: lineage.ID{PID: 8, Start: 10}, SenderUID: 1000}}}
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var back Session
	if err := json.Unmarshal(b, &back); err != nil || !reflect.DeepEqual(back, s) {
		t.Errorf("round trip %s → %+v, %v", b, back, err)
	}
}

func TestConcurrentUse(t *testing.T) {
	w := newWorld(t, Config{DefaultRules: true})
	host := w.spawn(initID, 600, alice, "mcptrace", "run", "--session", "h", "--", "agent")
	var wg sync.WaitGroup
	var mu sync.Mutex // the world's clock and the graph feed are one stream
	for i := range 4 {
		wg.Go(func() {
			for j := range 50 {
				mu.Lock()
				p := w.fork(host, uint32(1000+i*100+j), alice)
				w.exec(p, alice, "mcptrace", "exec", "--session", fmt.Sprintf("s%d", i), "--", "srv")
				mu.Unlock()
				w.tr.Members(w.ref("h"))
				w.tr.SessionOf(p)
				w.tr.Sessions()
				w.tr.Stats()
				if j%10 == 0 {
					w.tr.Mark(host, alice, fmt.Sprintf("s%d", i))
				}
			}
		})
	}
	wg.Wait()
	if st := w.tr.Stats(); st.Begun[OriginExec] != 200 {
		t.Errorf("begun = %v", st.Begun)
	}
}

func TestWithinPIDIgnoresEverythingOutsideItsSubtree(t *testing.T) {
	// 500 is a test binary that narrows its agent to itself; 400 is
	// another test (or anything else) on the same node.
	setup := func(t *testing.T) (w *world, scope, inside, outside lineage.ID) {
		w = newWorld(t, Config{WithinPID: 500, DefaultRules: true})
		scope = w.spawn(initID, 500, 0, "/tmp/go-build/agent.test")
		outside = w.spawn(initID, 400, 0, "mcptrace", "run", "--session", "theirs", "--", "sh")
		inside = w.spawn(scope, 501, 0, "mcptrace", "run", "--session", "mine", "--", "sh")
		return w, scope, inside, outside
	}
	t.Run("a tag inside begins a session, one outside nothing", func(t *testing.T) {
		w, _, _, _ := setup(t)
		w.wantState("mine", Active)
		if _, ok := w.tr.Find("theirs"); ok {
			t.Error("a tag outside the scope began a session")
		}
		if st := w.tr.Stats(); st.TagsRefused != 0 || st.Active != 1 {
			t.Errorf("stats %+v, want 1 active and no refused tag", st)
		}
	})
	t.Run("a host rule matches only inside", func(t *testing.T) {
		w, scope, _, _ := setup(t)
		w.spawn(initID, 410, alice, "claude")
		w.spawn(scope, 510, alice, "claude")
		var got []string
		for _, s := range w.tr.Sessions() {
			if s.Origin == OriginRule+"claude" {
				got = append(got, fmt.Sprint(s.Root.PID))
			}
		}
		if fmt.Sprint(got) != "[510]" {
			t.Errorf("claude sessions rooted at %v, want [510]", got)
		}
	})
	t.Run("a destroy marker exec'd outside ends nothing", func(t *testing.T) {
		w, _, _, outside := setup(t)
		m := w.fork(outside, 420, 0)
		if acts := w.exec(m, 0, "mcptrace", "mark", "destroy", "--session", "mine"); len(acts) > 0 {
			t.Errorf("marker from outside ended %v", ended(acts))
		}
		w.wantState("mine", Active)
	})
	t.Run("an API marker from outside is refused even for uid 0", func(t *testing.T) {
		w, _, _, outside := setup(t)
		acts, err := w.tr.Mark(outside, 0, "mine")
		wantErr(t, err, ErrOutOfScope)
		wantErr(t, err, ErrNotAuthorized)
		wantEnded(t, acts)
		w.wantState("mine", Active)
	})
	t.Run("Begin outside is refused", func(t *testing.T) {
		w, _, _, outside := setup(t)
		_, err := w.tr.Begin(outside, "x", "")
		wantErr(t, err, ErrOutOfScope)
	})
	t.Run("Scan skips tagged processes outside", func(t *testing.T) {
		w, scope, _, _ := setup(t)
		// Known to the graph only, as a /proc seed or repair finds them.
		for _, x := range []struct {
			creator lineage.ID
			pid     uint32
			id      string
		}{{initID, 430, "seeded-out"}, {scope, 530, "seeded-in"}} {
			p := lineage.ID{PID: x.pid, Start: w.next()}
			w.g.Apply(lineage.Event{Kind: lineage.KindFork, Time: p.Start, Proc: p, Creator: x.creator, Parent: x.creator})
			w.g.Apply(lineage.Event{Kind: lineage.KindExec, Time: w.next(), Proc: p, Comm: "mcptrace", Filename: "/usr/bin/mcptrace",
				Argv: []string{"mcptrace", "run", "--session", x.id, "--", "sh"}})
		}
		w.tr.Scan()
		w.wantState("seeded-in", Active)
		if _, ok := w.tr.Find("seeded-out"); ok {
			t.Error("Scan began a session outside the scope")
		}
	})
	t.Run("a recycled scope PID does not widen the scope", func(t *testing.T) {
		w, scope, _, _ := setup(t)
		w.exit(scope)
		again := w.spawn(initID, 500, 0, "sh")
		w.spawn(again, 540, 0, "mcptrace", "run", "--session", "recycled", "--", "sh")
		if _, ok := w.tr.Find("recycled"); ok {
			t.Error("a process under the recycled scope PID began a session")
		}
	})
}

func TestEndedSessionWithALiveMemberOutlivesItsRetention(t *testing.T) {
	w := newWorld(t, Config{Retention: time.Minute})
	leaky := w.spawn(initID, 600, alice, "mcptrace", "run", "--session", "leaky", "--", "x")
	orphan := w.spawn(leaky, 601, alice, "node", "server.js")
	clean := w.spawn(initID, 610, alice, "mcptrace", "run", "--session", "clean", "--", "x")
	gone := w.spawn(clean, 611, alice, "node", "server.js")
	w.exit(gone)
	w.exit(clean)
	w.exit(leaky)
	wantEnded(t, w.tr.Sweep(w.clock+61*sec))
	if got := sessionIDs(w.tr.Sessions()); !slices.Equal(got, []string{"leaky"}) {
		t.Fatalf("after the retention: sessions %v, want only leaky (its member %v lives)", got, orphan)
	}
	w.exit(orphan)
	wantEnded(t, w.tr.Sweep(w.clock+61*sec))
	if got := sessionIDs(w.tr.Sessions()); len(got) != 0 {
		t.Fatalf("once its last member exited: sessions %v, want none", got)
	}
}
