package etw

import (
	"github.com/mcptrace/mcptrace/lineage"
	"github.com/mcptrace/mcptrace/windows/owners"
	"github.com/mcptrace/mcptrace/windows/winproc"
)

// MaxRemembered bounds how many processes a Translator remembers, live or
// exited, to name creators by: the exited ones go first, oldest first.
const MaxRemembered = 1 << 16

// Translator turns a stream of ProcessStart and ProcessStop events into
// lineage events. A process is named by its PID and create time, so a
// reused PID is a new process. The creator is the parent the event names
// only if the Translator saw that parent start or seeded it, by its
// sequence number (version 3 on) or else by the latest process with that
// PID, and only if
// the parent was created no later than the child: a "parent" created after
// its child is a reused PID, not the parent. Otherwise the creator is
// unknown, and the graph says so (lineage.GapUnknownCreator).
//
// It does not set command lines (the events lack them; they are read
// from the process) or the owners of started processes (Feed does, from
// the token it reads); seeded ones get theirs from Owner.
type Translator struct {
	Clock winproc.Clock
	// Owner maps a token to its owner number (owners.Table.Owner); nil
	// makes every owner owners.Unknown.
	Owner func(owners.Token) uint32

	byPID  map[uint32]remembered
	bySeq  map[uint64]remembered
	exited []remembered // in the order they exited, for eviction
	// reparented counts starts whose payload named another parent than
	// the process that created them (Reparented).
	reparented uint64
}

// Reparented counts the starts whose payload named a parent other than
// the process that created them: their creator edge follows the creator.
func (t *Translator) Reparented() uint64 { return t.reparented }

type remembered struct {
	id     lineage.ID
	create uint64 // FILETIME
	seq    uint64
}

// NewTranslator returns a Translator on clock.
func NewTranslator(clock winproc.Clock) *Translator {
	return &Translator{Clock: clock, byPID: map[uint32]remembered{}, bySeq: map[uint64]remembered{}}
}

// id names the process pid created at create.
func (t *Translator) id(pid uint32, create uint64) lineage.ID {
	return lineage.ID{PID: pid, Start: t.Clock.Since(create)}
}

// Start returns the lineage events of a process start: its fork by its
// creator (zero when unknown) and its exec of the image.
func (t *Translator) Start(s ProcessStart) []lineage.Event {
	child := t.id(s.ProcessID, s.CreateTime)
	var creator lineage.ID
	var parent remembered
	var ok bool
	if s.CreatorProcessID != 0 && s.CreatorProcessID != s.ParentProcessID {
		// The payload names a parent the creator chose (a parent-process
		// attribute, as a broker or an evasion sets): the creator is the
		// process the start was logged in, by PID, checked by create time
		// below.
		t.reparented++
		parent, ok = t.byPID[s.CreatorProcessID]
	} else {
		if s.ParentSequenceNumber != 0 {
			parent, ok = t.bySeq[s.ParentSequenceNumber]
		}
		if !ok {
			// Versions before 3 name the parent by PID only, and a seeded
			// process has no sequence number: the latest process with that
			// PID, checked by create time below.
			parent, ok = t.byPID[s.ParentProcessID]
			ok = ok && (s.ParentSequenceNumber == 0 || parent.seq == 0)
		}
	}
	if ok && parent.create <= s.CreateTime {
		creator = parent.id
	}
	r := remembered{id: child, create: s.CreateTime, seq: s.SequenceNumber}
	t.byPID[s.ProcessID] = r
	if s.SequenceNumber != 0 {
		t.bySeq[s.SequenceNumber] = r
	}
	t.bound()
	at := t.Clock.Since(s.CreateTime)
	comm := winproc.ImageBase(s.ImageName)
	return []lineage.Event{
		{Kind: lineage.KindFork, Time: at, Proc: child, Creator: creator, Parent: creator, Comm: comm},
		{Kind: lineage.KindExec, Time: at, Proc: child, Comm: comm, Filename: s.ImageName},
	}
}

// Seed remembers the processes of a snapshot taken when the consumer
// started, so that the creators of processes started later are found
// among them, and returns them as lineage snapshots (winproc.Snapshots:
// creator edges checked against create times). Take the snapshot after
// the ETW session is enabled: a process started in between is then both
// in the snapshot and in the stream, and the graph merges the two by
// identity.
func (t *Translator) Seed(entries []winproc.Entry) []lineage.Snapshot {
	for _, e := range entries {
		if e.Create == 0 || e.PID == 0 {
			continue
		}
		if cur, ok := t.byPID[e.PID]; ok && cur.create >= e.Create {
			continue // the stream already named a process this new or newer
		}
		t.byPID[e.PID] = remembered{id: t.id(e.PID, e.Create), create: e.Create}
	}
	t.bound()
	return winproc.Snapshots(entries, t.Clock, t.Owner)
}

// Stop returns the lineage event of a process's end.
func (t *Translator) Stop(s ProcessStop) []lineage.Event {
	id := t.id(s.ProcessID, s.CreateTime)
	if r, ok := t.byPID[s.ProcessID]; ok && r.id == id {
		t.exited = append(t.exited, r)
	}
	return []lineage.Event{{Kind: lineage.KindExit, Time: t.Clock.Since(s.ExitTime), Proc: id, ExitCode: int(s.ExitCode)}}
}

// bound forgets exited processes, oldest first, past MaxRemembered.
func (t *Translator) bound() {
	for len(t.byPID)+len(t.bySeq) > 2*MaxRemembered && len(t.exited) > 0 {
		r := t.exited[0]
		t.exited = t.exited[1:]
		if cur, ok := t.byPID[r.id.PID]; ok && cur.id == r.id {
			delete(t.byPID, r.id.PID)
		}
		if r.seq != 0 {
			delete(t.bySeq, r.seq)
		}
	}
}
