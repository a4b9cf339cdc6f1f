package etw

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/mcptrace/mcptrace/lineage"
	"github.com/mcptrace/mcptrace/sessions"
	"github.com/mcptrace/mcptrace/windows/winproc"
)

// A story is a session's life, told once and played as each system
// delivers it: on Linux as fork, exec and exit events, on Windows as
// ProcessStart and ProcessStop payloads through the Translator. The graph
// and the session tracker are the same code on both.
type storyStep struct {
	start  bool
	name   string // the process, and its program (without .exe)
	parent string // start only
}

// mcpStory: a host is declared the root of session s; it starts a wrapper
// (npx), which starts a server and exits; the host starts a second server
// itself; then the host dies.
var mcpStory = []storyStep{
	{start: true, name: "copilot", parent: "shell"},
	{start: true, name: "npx", parent: "copilot"},
	{start: true, name: "node", parent: "npx"},
	{name: "npx"},
	{start: true, name: "python", parent: "copilot"},
	{name: "copilot"},
}

// played is what a system's play of a story left: the session's tree under
// its root and the end of the session, in names, not PIDs.
type played struct {
	tree   []string // "depth name alive|exited", depth-first from the root
	reason string
	ended  []string // the members the end hands the enforcer, "name alive|exited", sorted
}

// play runs story through a graph and a tracker; system turns each step
// into lineage events. The shell exists before the story begins.
func play(t *testing.T, story []storyStep, system func(step storyStep, at int) []lineage.Event) played {
	t.Helper()
	g := lineage.New(lineage.Config{})
	tr, err := sessions.NewTracker(g, sessions.Config{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var acts []sessions.Action
	apply := func(evs []lineage.Event) {
		for _, ev := range evs {
			g.Apply(ev)
			acts = append(acts, tr.Observe(ev)...)
		}
	}
	apply(system(storyStep{start: true, name: "shell"}, 1))
	var root lineage.ID
	for i, step := range story {
		evs := system(step, i+2)
		apply(evs)
		if i == 0 {
			root = evs[0].Proc
			if _, err := tr.Begin(root, "s", ""); err != nil {
				t.Fatal(err)
			}
		}
	}
	var out played
	var walk func(id lineage.ID, depth int)
	walk = func(id lineage.ID, depth int) {
		p, _ := g.Get(id)
		out.tree = append(out.tree, fmt.Sprintf("%d %s %s", depth, program(p.Comm), life(p)))
		for _, c := range g.Children(id) {
			walk(c.ID, depth+1)
		}
	}
	walk(root, 0)
	if len(acts) != 1 {
		t.Fatalf("actions %+v, want the end of session s", acts)
	}
	out.reason = acts[0].End.EndReason
	for _, p := range tr.MembersOf(acts[0].End) {
		out.ended = append(out.ended, program(p.Comm)+" "+life(p))
	}
	slices.Sort(out.ended)
	return out
}

func program(comm string) string { return strings.TrimSuffix(comm, ".exe") }

func life(p lineage.Process) string {
	if p.Exited {
		return "exited"
	}
	return "alive"
}

// linuxSystem plays steps as the Linux sensor reports them.
func linuxSystem() func(storyStep, int) []lineage.Event {
	ids := map[string]lineage.ID{}
	return func(step storyStep, at int) []lineage.Event {
		ns := uint64(at) * 1_000_000
		if !step.start {
			return []lineage.Event{{Kind: lineage.KindExit, Time: ns, Proc: ids[step.name]}}
		}
		id := lineage.ID{PID: uint32(100 + at), Start: ns}
		ids[step.name] = id
		return []lineage.Event{
			{Kind: lineage.KindFork, Time: ns, Proc: id, Creator: ids[step.parent], Parent: ids[step.parent], Comm: step.name},
			{Kind: lineage.KindExec, Time: ns, Proc: id, Comm: step.name, Filename: "/usr/bin/" + step.name, Argv: []string{step.name}},
		}
	}
}

// windowsSystem plays steps as ETW delivers them, in event versions
// start and stop, with Windows' PIDs (multiples of 4).
func windowsSystem(t *testing.T, start, stop uint8) func(storyStep, int) []lineage.Event {
	tr := NewTranslator(winproc.Clock{Boot: ft(0)})
	type proc struct {
		pid    uint32
		seq    uint64
		create uint64
	}
	procs := map[string]proc{}
	return func(step storyStep, at int) []lineage.Event {
		if !step.start {
			p := procs[step.name]
			d, err := DecodeProcessStop(stop, stopV(stop, ProcessStop{ProcessID: p.pid, SequenceNumber: p.seq, CreateTime: p.create, ExitTime: ft(uint64(at)), ImageName: step.name + ".exe"}))
			if err != nil {
				t.Fatal(err)
			}
			return tr.Stop(d)
		}
		p := proc{pid: uint32(4000 + 4*at), seq: uint64(at), create: ft(uint64(at))}
		procs[step.name] = p
		parent := procs[step.parent]
		d, err := DecodeProcessStart(start, startV(start, ProcessStart{ProcessID: p.pid, SequenceNumber: p.seq, CreateTime: p.create,
			ParentProcessID: parent.pid, ParentSequenceNumber: parent.seq, ImageName: `\Device\HarddiskVolume3\bin\` + step.name + ".exe"}))
		if err != nil {
			t.Fatal(err)
		}
		return tr.Start(d)
	}
}

// The same story gives the same tree and the same session end on both
// systems, in every version of the Windows events.
func TestALinuxAndAWindowsStreamOfTheSameStoryEndTheSameSession(t *testing.T) {
	linux := play(t, mcpStory, linuxSystem())
	want := played{
		tree:   []string{"0 copilot exited", "1 npx exited", "2 node alive", "1 python alive"},
		reason: sessions.ReasonRootExit,
		ended:  []string{"copilot exited", "node alive", "npx exited", "python alive"},
	}
	if fmt.Sprint(linux) != fmt.Sprint(want) {
		t.Fatalf("the Linux play:\n got %+v\nwant %+v", linux, want)
	}
	for _, v := range [][2]uint8{{0, 0}, {1, 1}, {2, 2}, {3, 2}} {
		windows := play(t, mcpStory, windowsSystem(t, v[0], v[1]))
		if fmt.Sprint(windows) != fmt.Sprint(linux) {
			t.Errorf("ProcessStart v%d, ProcessStop v%d: the Windows play differs from the Linux one:\n windows %+v\n   linux %+v", v[0], v[1], windows, linux)
		}
	}
}
