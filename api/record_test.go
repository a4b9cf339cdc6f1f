package api

import (
	"testing"
	"time"

	"github.com/mcptrace/mcptrace/enforcer"
	"github.com/mcptrace/mcptrace/lineage"
)

func member(pid uint32, exit uint64) lineage.Process {
	p := lineage.Process{ID: lineage.ID{PID: pid, Start: uint64(pid)}, Comm: "p"}
	if exit != 0 {
		p.Exited, p.ExitTime = true, exit
	}
	return p
}

func pids(ps []lineage.Process) []uint32 {
	var out []uint32
	for _, p := range ps {
		out = append(out, p.ID.PID)
	}
	return out
}

func TestMergeRecordsKeepsWhatOnlyTheOlderRecordHad(t *testing.T) {
	at := time.Unix(100, 0)
	old := SessionRecord{
		Members:            []lineage.Process{member(1, 0), member(2, 50)},
		Generations:        []uint32{0, 1},
		Containers:         []Container{{ID: "c1"}},
		ContainerProcesses: []ContainerProcess{{Of: 0, Process: member(9, 0)}},
		Records:            []enforcer.KillRecord{{Process: member(2, 0).ID, Result: enforcer.ResultKilled, At: at}},
	}
	cur := SessionRecord{
		Members:     []lineage.Process{member(1, 0), member(3, 0)},
		Generations: []uint32{0, 2},
		Containers:  []Container{{ID: "c2"}},
		Records:     []enforcer.KillRecord{{Process: member(2, 0).ID, Result: enforcer.ResultKilled, At: at}, {Process: member(3, 0).ID, Result: enforcer.ResultKilled, At: at}},
	}
	got := MergeRecords(old, cur)
	if p := pids(got.Members); len(p) != 3 || p[0] != 1 || p[1] != 3 || p[2] != 2 {
		t.Errorf("members %v, want the current ones (1, 3) then the one only the older record had (2)", p)
	}
	if len(got.Generations) != 3 || got.Generations[2] != 1 {
		t.Errorf("generations %v: the older member keeps its own", got.Generations)
	}
	if len(got.Containers) != 2 || len(got.ContainerProcesses) != 1 || got.Containers[got.ContainerProcesses[0].Of].ID != "c1" {
		t.Errorf("containers %+v, processes %+v: c1's process must stay c1's", got.Containers, got.ContainerProcesses)
	}
	if len(got.Records) != 2 {
		t.Errorf("kill records %d, want the same record once and the new one", len(got.Records))
	}
}

func TestMergeRecordsDropsTheOldestExitedPastTheBoundAndCountsThem(t *testing.T) {
	var old SessionRecord
	for i := range MaxRecordMembers {
		old.Members = append(old.Members, member(uint32(100+i), uint64(1000+i)))
		old.Generations = append(old.Generations, 1)
	}
	cur := SessionRecord{Members: []lineage.Process{member(1, 0), member(2, 0), member(3, 0)}, Generations: []uint32{0, 1, 1}}
	cur.Session.Root = cur.Members[0].ID
	got := MergeRecords(old, cur)
	if n := len(got.Members); n != MaxRecordMembers {
		t.Fatalf("%d members, want the bound %d", n, MaxRecordMembers)
	}
	if got.MembersDropped != 3 {
		t.Errorf("dropped %d, want 3", got.MembersDropped)
	}
	if p := pids(got.Members); p[0] != 1 || p[3] != 103 {
		t.Errorf("kept %v…: the current members stay and the three oldest exits go (100, 101, 102)", p[:5])
	}
	// A further merge keeps counting.
	if again := MergeRecords(got, cur); again.MembersDropped != 3 || len(again.Members) != MaxRecordMembers {
		t.Errorf("merging the same again: dropped %d, %d members", again.MembersDropped, len(again.Members))
	}
}
