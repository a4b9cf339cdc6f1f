package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
)

// prog is one entry of `bpftool prog show -j`.
type prog struct {
	ID              uint32 `json:"id"`
	Type            string `json:"type"`
	Name            string `json:"name"`
	RunTimeNS       uint64 `json:"run_time_ns"`
	RunCnt          uint64 `json:"run_cnt"`
	RecursionMisses uint64 `json:"recursion_misses"`
	MapIDs          []uint32
}

// UnmarshalJSON reads map_ids, which bpftool leaves out for none.
func (p *prog) UnmarshalJSON(data []byte) error {
	type plain prog
	var v struct {
		plain
		MapIDs []uint32 `json:"map_ids"`
	}
	if err := json.Unmarshal(data, &v); err != nil {
		return err
	}
	*p = prog(v.plain)
	p.MapIDs = v.MapIDs
	return nil
}

func bpftoolJSON(ctx context.Context, out any, args ...string) error {
	data, err := exec.CommandContext(ctx, "bpftool", append(args, "-j")...).Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			return fmt.Errorf("bpftool %s: %w: %s", strings.Join(args, " "), err, ee.Stderr)
		}
		return fmt.Errorf("bpftool %s: %w", strings.Join(args, " "), err)
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("bpftool %s: decode: %w", strings.Join(args, " "), err)
	}
	return nil
}

// progs returns every BPF program loaded on the node, by id.
func progs(ctx context.Context) (map[uint32]prog, error) {
	var ps []prog
	if err := bpftoolJSON(ctx, &ps, "prog", "show"); err != nil {
		return nil, err
	}
	m := make(map[uint32]prog, len(ps))
	for _, p := range ps {
		m[p.ID] = p
	}
	return m, nil
}

// maps returns every BPF map on the node, by id.
func maps(ctx context.Context) (map[uint32]bpfMap, error) {
	var ms []bpfMap
	if err := bpftoolJSON(ctx, &ms, "map", "show"); err != nil {
		return nil, err
	}
	m := make(map[uint32]bpfMap, len(ms))
	for _, x := range ms {
		m[x.ID] = x
	}
	return m, nil
}

// sched reports whether a program is one of the kind every tracer here
// attaches: the agent's (tracing sched_process_*), bpftrace's
// (tracepoint, named after the tracepoint, truncated to 15 bytes).
func (p prog) sched() bool { return strings.HasPrefix(p.Name, "sched_process") }

// schedProgs returns the ids of programs named after the sched_process_*
// tracepoints, and the agent's container request reader (on socket
// reads; on every system call in builds before it moved): any of them
// attached falsifies a baseline round.
func schedProgs(ctx context.Context) ([]string, error) {
	ps, err := progs(ctx)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, p := range ps {
		if p.sched() || strings.HasPrefix(p.Name, "request_recv") || strings.HasPrefix(p.Name, "request_sys_ent") {
			out = append(out, fmt.Sprintf("%d %s %s", p.ID, p.Type, p.Name))
		}
	}
	sort.Strings(out)
	return out, nil
}

// agentProgIDs returns the ids of the programs attached through the links
// pinned under an agent's pin directory.
func agentProgIDs(ctx context.Context, pinDir string) ([]uint32, error) {
	var ids []uint32
	err := filepath.WalkDir(pinDir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() || !strings.HasPrefix(d.Name(), "link_") {
			return nil
		}
		var l struct {
			ProgID uint32 `json:"prog_id"`
		}
		if err := bpftoolJSON(ctx, &l, "link", "show", "pinned", path); err != nil {
			return err
		}
		ids = append(ids, l.ProgID)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("agent programs under %s: %w", pinDir, err)
	}
	if len(ids) == 0 {
		return nil, fmt.Errorf("agent programs under %s: no pinned links", pinDir)
	}
	return ids, nil
}

// agentMapMemory sums bytes_memlock of the maps the agent's programs use.
func agentMapMemory(ctx context.Context, pinDir string) (mapMemory, error) {
	ids, err := agentProgIDs(ctx, pinDir)
	if err != nil {
		return mapMemory{}, err
	}
	ps, err := progs(ctx)
	if err != nil {
		return mapMemory{}, err
	}
	ms, err := maps(ctx)
	if err != nil {
		return mapMemory{}, err
	}
	seen := map[uint32]bool{}
	var mm mapMemory
	for _, id := range ids {
		for _, mid := range ps[id].MapIDs {
			m, ok := ms[mid]
			if !ok || seen[mid] {
				continue
			}
			seen[mid] = true
			mm.total += m.BytesMemlock
			if m.Type == "ringbuf" {
				mm.ringbuf += m.BytesMemlock
			}
			mm.maps = append(mm.maps, m)
		}
	}
	sort.Slice(mm.maps, func(i, j int) bool { return mm.maps[i].BytesMemlock > mm.maps[j].BytesMemlock })
	return mm, nil
}
