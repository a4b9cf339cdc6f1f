package main

import (
	"context"
	"fmt"

	"github.com/mcptrace/mcptrace/api"
	"github.com/mcptrace/mcptrace/lineage"
	"github.com/mcptrace/mcptrace/windows/winproc"
)

// snapshotTree answers tree on Windows, where the agent does not run
// yet, from a process snapshot: every process with its create time,
// image and command line (as far as this user may read them), its
// creator the parent PID only when that parent was created before it.
// Exited wrappers are not in a snapshot: a server whose cmd.exe exited
// shows at the top level.
type snapshotTree struct {
	g   *lineage.Graph
	now uint64
}

func localTreeSource() (treeSource, error) {
	clock, err := winproc.SystemClock()
	if err != nil {
		return nil, err
	}
	now := clock.Now()
	entries, err := winproc.Snapshot()
	if err != nil {
		return nil, err
	}
	g := lineage.New(lineage.Config{})
	g.Seed(winproc.Snapshots(entries, clock, nil), now) // no owners: tree shows none (NoUID)
	return &snapshotTree{g: g, now: now}, nil
}

func (s *snapshotTree) Processes(context.Context) (api.ProcessList, error) {
	return api.ProcessList{Now: s.now, Processes: s.g.Processes()}, nil
}

func (s *snapshotTree) lookup(pid uint32) (lineage.Process, error) {
	p, ok := s.g.Lookup(pid)
	if !ok {
		return p, fmt.Errorf("no process %d is running", pid)
	}
	return p, nil
}

func (s *snapshotTree) Tree(_ context.Context, pid uint32) (api.ProcessList, error) {
	p, err := s.lookup(pid)
	if err != nil {
		return api.ProcessList{}, err
	}
	return api.ProcessList{Now: s.now, Processes: s.g.Descendants(p.ID)}, nil
}

func (s *snapshotTree) Ancestors(_ context.Context, pid uint32) (api.ProcessList, error) {
	p, err := s.lookup(pid)
	if err != nil {
		return api.ProcessList{}, err
	}
	return api.ProcessList{Now: s.now, Processes: s.g.Ancestors(p.ID)}, nil
}
