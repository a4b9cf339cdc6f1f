package lineage

import (
	"reflect"
	"slices"
	"testing"
)

// Common cast. init is seeded from /proc (coarse start 0) in most tests and
// named by events with its exact start.
var (
	initID = id(1, 5_000_001)
	host   = id(1000, 1*sec+101)
)

// seedInit seeds PID 1 the way the agent does at start.
func seedInit(g *Graph) {
	g.Seed([]Snapshot{{ID: coarse(initID), Comm: "systemd", Filename: "/usr/lib/systemd/systemd", Argv: []string{"/sbin/init"}}}, 1)
}

func TestApplyRecycledPIDIsNewNode(t *testing.T) {
	old := id(4242, 2*sec+7)
	reused := id(4242, 9*sec+13)
	tests := []struct {
		name   string
		events []Event
		check  func(t *testing.T, g *Graph)
	}{
		{
			name: "alive old node is marked exited without exit",
			events: []Event{
				forkEv(old, host),
				execEv(old.Start+1, old, "sleep", "100"),
				forkEv(reused, host),
			},
			check: func(t *testing.T, g *Graph) {
				o := mustGet(t, g, old)
				if !o.Exited || o.Gaps&GapNoExit == 0 || o.ExitTime != 0 {
					t.Errorf("old node: exited=%v gaps=%v exit_time=%d, want exited with no_exit and unknown time", o.Exited, o.Gaps, o.ExitTime)
				}
				if got := argvs(o); !reflect.DeepEqual(got[len(got)-1], []string{"sleep", "100"}) {
					t.Errorf("old node images changed: %v", got)
				}
			},
		},
		{
			name: "exited old node is left exactly as it was",
			events: []Event{
				forkEv(old, host),
				exitEv(old.Start+5, old, 3),
				forkEv(reused, host),
			},
			check: func(t *testing.T, g *Graph) {
				o := mustGet(t, g, old)
				if !o.Exited || o.ExitCode != 3 || o.ExitTime != old.Start+5 || o.Gaps != 0 {
					t.Errorf("old node = %+v, want untouched exit(3)", o)
				}
			},
		},
		{
			name: "late fork of the older identity does not revive it",
			events: []Event{
				forkEv(reused, host),
				forkEv(old, host),
			},
			check: func(t *testing.T, g *Graph) {
				if o := mustGet(t, g, old); !o.Exited || o.Gaps&GapNoExit == 0 {
					t.Errorf("older identity alive after a newer one exists: %+v", o)
				}
			},
		},
		{
			name: "late real exit replaces the inferred one",
			events: []Event{
				forkEv(old, host),
				forkEv(reused, host),
				exitEv(old.Start+9, old, 5),
			},
			check: func(t *testing.T, g *Graph) {
				o := mustGet(t, g, old)
				if !o.Exited || o.ExitCode != 5 || o.ExitTime != old.Start+9 || o.Gaps&GapNoExit != 0 {
					t.Errorf("old node = %+v, want the real exit(5) without no_exit", o)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := newGraph()
			seedInit(g)
			g.Apply(forkEv(host, initID))
			apply(g, tt.events...)
			checkInvariants(t, g)

			n := mustGet(t, g, reused)
			if n.Exited || n.Gaps != 0 || n.ID != reused {
				t.Errorf("new node = %+v, want alive without gaps", n)
			}
			if p, _ := g.Lookup(4242); p.ID != reused {
				t.Errorf("Lookup(4242) = %v, want the new node %v", p.ID, reused)
			}
			equalIDs(t, "Children(host)", ids(g.Children(host)), []ID{old, reused})
			tt.check(t, g)
		})
	}
}

func TestApplyDoubleForkWithDeadIntermediateKeepsChain(t *testing.T) {
	npm := id(2000, 2*sec+1)
	sh := id(2001, 2*sec+50_000_003)
	node := id(2002, 2*sec+90_000_007)
	orphanParent := Event{Kind: KindExec, Time: 3*sec + 5, Proc: node, Parent: initID,
		Filename: "/usr/bin/node", Argv: []string{"node", "server.js"}}
	tests := []struct {
		name   string
		events []Event
	}{
		{"in order", []Event{
			forkEv(npm, host), forkEv(sh, npm), forkEv(node, sh),
			exitEv(3*sec, sh, 0), exitEv(3*sec+1, npm, 0), orphanParent,
		}},
		{"wrappers exit before the grandchild's fork is applied", []Event{
			forkEv(npm, host), forkEv(sh, npm), exitEv(3*sec, sh, 0), exitEv(3*sec+1, npm, 0),
			forkEv(node, sh), orphanParent,
		}},
		{"grandchild events before its creators' forks", []Event{
			orphanParent, forkEv(node, sh), forkEv(sh, npm), exitEv(3*sec, sh, 0),
			forkEv(npm, host), exitEv(3*sec+1, npm, 0),
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := newGraph()
			seedInit(g)
			g.Apply(forkEv(host, initID))
			apply(g, tt.events...)
			checkInvariants(t, g)

			if n := g.Retire(node.Start + 100*uint64(DefaultRetention)); n != 0 {
				t.Errorf("Retire dropped %d nodes of a chain with a live leaf", n)
			}
			equalIDs(t, "Ancestors(node)", ids(g.Ancestors(node)), []ID{node, sh, npm, host, initID})
			equalIDs(t, "Descendants(host)", ids(g.Descendants(host)), []ID{host, npm, sh, node})
			n := mustGet(t, g, node)
			if n.Parent != initID || n.Creator != sh {
				t.Errorf("node parent=%v creator=%v, want parent init (reparented) and creator sh", n.Parent, n.Creator)
			}
			if n.Gaps != 0 {
				t.Errorf("node gaps = %v, want none once every event arrived", n.Gaps)
			}
			for _, x := range []ID{npm, sh} {
				if p := mustGet(t, g, x); !p.Exited {
					t.Errorf("%v alive, want exited", x)
				}
			}
		})
	}
}

func TestApplyExecChainRecordsEveryImage(t *testing.T) {
	child := id(3000, 4*sec+3)
	sh := execEv(4*sec+10, child, "sh", "-c", "env FOO=1 true")
	env := execEv(4*sec+20, child, "env", "FOO=1", "true")
	tru := execEv(4*sec+30, child, "true")
	tests := []struct {
		name   string
		events []Event
	}{
		{"in order", []Event{forkEv(child, host), sh, env, tru}},
		{"duplicate exec events", []Event{forkEv(child, host), sh, sh, env, tru, env}},
		{"execs out of order", []Event{forkEv(child, host), env, tru, sh}},
		{"execs before the fork", []Event{tru, env, sh, forkEv(child, host)}},
	}
	want := [][]string{{"bash"}, {"sh", "-c", "env FOO=1 true"}, {"env", "FOO=1", "true"}, {"true"}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := newGraph()
			seedInit(g)
			apply(g, forkEv(host, initID), execEv(host.Start+1, host, "bash"))
			apply(g, tt.events...)
			checkInvariants(t, g)
			p := mustGet(t, g, child)
			if got := argvs(p); !reflect.DeepEqual(got, want) {
				t.Errorf("argv chain = %q, want %q", got, want)
			}
			wantSrc := []Source{SourceInherited, SourceKernel, SourceKernel, SourceKernel}
			if got := sources(p); !slices.Equal(got, wantSrc) {
				t.Errorf("sources = %v, want %v", got, wantSrc)
			}
			if p.Current().Filename != "/usr/bin/true" || p.Comm != "true" {
				t.Errorf("current = %q comm %q, want /usr/bin/true, true", p.Current().Filename, p.Comm)
			}
		})
	}
}

// Every order of a process's fork, exec and exit must build the same node
// as the in-order stream.
func TestApplyOutOfOrderCompletesNodeWithoutDuplicating(t *testing.T) {
	child := id(3100, 5*sec+7)
	fork := forkEv(child, host)
	fork.UID = 1000
	fork.CgroupID = 77
	exec := execEv(5*sec+20, child, "node", "mcp-server.js")
	exit := exitEv(5*sec+90, child, 0)
	exit.Signal = 15
	perms := [][]Event{
		{fork, exec, exit}, {fork, exit, exec}, {exec, fork, exit},
		{exec, exit, fork}, {exit, fork, exec}, {exit, exec, fork},
	}
	run := func(evs []Event) *Graph {
		g := newGraph()
		seedInit(g)
		apply(g, forkEv(host, initID), execEv(host.Start+1, host, "bash"))
		apply(g, evs...)
		return g
	}
	want := mustGet(t, run(perms[0]), child)
	for _, evs := range perms {
		name := evs[0].Kind.String() + "," + evs[1].Kind.String() + "," + evs[2].Kind.String()
		t.Run(name, func(t *testing.T) {
			g := run(evs)
			checkInvariants(t, g)
			if got := mustGet(t, g, child); !reflect.DeepEqual(got, want) {
				t.Errorf("node = %+v\nwant   %+v", got, want)
			}
			if n := len(g.Processes()); n != 3 {
				t.Errorf("%d processes, want 3 (init, host, child)", n)
			}
		})
	}
}

// An exec delivered twice — from an agent's saved journal, where argv is
// redacted, and again from the kernel's ring buffer after a crash — is
// one image.
func TestApplyDuplicateExecIgnoredEvenWithRedactedArgv(t *testing.T) {
	child := id(3300, 6*sec+1)
	raw := execEv(6*sec+2, child, "server", "--token", "s3cret")
	redacted := execEv(6*sec+2, child, "server", "--token", "<redacted>")
	g := newGraph()
	apply(g, forkEv(child, host), redacted, raw, raw)
	checkInvariants(t, g)
	if got := argvs(mustGet(t, g, child)); len(got) != 1 {
		t.Errorf("images %q, want the one exec", got)
	}
	// A second exec of the same program at another time is a new image.
	apply(g, execEv(6*sec+3, child, "server", "--token", "s3cret"))
	if got := argvs(mustGet(t, g, child)); len(got) != 2 {
		t.Errorf("images %q, want a second for the exec at another time", got)
	}
}

func TestApplyDuplicateExitIgnored(t *testing.T) {
	child := id(3200, 6*sec+1)
	tests := []struct {
		name   string
		events []Event
	}{
		{"same exit twice", []Event{forkEv(child, host), exitEv(6*sec+5, child, 1), exitEv(6*sec+5, child, 1)}},
		{"second exit differs", []Event{forkEv(child, host), exitEv(6*sec+5, child, 1), exitEv(6*sec+8, child, 9)}},
		{"exit of unknown process twice", []Event{exitEv(6*sec+5, child, 1), exitEv(6*sec+8, child, 9)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := newGraph()
			apply(g, tt.events...)
			checkInvariants(t, g)
			p := mustGet(t, g, child)
			if !p.Exited || p.ExitCode != 1 || p.ExitTime != 6*sec+5 {
				t.Errorf("exit = %v code %d at %d, want the first exit", p.Exited, p.ExitCode, p.ExitTime)
			}
			if s := g.Stats(); s.DuplicateExits != 1 {
				t.Errorf("DuplicateExits = %d, want 1", s.DuplicateExits)
			}
		})
	}
}

func TestApplyUnknownCreatorGetsPlaceholder(t *testing.T) {
	ghost := id(5000, 1*sec+77)
	child := id(5001, 7*sec+1)
	tests := []struct {
		name  string
		extra []Event // applied after the child's fork
		check func(t *testing.T, g *Graph)
	}{
		{
			name: "placeholder stands in",
			check: func(t *testing.T, g *Graph) {
				p := mustGet(t, g, ghost)
				if p.Exited || p.Gaps != GapNoFork || len(p.Images) != 0 || !p.Creator.IsZero() {
					t.Errorf("placeholder = %+v, want alive root flagged no_fork", p)
				}
				equalIDs(t, "Roots", g.Roots(), []ID{coarse(initID), ghost})
				if c := mustGet(t, g, child); c.Gaps != GapUnknownCreator {
					t.Errorf("child gaps = %v, want unknown_creator", c.Gaps)
				}
			},
		},
		{
			name:  "placeholder's own fork completes it",
			extra: []Event{forkEv(ghost, initID)},
			check: func(t *testing.T, g *Graph) {
				p := mustGet(t, g, ghost)
				if p.Gaps&GapNoFork != 0 || p.Creator != initID {
					t.Errorf("placeholder after its fork = %+v, want creator init, no no_fork", p)
				}
				if c := mustGet(t, g, child); c.Gaps != 0 {
					t.Errorf("child gaps = %v, want none once its creator is complete", c.Gaps)
				}
				equalIDs(t, "Ancestors(child)", ids(g.Ancestors(child)), []ID{child, ghost, initID})
			},
		},
		{
			name:  "placeholder's exec gives it an image",
			extra: []Event{execEv(7*sec+5, ghost, "npx", "server")},
			check: func(t *testing.T, g *Graph) {
				if p := mustGet(t, g, ghost); len(p.Images) != 1 || p.Images[0].Source != SourceKernel {
					t.Errorf("placeholder images = %+v", p.Images)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := newGraph()
			seedInit(g)
			g.Apply(forkEv(child, ghost))
			apply(g, tt.extra...)
			checkInvariants(t, g)
			c := mustGet(t, g, child)
			if c.Creator != ghost {
				t.Errorf("child creator=%v, want the placeholder", c.Creator)
			}
			equalIDs(t, "Descendants(ghost)", ids(g.Descendants(ghost)), []ID{ghost, child})
			tt.check(t, g)
		})
	}
}

func TestApplyEventsForUnknownProcessCreateNode(t *testing.T) {
	x := id(5100, 8*sec+3)
	tests := []struct {
		name       string
		ev         Event
		wantExited bool
		wantGaps   Gap
	}{
		{"exec", execEv(8*sec+5, x, "python3", "-m", "srv"), false, GapNoFork},
		{"exit", exitEv(8*sec+5, x, 2), true, GapNoFork},
		{"fork without creator", Event{Kind: KindFork, Time: x.Start, Proc: x}, false, GapUnknownCreator},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := newGraph()
			g.Apply(tt.ev)
			checkInvariants(t, g)
			p := mustGet(t, g, x)
			if p.Exited != tt.wantExited || p.Gaps != tt.wantGaps || !p.Creator.IsZero() {
				t.Errorf("node = %+v, want exited=%v gaps=%v", p, tt.wantExited, tt.wantGaps)
			}
			equalIDs(t, "Roots", g.Roots(), []ID{x})
		})
	}
}

func TestApplyCreatorIsWrittenOnce(t *testing.T) {
	a := id(6000, 1*sec+1)
	b := id(6001, 1*sec+2)
	child := id(6002, 2*sec+3)
	tests := []struct {
		name        string
		events      []Event
		wantCreator ID
		wantParent  ID
	}{
		{"duplicate fork naming another creator", []Event{
			forkEv(child, a),
			{Kind: KindFork, Time: child.Start, Proc: child, Creator: b},
		}, a, a},
		{"later event updates the parent only", []Event{
			forkEv(child, a),
			{Kind: KindExec, Time: 3 * sec, Proc: child, Parent: initID, Argv: []string{"x"}},
		}, a, initID},
		{"older event does not override a newer parent", []Event{
			forkEv(child, a),
			{Kind: KindExec, Time: 3 * sec, Proc: child, Parent: initID, Argv: []string{"x"}},
			{Kind: KindExec, Time: 2*sec + 9, Proc: child, Parent: a, Argv: []string{"y"}},
		}, a, initID},
		{"clone-parent fork keeps creator and parent apart", []Event{
			{Kind: KindFork, Time: child.Start, Proc: child, Creator: a, Parent: b},
		}, a, b},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := newGraph()
			seedInit(g)
			apply(g, forkEv(a, initID), forkEv(b, initID))
			apply(g, tt.events...)
			checkInvariants(t, g)
			p := mustGet(t, g, child)
			if p.Creator != tt.wantCreator || p.Parent != tt.wantParent {
				t.Errorf("creator=%v parent=%v, want %v %v", p.Creator, p.Parent, tt.wantCreator, tt.wantParent)
			}
		})
	}
}

func TestApplyInvalidEventsAreCountedNotApplied(t *testing.T) {
	tests := []struct {
		name string
		ev   Event
	}{
		{"zero process", Event{Kind: KindFork, Time: 5, Creator: host}},
		{"unknown kind", Event{Kind: 99, Time: 5, Proc: host}},
		{"zero kind", Event{Time: 5, Proc: host}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := newGraph()
			g.Apply(tt.ev)
			if s := g.Stats(); s.Tracked != 0 || s.Ignored != 1 {
				t.Errorf("stats = %+v, want nothing tracked and 1 ignored", s)
			}
		})
	}
}

func TestApplyKernelThreadsStayKernelUntilExec(t *testing.T) {
	kthreadd := id(2, 5_000_009)
	worker := id(300, 9*sec+1)
	helper := id(301, 9*sec+2)
	g := newGraph()
	g.Seed([]Snapshot{{ID: coarse(kthreadd), Comm: "kthreadd", Kernel: true}}, 1)
	apply(g, forkEv(worker, kthreadd), forkEv(helper, kthreadd), execEv(9*sec+3, helper, "modprobe", "x"))
	checkInvariants(t, g)
	if p := mustGet(t, g, worker); !p.Kernel {
		t.Errorf("kthreadd's child not a kernel thread")
	}
	if p := mustGet(t, g, helper); p.Kernel {
		t.Errorf("usermode helper still a kernel thread after exec")
	}
}

func TestApplyUIDZeroIsRootNotUnknown(t *testing.T) {
	creator := id(2000, 5*sec)
	child := id(2001, 6*sec)
	g := newGraph()
	ex := execEv(5*sec+1, creator, "sh")
	ex.UID = 1000
	fk := forkEv(child, creator)
	fk.Time, fk.UID = 6*sec, 0
	apply(g, forkEv(creator, id(1, sec)), ex, fk)
	if got := mustGet(t, g, child).UID; got != 0 {
		t.Errorf("child of a fork reported as uid 0 has uid %d: 0 must not mean unknown", got)
	}
	su := execEv(7*sec, creator, "su")
	su.UID = 0
	apply(g, su)
	if got := mustGet(t, g, creator).UID; got != 0 {
		t.Errorf("uid after an exec reported as uid 0 = %d, want 0", got)
	}
}
