/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * What a task's fd 0 and fd 1 are, for the exec records (mcptrace.bpf.c)
 * and the task iterator (tasks.bpf.c): one reading for both.
 */
#ifndef MCPTRACE_TASK_STDIO_H
#define MCPTRACE_TASK_STDIO_H

/* From the uapi headers (vmlinux.h has no macros). */
#define MCPTRACE_S_IFMT 00170000

/* stdio_mode returns what fd of task is (enum stdio_mode in events.h):
 * its file's type, or STDIO_CLOSED, or STDIO_UNREAD. */
static __always_inline __u8 stdio_mode(struct task_struct *task, unsigned int fd)
{
	struct fdtable *fdt = BPF_CORE_READ(task, files, fdt);
	if (!fdt)
		return STDIO_UNREAD;
	if (fd >= BPF_CORE_READ(fdt, max_fds))
		return STDIO_CLOSED;
	struct file **fds = BPF_CORE_READ(fdt, fd);
	struct file *f = NULL;
	if (bpf_probe_read_kernel(&f, sizeof(f), &fds[fd]) < 0)
		return STDIO_UNREAD;
	if (!f)
		return STDIO_CLOSED;
	umode_t mode = BPF_CORE_READ(f, f_inode, i_mode);
	__u8 t = (mode & MCPTRACE_S_IFMT) >> 12;
	return t ? t : STDIO_UNREAD;
}

#endif
