package vm

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
)

// heldTracepoints are the tracepoints the sensor attaches to whose
// call sites run on every socket read, fork, exec and exit.
var heldTracepoints = []string{"skb_copy_datagram_iovec", "sched_process_fork", "sched_process_exec", "sched_process_exit"}

// holdHotTracepoints attaches two programs that do nothing to each of
// heldTracepoints for the guest's life, so that no test's attach or
// detach patches their call sites. Attaching the holds patches them too:
// the guest boots with one CPU online (maxcpus=1, host.go), holds, then
// onlines the others (onlineCPUs), so no other vCPU runs the code while
// it changes. (Holding alone, with both CPUs up, locked a 5.10 guest up
// at boot once, in a CI dry run.) The caller keeps the returned func
// reachable for as long as the holds must last: cilium/ebpf closes a
// descriptor once it is collected.
//
// The kernel rewrites a tracepoint's call sites in running code when the
// number of programs on it changes between none, one and more (its
// static key, and its static call's target); x86 does it with a
// breakpoint while the other CPUs run. QEMU's multi-threaded TCG does
// not keep that coherent: another vCPU can still run the breakpoint once
// it is gone, and the guest dies in an "Oops: int3" (seen in
// trace_syscall_enter on 7.2) or locks up with both vCPUs stuck (seen
// on 5.10), mostly when a test attached to sys_enter, which every
// system call passes (the request reader's hook before it moved to
// socket reads). With two programs always there, an attach or a
// detach only changes the list the kernel iterates: the code stays as
// it is. Single-threaded TCG would be coherent, but it runs a vCPU up to
// 100 ms before the other answers an IPI, and the enforcer tests' fork
// loops then take seconds to kill (TestForkingMemberLeavesNoSurvivor
// failed so). What this does not do: hide a fault of the sensor's own
// attach (it attaches as before, beside these).
func holdHotTracepoints() (func(), error) {
	var closers []func() error
	closeAll := func() {
		for _, c := range closers {
			c()
		}
	}
	// Two programs, each on every tracepoint: the kernel refuses the
	// same program twice on one tracepoint.
	for i := range 2 {
		prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
			Name:         fmt.Sprintf("vmexec_hold%d", i),
			Type:         ebpf.RawTracepoint,
			License:      "GPL",
			Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()},
		})
		if err != nil {
			closeAll()
			return nil, fmt.Errorf("loading a program to hold the hot tracepoints: %w", err)
		}
		closers = append(closers, prog.Close)
		for _, tp := range heldTracepoints {
			l, err := link.AttachRawTracepoint(link.RawTracepointOptions{Name: tp, Program: prog})
			if err != nil {
				closeAll()
				return nil, fmt.Errorf("holding tracepoint %s: %w", tp, err)
			}
			closers = append(closers, l.Close)
		}
	}
	return closeAll, nil
}

// onlineCPUs brings up every CPU the kernel booted without (maxcpus=1).
func onlineCPUs() error {
	paths, err := filepath.Glob("/sys/devices/system/cpu/cpu[0-9]*/online")
	if err != nil {
		return err
	}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return fmt.Errorf("reading %s: %w", p, err)
		}
		if strings.TrimSpace(string(b)) == "1" {
			continue
		}
		if err := os.WriteFile(p, []byte("1"), 0o644); err != nil {
			return fmt.Errorf("bringing up %s: %w", filepath.Dir(p), err)
		}
	}
	return nil
}
