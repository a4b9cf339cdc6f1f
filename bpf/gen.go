package bpf

// The generated files are committed so `go build` needs no clang. Rebuild
// them with `make generate` (clang-19); CI fails when they differ.
//go:generate go tool bpf2go -cc clang-19 -cflags "-O2 -g -Wall -Werror" -target bpfel -type event -type exec_event -type event_kind -type event_flags -type doom_kill -type clock_tick -type barrier_event -type request_event -type request_drop -type record_format -type stdio_mode Mcptrace mcptrace.bpf.c -- -I./include/x86 -I.
//go:generate go tool bpf2go -cc clang-19 -cflags "-O2 -g -Wall -Werror" -target bpfel -type task_record -type task_head -type task_flags -type task_ident -type exe_ident Tasks tasks.bpf.c -- -I./include/x86 -I.
