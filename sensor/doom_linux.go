package sensor

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"

	"github.com/mcptrace/mcptrace/lineage"
	"github.com/mcptrace/mcptrace/procfs"
)

// Doom marks a process of an ended session: from now on the kernel kills it
// when it forks or execs, and its children inherit doom. Entries leave the
// map when the process exits.
func (s *Sensor) Doom(id lineage.ID) error {
	if err := s.objs.Doomed.Update(id.PID, id.Tick(), ebpf.UpdateAny); err != nil {
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
	if tick != id.Tick() {
		return nil // a recycled pid doomed for another reason
	}
	if err := s.objs.Doomed.Delete(id.PID); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("undoom %v: %w", id, err)
	}
	return nil
}

// copyDoomFrom carries the doomed processes of a taken-over set into the
// sensor's own map, so the kernel keeps killing them once the old programs
// are gone: at takeover, before the old programs are detached, and again
// when the set is drained (entries the old programs added meanwhile). It
// copies the entries of st's doomed map whose process still
// runs with the same start tick (an entry of an exited process is stale,
// and its pid may name another process by now). Doom is a kill order:
// only what provably is the doomed process is carried over.
func (s *Sensor) copyDoomFrom(st *set) {
	if st.maps.doomed == nil || st.maps.doomed.KeySize() != s.objs.Doomed.KeySize() ||
		st.maps.doomed.ValueSize() != s.objs.Doomed.ValueSize() {
		return
	}
	var (
		pid    uint32
		tick   uint64
		copied int
	)
	it := st.maps.doomed.Iterate()
	for it.Next(&pid, &tick) {
		snap, err := procfs.Read("/proc", pid)
		if err != nil || snap.ID.Tick() != tick {
			continue
		}
		if err := s.objs.Doomed.Update(pid, tick, ebpf.UpdateAny); err != nil {
			s.log.Warn("could not carry a doomed process over", "set", st.name, "pid", pid, "err", err)
			continue
		}
		copied++
	}
	if err := it.Err(); err != nil {
		s.log.Warn("reading a taken-over doomed map", "set", st.name, "err", err)
	}
	if copied > 0 {
		s.log.Info("doomed processes carried over from a previous agent", "set", st.name, "processes", copied)
	}
}

// spareCommLen is COMM_LEN of bpf/events.h: the key size of spare_comms.
const spareCommLen = 16

// SpareExecs tells the kernel which programs a doomed process may exec
// without being killed, because a spare rule may protect them: those whose
// process name (comm; the kernel keeps 15 bytes) is in comms, or every
// program when all is set (rules the kernel cannot evaluate, on the
// executable's path or argv). Such a process leaves doom alive and the
// enforcer judges it. It replaces what an earlier call set.
func (s *Sensor) SpareExecs(comms []string, all bool) error {
	m := s.objs.SpareComms
	var (
		key  = make([]byte, spareCommLen)
		keys [][]byte
	)
	for it := m.Iterate(); it.Next(&key, new(uint8)); {
		keys = append(keys, append([]byte(nil), key...))
	}
	for _, k := range keys {
		if err := m.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("clear spare_comms: %w", err)
		}
	}
	for _, c := range comms {
		if c == "" {
			continue
		}
		k := make([]byte, spareCommLen)
		copy(k, c[:min(len(c), spareCommLen-1)])
		if err := m.Update(k, uint8(1), ebpf.UpdateAny); err != nil {
			return fmt.Errorf("spare %q at exec: %w", c, err)
		}
	}
	var v uint32
	if all {
		v = 1
	}
	if err := s.objs.SpareAll.Update(uint32(0), v, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("spare every exec: %w", err)
	}
	return nil
}

// DoomKills returns the kernel's doom kill counters of every set the
// sensor reads, summed.
func (s *Sensor) DoomKills() (DoomKills, error) {
	cs, err := s.Counters()
	if err != nil {
		return DoomKills{}, err
	}
	var d DoomKills
	for _, c := range cs {
		d.Forkers += c.Doom.Forkers
		d.Children += c.Doom.Children
		d.Execs += c.Doom.Execs
		d.SparedExecs += c.Doom.SparedExecs
	}
	return d, nil
}

// KillsChildrenAtFork reports whether this kernel lets the fork hook kill
// the child of a doomed process before it runs (kfunc bpf_send_signal_task,
// Linux 6.13+). Without it the child dies at its first fork or exec, or by
// the enforcer's sweep.
func (s *Sensor) KillsChildrenAtFork() bool { return s.sendSignalTask }
