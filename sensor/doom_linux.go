package sensor

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"

	"github.com/mcptrace/mcptrace/bpf"
	"github.com/mcptrace/mcptrace/lineage"
)

// doomTickNS is DOOM_TICK_NS of bpf/events.h: doomed start times are
// compared at /proc's clock-tick precision, so a process known only from
// /proc (coarse start) can be doomed as exactly as one seen forking.
const doomTickNS = 10_000_000

// Doom marks a process of an ended session: from now on the kernel kills it
// when it forks or execs, and its children inherit doom. Entries leave the
// map when the process exits.
func (s *Sensor) Doom(id lineage.ID) error {
	if err := s.objs.Doomed.Update(id.PID, id.Start/doomTickNS, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("doom %v: %w", id, err)
	}
	return nil
}

// Undoom removes a process from the doomed map, if it is there with this
// identity.
func (s *Sensor) Undoom(id lineage.ID) error {
	var tick uint64
	if err := s.objs.Doomed.Lookup(id.PID, &tick); err != nil {
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return nil
		}
		return fmt.Errorf("look up doomed %v: %w", id, err)
	}
	if tick != id.Start/doomTickNS {
		return nil // a recycled pid doomed for another reason
	}
	if err := s.objs.Doomed.Delete(id.PID); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("undoom %v: %w", id, err)
	}
	return nil
}

// DoomKills counts the kills the kernel did for doomed processes.
type DoomKills struct {
	Forkers  uint64 // doomed processes killed when they forked
	Children uint64 // children of doomed processes killed before they ran (Linux 6.13+)
	Execs    uint64 // doomed processes killed when they exec'd
}

// DoomKills returns the kernel's doom kill counters since Open.
func (s *Sensor) DoomKills() (DoomKills, error) {
	sum := func(k bpf.McptraceDoomKill) (uint64, error) {
		return sumPerCPU(s.objs.DoomKills, "doom_kills", uint32(k))
	}
	var d DoomKills
	var err error
	if d.Forkers, err = sum(bpf.McptraceDoomKillDOOM_KILL_FORKER); err != nil {
		return d, err
	}
	if d.Children, err = sum(bpf.McptraceDoomKillDOOM_KILL_CHILD); err != nil {
		return d, err
	}
	d.Execs, err = sum(bpf.McptraceDoomKillDOOM_KILL_EXEC)
	return d, err
}

// KillsChildrenAtFork reports whether this kernel lets the fork hook kill
// the child of a doomed process before it runs (kfunc bpf_send_signal_task,
// Linux 6.13+). Without it the child dies at its first fork or exec, or by
// the enforcer's sweep.
func (s *Sensor) KillsChildrenAtFork() bool { return s.sendSignalTask }
