// Package bpf holds the kernel side of mcptrace: the eBPF programs on the
// sched_process_fork, sched_process_exec and sched_process_exit tracepoints
// (mcptrace.bpf.c), the record layouts they send (events.h), and the Go
// bindings bpf2go generates from them (mcptrace_bpfel.go and .o). The C
// structs are the one definition of the event types; Go uses the generated
// McptraceEvent and McptraceExecEvent.
//
// The generated files are committed, so building needs no clang. After a
// change to a .c or .h file run `make generate`.
//
// include/x86/vmlinux.h was generated with
//
//	bpftool btf dump file /sys/kernel/btf/vmlinux format c
//
// on Linux 6.18; CO-RE relocations make the object load on older kernels.
package bpf
