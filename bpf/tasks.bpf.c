//go:build ignore
// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * The task iterator the agent seeds its graph from: one struct
 * task_record (events.h) per process, written to the iterator's seq file.
 * Reading /proc costs a dozen system calls a process (about 70 µs on a
 * paravirtualised CPU); one read(2) here returns hundreds of processes.
 *
 * Sleepable (iter.s/task) because a process's argv is in its own memory:
 * bpf_copy_from_user_task needs Linux 5.18. Older kernels refuse to load
 * this object, and the agent reads /proc instead (it says so). This object
 * is loaded only to be read once and closed; nothing here is attached to
 * anything or pinned.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_tracing.h>
#include "events.h"
#include "task_stdio.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* Make the record types visible in BTF for bpf2go -type. */
const struct task_record *unused_task_record __attribute__((unused));
const struct task_head *unused_task_head __attribute__((unused));
const enum task_flags *unused_task_flags __attribute__((unused));
const struct task_ident *unused_task_ident __attribute__((unused));

/* From include/linux/sched.h. */
#define MCPTRACE_PF_KTHREAD 0x00200000
#define MCPTRACE_EXIT_ZOMBIE 0x00000020
#define MCPTRACE_EXIT_DEAD 0x00000010

/* One record under construction per CPU: too large for the stack. The
 * program sleeps while it reads argv (migration is off, preemption is
 * not), so two readers of one loaded object on one CPU would share the
 * slot: user space reads one object at a time (sensor.Tasks.Scan). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct task_record);
} task_scratch SEC(".maps");

/* exe_of fills e for task t (struct exe_ident). Every pointer is read
 * with a probe: an exiting task's mm and file may go at any moment, and a
 * probe of freed memory reads 0 or stale bytes, never faults; user space
 * takes a path from one process for another only when both records, one
 * before its readlink and one after, agree (sensor.Tasks.Scan). */
static __always_inline void exe_of(struct exe_ident *e, struct task_struct *t)
{
	e->mnt = 0;
	e->dentry = 0;
	e->exec_id = BPF_CORE_READ(t, self_exec_id);
	if (t->flags & MCPTRACE_PF_KTHREAD)
		return;
	struct file *f = BPF_CORE_READ(t, mm, exe_file);
	if (!f)
		return;
	e->mnt = (__u64)BPF_CORE_READ(f, f_path.mnt);
	e->dentry = (__u64)BPF_CORE_READ(f, f_path.dentry);
}

SEC("iter.s/task")
int dump_tasks(struct bpf_iter__task *ctx)
{
	struct seq_file *seq = ctx->meta->seq;
	struct task_struct *t = ctx->task;
	if (!t)
		return 0;
	/* Threads are not processes: the leader stands for its group. */
	if (t->pid != t->tgid)
		return 0;
	__u32 zero = 0;
	struct task_record *r = bpf_map_lookup_elem(&task_scratch, &zero);
	if (!r)
		return 0;
	struct task_head *h = &r->head;
	h->proc.pid = t->tgid;
	h->proc._pad = 0;
	h->proc.start = t->start_boottime;
	h->ppid = BPF_CORE_READ(t, real_parent, tgid);
	h->uid = BPF_CORE_READ(t, real_cred, uid.val);
	h->threads = BPF_CORE_READ(t, signal, nr_threads);
	h->flags = 0;
	if (t->flags & MCPTRACE_PF_KTHREAD)
		h->flags |= TASK_FLAG_KERNEL;
	int exit_state = t->exit_state;
	if (exit_state & MCPTRACE_EXIT_ZOMBIE)
		h->flags |= TASK_FLAG_ZOMBIE;
	if (exit_state & MCPTRACE_EXIT_DEAD)
		h->flags |= TASK_FLAG_DEAD;
	h->stdin_mode = stdio_mode(t, 0);
	h->stdout_mode = stdio_mode(t, 1);
	h->_pad = 0;
	bpf_probe_read_kernel_str(h->comm, sizeof(h->comm), t->comm);
	exe_of(&h->exe, t);

	__u32 n = 0;
	h->args_size = 0;
	struct mm_struct *mm = t->mm;
	if (mm && !(h->flags & TASK_FLAG_KERNEL)) {
		unsigned long start = BPF_CORE_READ(mm, arg_start);
		unsigned long end = BPF_CORE_READ(mm, arg_end);
		if (end > start) {
			__u64 size = end - start;
			h->args_size = size > 0xffffffff ? 0xffffffff : size;
			n = size < ARGS_LEN ? size : ARGS_LEN - 1;
			if (size > n)
				h->flags |= TASK_FLAG_ARGS_TRUNCATED;
			n &= ARGS_LEN - 1;
			if (bpf_copy_from_user_task(r->args, n, (void *)start, t, 0) < 0) {
				h->flags |= TASK_FLAG_ARGS_UNREADABLE;
				n = 0;
			}
		}
	}
	h->args_len = n;
	bpf_seq_write(seq, r, offsetof(struct task_record, args) + (n & (ARGS_LEN - 1)));
	return 0;
}

/* The identities and executables of the live processes (struct
 * task_ident each), without what else dump_tasks reads: the check after
 * the executables' paths were read that each process was alive, and ran
 * the same executable, throughout. Not sleepable. */
SEC("iter/task")
int list_tasks(struct bpf_iter__task *ctx)
{
	struct seq_file *seq = ctx->meta->seq;
	struct task_struct *t = ctx->task;
	if (!t || t->pid != t->tgid)
		return 0;
	struct task_ident id = {
		.proc = {
			.pid = t->tgid,
			.start = t->start_boottime,
		},
	};
	exe_of(&id.exe, t);
	bpf_seq_write(seq, &id, sizeof(id));
	return 0;
}

