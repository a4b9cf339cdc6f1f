package etw

import (
	"slices"
	"testing"

	"github.com/mcptrace/mcptrace/lineage"
	"github.com/mcptrace/mcptrace/windows/winproc"
)

// stream is a story told as ETW would deliver it: payloads of a version,
// decoded and translated into a lineage graph.
type stream struct {
	t     *testing.T
	tr    *Translator
	g     *lineage.Graph
	start uint8 // ProcessStart version
	stop  uint8 // ProcessStop version
}

func newStream(t *testing.T, start, stop uint8) *stream {
	return &stream{t: t, tr: NewTranslator(winproc.Clock{Boot: ft(0)}), g: lineage.New(lineage.Config{}), start: start, stop: stop}
}

func (s *stream) started(p ProcessStart) lineage.ID {
	s.t.Helper()
	d, err := DecodeProcessStart(s.start, startV(s.start, p))
	if err != nil {
		s.t.Fatal(err)
	}
	d.CreatorProcessID = p.CreatorProcessID // the event header's, not the payload's
	for _, ev := range s.tr.Start(d) {
		s.g.Apply(ev)
	}
	return lineage.ID{PID: p.ProcessID, Start: s.tr.Clock.Since(p.CreateTime)}
}

func (s *stream) stopped(p ProcessStop) {
	s.t.Helper()
	d, err := DecodeProcessStop(s.stop, stopV(s.stop, p))
	if err != nil {
		s.t.Fatal(err)
	}
	for _, ev := range s.tr.Stop(d) {
		s.g.Apply(ev)
	}
}

// chain is the creator chain of id, as PIDs, id first.
func (s *stream) chain(id lineage.ID) []uint32 {
	var pids []uint32
	for _, c := range s.g.CreatorChain(id) {
		pids = append(pids, c.PID)
	}
	return pids
}

// copilot.exe → cmd.exe /c npx … → node.exe (npx) → cmd.exe /c … →
// node.exe (the server): every layer is one branch of the host, in every
// version of the events.
func TestCmdNpxNodeChainIsOneBranchOfTheHost(t *testing.T) {
	for v := uint8(0); v <= 3; v++ {
		s := newStream(t, v, min(v, 2))
		img := func(name string) string { return `\Device\HarddiskVolume3\Windows\System32\` + name }
		host := s.started(ProcessStart{ProcessID: 1000, SequenceNumber: 10, CreateTime: ft(1), ParentProcessID: 4, ImageName: img("copilot.exe")})
		cmd := s.started(ProcessStart{ProcessID: 1004, SequenceNumber: 11, CreateTime: ft(2), ParentProcessID: 1000, ParentSequenceNumber: 10, ImageName: img("cmd.exe")})
		npx := s.started(ProcessStart{ProcessID: 1008, SequenceNumber: 12, CreateTime: ft(3), ParentProcessID: 1004, ParentSequenceNumber: 11, ImageName: img("node.exe")})
		cmd2 := s.started(ProcessStart{ProcessID: 1012, SequenceNumber: 13, CreateTime: ft(4), ParentProcessID: 1008, ParentSequenceNumber: 12, ImageName: img("cmd.exe")})
		server := s.started(ProcessStart{ProcessID: 1016, SequenceNumber: 14, CreateTime: ft(5), ParentProcessID: 1012, ParentSequenceNumber: 13, ImageName: img("node.exe")})
		if got, want := s.chain(server), []uint32{1016, 1012, 1008, 1004, 1000}; !slices.Equal(got[:min(len(got), 5)], want) {
			t.Errorf("v%d: the server's creator chain %v, want %v first", v, got, want)
		}
		var below []uint32
		for _, p := range s.g.Descendants(host) {
			below = append(below, p.ID.PID)
		}
		for _, id := range []lineage.ID{cmd, npx, cmd2, server} {
			if !slices.Contains(below, id.PID) {
				t.Errorf("v%d: %v is not below the host (descendants %v)", v, id, below)
			}
		}
		if p, ok := s.g.Get(server); !ok || p.Comm != "node.exe" || len(p.Images) == 0 || p.Images[len(p.Images)-1].Filename != img("node.exe") {
			t.Errorf("v%d: the server's node %+v", v, p)
		}
		// The wrappers exit; the server is still the host's.
		s.stopped(ProcessStop{ProcessID: 1012, SequenceNumber: 13, CreateTime: ft(4), ExitTime: ft(6), ImageName: "cmd.exe"})
		s.stopped(ProcessStop{ProcessID: 1008, SequenceNumber: 12, CreateTime: ft(3), ExitTime: ft(7), ImageName: "node.exe"})
		if !s.g.InCreatorChain(host, server) {
			t.Errorf("v%d: after its wrappers exited the server is no longer the host's", v)
		}
	}
}

// A PID reused before the child's start is read: with sequence numbers
// (version 3) the exact parent is named; without, the process now holding
// the PID was created after the child, so it is not the parent, and the
// creator is unknown rather than guessed.
func TestARecycledPIDIsNeverTakenForTheParent(t *testing.T) {
	for _, v := range []uint8{0, 3} {
		s := newStream(t, v, 2)
		old := s.started(ProcessStart{ProcessID: 500, SequenceNumber: 20, CreateTime: ft(1), ParentProcessID: 4, ImageName: "old.exe"})
		s.stopped(ProcessStop{ProcessID: 500, SequenceNumber: 20, CreateTime: ft(1), ExitTime: ft(5), ImageName: "old.exe"})
		reused := s.started(ProcessStart{ProcessID: 500, SequenceNumber: 22, CreateTime: ft(6), ParentProcessID: 4, ImageName: "new.exe"})
		// The child of the old 500, created at 3 ms, read only now.
		child := s.started(ProcessStart{ProcessID: 600, SequenceNumber: 21, CreateTime: ft(3), ParentProcessID: 500, ParentSequenceNumber: 20, ImageName: "child.exe"})
		if s.g.InCreatorChain(reused, child) {
			t.Errorf("v%d: the child is taken for a child of the process that reused PID 500 after it", v)
		}
		p, _ := s.g.Get(child)
		switch v {
		case 3:
			if !s.g.InCreatorChain(old, child) {
				t.Errorf("v3: the sequence number names the old 500 as the creator; chain %v", s.chain(child))
			}
		default:
			if p.Gaps&lineage.GapUnknownCreator == 0 {
				t.Errorf("v%d: the child's creator is not marked unknown: %+v", v, p)
			}
		}
	}
}

// The parent exited before its child's start event was read (the events
// came in that order): the parent is still named, by its identity, and
// the child is not an orphan of the graph.
func TestAParentThatExitedBeforeItsChildsStartWasReadIsTheCreator(t *testing.T) {
	for _, v := range []uint8{0, 1, 2, 3} {
		s := newStream(t, v, min(v, 2))
		parent := s.started(ProcessStart{ProcessID: 700, SequenceNumber: 30, CreateTime: ft(1), ParentProcessID: 4, ImageName: "cmd.exe"})
		s.stopped(ProcessStop{ProcessID: 700, SequenceNumber: 30, CreateTime: ft(1), ExitTime: ft(3), ImageName: "cmd.exe"})
		child := s.started(ProcessStart{ProcessID: 704, SequenceNumber: 31, CreateTime: ft(2), ParentProcessID: 700, ParentSequenceNumber: 30, ImageName: "node.exe"})
		if !s.g.InCreatorChain(parent, child) {
			t.Errorf("v%d: the exited parent is not the child's creator; chain %v", v, s.chain(child))
		}
		if p, _ := s.g.Get(parent); !p.Exited {
			t.Errorf("v%d: the parent is not marked exited: %+v", v, p)
		}
	}
}

// Processes that ran before the consumer started come from a snapshot:
// a child started later names its seeded parent by PID (and, from
// version 3, by a sequence number the snapshot does not have), and the
// parent is found by PID and create time. A seeded process that reused
// the PID after the child was created is not taken for the parent.
func TestASeededProcessIsTheCreatorOfWhatItStartsLater(t *testing.T) {
	for _, v := range []uint8{0, 3} {
		s := newStream(t, v, 2)
		seeded := s.tr.Seed([]winproc.Entry{
			{PID: 4, Create: ft(0) + 1, Image: "System"},
			{PID: 900, PPID: 4, Create: ft(1), Image: "codex.exe"},
			{PID: 950, PPID: 4, Create: ft(9), Image: "reused.exe"},
		})
		s.g.Seed(seeded, s.tr.Clock.Since(ft(10)))
		host := lineage.ID{PID: 900, Start: s.tr.Clock.Since(ft(1))}
		child := s.started(ProcessStart{ProcessID: 901, SequenceNumber: 40, CreateTime: ft(11), ParentProcessID: 900, ParentSequenceNumber: 7, ImageName: `C:\Windows\System32\cmd.exe`})
		if !s.g.InCreatorChain(host, child) {
			t.Errorf("v%d: the seeded host is not the creator of what it started; chain %v", v, s.chain(child))
		}
		early := s.started(ProcessStart{ProcessID: 960, SequenceNumber: 41, CreateTime: ft(8), ParentProcessID: 950, ParentSequenceNumber: 8, ImageName: "early.exe"})
		if p, _ := s.g.Get(early); p.Gaps&lineage.GapUnknownCreator == 0 {
			t.Errorf("v%d: a seeded process created after the child was taken for its parent: %+v", v, p)
		}
	}
}

// A member that names another process as its child's parent (the
// parent-process attribute: any process it can open, explorer.exe here)
// does not take the child out of its session: the creator is the process
// the start was logged in, the event header's, and the renaming is
// counted.
func TestTheCreatorIsTheProcessTheStartWasLoggedInNotTheNamedParent(t *testing.T) {
	for _, v := range []uint8{0, 3} {
		s := newStream(t, v, 2)
		s.started(ProcessStart{ProcessID: 50, SequenceNumber: 5, CreateTime: ft(1), ParentProcessID: 4, ImageName: "explorer.exe"})
		host := s.started(ProcessStart{ProcessID: 100, SequenceNumber: 10, CreateTime: ft(2), ParentProcessID: 50, CreatorProcessID: 50, ImageName: "copilot.exe"})
		member := s.started(ProcessStart{ProcessID: 110, SequenceNumber: 11, CreateTime: ft(3), ParentProcessID: 100, CreatorProcessID: 100, ImageName: "node.exe"})
		escaped := s.started(ProcessStart{ProcessID: 120, SequenceNumber: 12, CreateTime: ft(4), ParentProcessID: 50, ParentSequenceNumber: 5, CreatorProcessID: 110, ImageName: "node.exe"})
		if !s.g.InCreatorChain(member, escaped) || !s.g.InCreatorChain(host, escaped) {
			t.Errorf("v%d: the child named explorer as its parent and left its creator's branch: chain %v", v, s.chain(escaped))
		}
		if n := s.tr.Reparented(); n != 1 {
			t.Errorf("v%d: %d starts counted as naming another parent, want 1", v, n)
		}
	}
}
