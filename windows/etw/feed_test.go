package etw

import (
	"slices"
	"testing"

	"github.com/mcptrace/mcptrace/lineage"
	"github.com/mcptrace/mcptrace/windows/owners"
	"github.com/mcptrace/mcptrace/windows/winproc"
)

// fakeNode is a synthetic machine for Feed: the processes a snapshot
// lists, and the command lines a process start would read.
type fakeNode struct {
	procs []winproc.Entry
	now   uint64 // FILETIME
}

func newFakeFeed(n *fakeNode) *Feed {
	tr := NewTranslator(winproc.Clock{Boot: ft(0)})
	return &Feed{
		Graph:      lineage.New(lineage.Config{}),
		Translator: tr,
		Snapshot:   func() ([]winproc.Entry, error) { return slices.Clone(n.procs), nil },
		Read: func(pid uint32, create uint64) winproc.Entry {
			for _, e := range n.procs {
				if e.PID == pid && e.Create == create {
					return e
				}
			}
			return winproc.Entry{PID: pid, Create: create, ArgvTruncated: true}
		},
		Now: func() uint64 { return tr.Clock.Since(n.now) },
	}
}

// A start is applied with the command line read from the process; a
// start whose process is already gone is marked truncated, not guessed.
func TestFeedFillsStartsWithTheCommandLineReadFromTheProcess(t *testing.T) {
	n := &fakeNode{now: ft(10), procs: []winproc.Entry{
		{PID: 100, PPID: 4, Create: ft(1), Image: "codex.exe", Argv: []string{"codex.exe", "app-server"}},
		{PID: 110, PPID: 100, Create: ft(11), Image: "node.exe", Argv: []string{"node.exe", "server.js", "--token=abc"}},
	}}
	f := newFakeFeed(n)
	if err := f.Seed(); err != nil {
		t.Fatal(err)
	}
	f.Start(ProcessStart{ProcessID: 110, CreateTime: ft(11), ParentProcessID: 100, ImageName: `\Device\HarddiskVolume3\node.exe`})
	f.Start(ProcessStart{ProcessID: 120, CreateTime: ft(12), ParentProcessID: 100, ImageName: `\Device\HarddiskVolume3\gone.exe`})
	node, _ := f.Graph.Get(lineage.ID{PID: 110, Start: f.Translator.Clock.Since(ft(11))})
	if img := node.Current(); !slices.Equal(img.Argv, []string{"node.exe", "server.js", "--token=abc"}) || img.ArgvTruncated {
		t.Errorf("node.exe image %+v", img)
	}
	gone, _ := f.Graph.Get(lineage.ID{PID: 120, Start: f.Translator.Clock.Since(ft(12))})
	if img := gone.Current(); img.Argv != nil || !img.ArgvTruncated {
		t.Errorf("a process gone before its command line was read: %+v", img)
	}
	if s := f.Stats(); s.Starts != 2 || s.ArgvUnread != 1 {
		t.Errorf("stats %+v", s)
	}
}

// Lost events are repaired from a snapshot: a process whose stop was
// lost is marked exited, one whose start was lost is added, and the
// same loss total reported again repairs nothing more.
func TestFeedRepairsFromASnapshotWhenTheSessionLosesEvents(t *testing.T) {
	n := &fakeNode{now: ft(10), procs: []winproc.Entry{
		{PID: 100, PPID: 4, Create: ft(1), Image: "codex.exe"},
		{PID: 200, PPID: 100, Create: ft(2), Image: "node.exe"},
	}}
	f := newFakeFeed(n)
	if err := f.Seed(); err != nil {
		t.Fatal(err)
	}
	// node.exe's stop and python.exe's start are lost.
	n.now = ft(30)
	n.procs = []winproc.Entry{
		{PID: 100, PPID: 4, Create: ft(1), Image: "codex.exe"},
		{PID: 300, PPID: 100, Create: ft(20), Image: "python.exe"},
	}
	if err := f.Losses(Losses{RealTimeBuffers: 1}); err != nil {
		t.Fatal(err)
	}
	clock := f.Translator.Clock
	if p, _ := f.Graph.Get(lineage.ID{PID: 200, Start: clock.Since(ft(2))}); !p.Exited || p.Gaps&lineage.GapNoExit == 0 {
		t.Errorf("node.exe, whose stop was lost: %+v", p)
	}
	host := lineage.ID{PID: 100, Start: clock.Since(ft(1))}
	py := lineage.ID{PID: 300, Start: clock.Since(ft(20))}
	if p, ok := f.Graph.Get(py); !ok || p.Exited || !f.Graph.InCreatorChain(host, py) {
		t.Errorf("python.exe, whose start was lost: %+v (known %v)", p, ok)
	}
	if err := f.Losses(Losses{RealTimeBuffers: 1}); err != nil {
		t.Fatal(err)
	}
	if s := f.Stats(); s.Repairs != 1 || s.Lost != 1 {
		t.Errorf("stats %+v: want one repair for one loss", s)
	}
}

// Every process is owned by its token's owner: a user's number, root for
// an elevated token, and owners.Unknown (never root) when its token could
// not be read, whether it was seeded or seen starting.
func TestFeedOwnsEveryProcessByItsToken(t *testing.T) {
	const alice = "S-1-5-21-1-2-3-1001"
	n := &fakeNode{now: ft(10), procs: []winproc.Entry{
		{PID: 100, PPID: 4, Create: ft(1), Image: "codex.exe", Token: owners.Token{SID: alice}, TokenOK: true},
		{PID: 101, PPID: 4, Create: ft(1), Image: "svc.exe", Token: owners.Token{SID: alice, Admin: true}, TokenOK: true},
		{PID: 102, PPID: 4, Create: ft(1), Image: "protected.exe"},
		{PID: 110, PPID: 100, Create: ft(11), Image: "node.exe", Token: owners.Token{SID: alice}, TokenOK: true},
	}}
	f := newFakeFeed(n)
	tab, err := owners.Load("")
	if err != nil {
		t.Fatal(err)
	}
	f.Translator.Owner = func(tok owners.Token) uint32 { uid, _ := tab.Owner(tok); return uid }
	if err := f.Seed(); err != nil {
		t.Fatal(err)
	}
	f.Start(ProcessStart{ProcessID: 110, CreateTime: ft(11), ParentProcessID: 100, ImageName: `\Device\HarddiskVolume3\node.exe`})
	f.Start(ProcessStart{ProcessID: 120, CreateTime: ft(12), ParentProcessID: 100, ImageName: `\Device\HarddiskVolume3\gone.exe`})
	clock := f.Translator.Clock
	for _, tc := range []struct {
		pid    uint32
		create uint64
		want   uint32
	}{
		{100, ft(1), owners.FirstUID},
		{101, ft(1), owners.Root},
		{102, ft(1), owners.Unknown},
		{110, ft(11), owners.FirstUID},
		{120, ft(12), owners.Unknown},
	} {
		p, ok := f.Graph.Get(lineage.ID{PID: tc.pid, Start: clock.Since(tc.create)})
		if !ok || p.UID != tc.want || p.Current().UID != tc.want {
			t.Errorf("pid %d: uid %d (image %d), want %d", tc.pid, p.UID, p.Current().UID, tc.want)
		}
	}
	if s := f.Stats(); s.OwnerUnread != 1 {
		t.Errorf("stats %+v: want one start whose owner was unread", s)
	}
}
