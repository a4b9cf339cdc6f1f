/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Event records shared by the BPF programs and Go. This header is the one
 * definition: bpf2go generates the Go types from it (-type event,
 * -type exec_event), so nothing here is copied by hand into Go.
 */
#ifndef MCPTRACE_EVENTS_H
#define MCPTRACE_EVENTS_H

#define COMM_LEN 16
#define FILENAME_LEN 256
/* Bytes of argv captured at exec (NUL-separated, as in /proc/PID/cmdline).
 * A power of two: the verifier bounds the read with a mask. */
#define ARGS_LEN 4096

enum event_kind {
	EVENT_FORK = 1,
	EVENT_EXEC = 2,
	EVENT_EXIT = 3,
	/* Not a process event: a sync point user space asked for (struct
	 * barrier_event). */
	EVENT_BARRIER = 4,
	/* A container client wrote an engine API request (struct
	 * request_event). */
	EVENT_REQUEST = 5,
	EVENT_KIND_MAX = 6,
};

enum event_flags {
	/* exec: argv was longer than ARGS_LEN-1 bytes and was cut. */
	EVENT_FLAG_ARGS_TRUNCATED = 1 << 0,
	/* exec: argv could not be read from the new image's stack. */
	EVENT_FLAG_ARGS_UNREADABLE = 1 << 1,
	/* exec: the filename was longer than FILENAME_LEN-1 bytes and was cut. */
	EVENT_FLAG_FILENAME_TRUNCATED = 1 << 2,
};

/* One clock tick in ns (1e9 / USER_HZ, USER_HZ = 100): the precision of
 * start times in /proc and so of doomed start times (map doomed). The one
 * definition: bpf2go generates it for Go (-type clock_tick), and
 * TestKernelAndGoShareTheClockTick holds lineage.TickNS to it. */
enum clock_tick {
	CLOCK_TICK_NS = 10000000,
};
#define DOOM_TICK_NS ((__u64)CLOCK_TICK_NS)

/* Kills done in the kernel for doomed processes (map doom_kills). */
enum doom_kill {
	DOOM_KILL_FORKER = 0, /* a doomed process forked: killed */
	DOOM_KILL_CHILD = 1,  /* the child of a doomed process, before it ran (6.13+) */
	DOOM_KILL_EXEC = 2,   /* a doomed process exec'd: killed */
	/* Not a kill: a doomed process exec'd a program a spare rule may
	 * protect (map spare_comms, spare_all); it left doom alive. */
	DOOM_SPARED_EXEC = 3,
	DOOM_KILL_MAX = 4,
};

/* A process for its whole life: thread-group id plus the group leader's
 * task->start_boottime (ns since boot, CLOCK_BOOTTIME). */
struct proc_ident {
	__u32 pid;
	__u32 _pad;
	__u64 start;
};

/* Header of every record; fork and exit records are just this. */
struct event {
	__u64 time;                /* bpf_ktime_get_boot_ns() */
	struct proc_ident proc;    /* the process (fork: the new child) */
	struct proc_ident creator; /* fork: the process that forked */
	struct proc_ident parent;  /* task->real_parent's process */
	__u64 cgroup_id;           /* cgroup v2 id of the current task */
	__u32 uid;                 /* real uid */
	__u32 exit_code;           /* exit: raw wait status (code << 8 | signal) */
	__u8 kind;                 /* enum event_kind */
	__u8 flags;                /* enum event_flags */
	__u16 _pad;
	__u32 _pad2;
	char comm[COMM_LEN];
};

/* An exec record is cut after the argv bytes read: it is
 * offsetof(struct exec_event, args) + args_len bytes long, not
 * sizeof(struct exec_event), so the ring buffer holds as many records as
 * their argv allows (a 100-byte argv makes a 500-byte record, not 4.4 KB).
 * Bump RECORD_FORMAT whenever what a record means changes without its
 * layout changing too: sets of programs pinned by another build are read
 * only when layout and format agree (sensor.recordLayout). */
enum record_format {
	RECORD_FORMAT = 4,
};

/* What an exec record says of each of the process's fd 0 and fd 1
 * (struct exec_event, stdin_mode and stdout_mode): the file's type as
 * (inode->i_mode & S_IFMT) >> 12 (1 a pipe, 2 a character device such
 * as /dev/null or a terminal, 8 a regular file, 12 a socket, ...), or
 * one of these. A host talks to the MCP servers it starts over pipes or
 * sockets on both. */
enum stdio_mode {
	STDIO_UNREAD = 0, /* the file table could not be read */
	STDIO_CLOSED = 255, /* no file at that descriptor */
};

struct exec_event {
	struct event base;
	__u32 filename_len;        /* bytes in filename, NUL excluded */
	__u32 args_len;            /* bytes captured in args */
	__u32 args_size;           /* full size of argv in the new image */
	__u8 stdin_mode;           /* fd 0 at exec: enum stdio_mode */
	__u8 stdout_mode;          /* fd 1 at exec: enum stdio_mode */
	__u16 _pad;
	char filename[FILENAME_LEN];
	char args[ARGS_LEN];       /* cut: args_len bytes are in the record */
};

/* A barrier (kind EVENT_BARRIER), written by the program "ring_barrier", which
 * user space runs on demand through BPF_PROG_TEST_RUN (it is never
 * attached). The ring buffer hands records out in the order they were
 * reserved, so a reader that has read barrier seq has read every record
 * reserved before it: every event of a process that had already forked,
 * exec'd or exited when user space asked for the barrier. */
struct barrier_event {
	struct event base;         /* kind EVENT_BARRIER, time; the rest zero */
	__u64 seq;                 /* the number user space passed in */
};

/* Bytes of an engine API request captured (struct request_event): the
 * request line `POST /v1.41/containers/<64 hex>/start` needs 23 + 64 + 6;
 * a power of two, for the verifier's mask. */
#define REQUEST_LEN 128
/* Request records one uid's clients send in a second at most (map
 * request_uid_rate), and one CPU (map request_rate): a user whose clients
 * write start lines in a loop uses up their own budget, not the node's,
 * and the node's keeps the ring buffer for fork, exec and exit records
 * against many users at once. Only starts count (a `docker run` sends
 * 4 or 5 requests, one of them its start): what starts nothing is never
 * sent. */
#define REQUESTS_PER_UID_PER_SEC 256
#define REQUESTS_PER_SEC 1024
/* uids whose windows are kept (map request_uid_rate, least recently used
 * out first: a uid evicted starts a new window, so uids past it share
 * only the per-CPU bound). */
#define REQUEST_UIDS 4096

/* Requests read and not sent (map request_drops). */
enum request_drop {
	REQUEST_DROP_RATE = 0,       /* over REQUESTS_PER_SEC on a CPU */
	REQUEST_DROP_UNREADABLE = 1, /* the bytes could not be read */
	REQUEST_DROP_UID_RATE = 2,   /* over REQUESTS_PER_UID_PER_SEC for the sender's uid */
	REQUEST_DROP_MAX = 3,
};

/* An engine API request (kind EVENT_REQUEST): the first bytes a container
 * client (its program named in map client_comms) sent on a unix stream
 * socket whose peer is an engine's socket (map engine_sockets, by inode),
 * when they start with "POST /" and the path ends in "/start" or
 * "/restart" (the kernel's first sieve; user space parses). Nothing else anyone
 * sends on any socket is read. The header's proc is the sender. */
struct request_event {
	struct event base;
	__u32 len;                 /* bytes in line */
	__u32 _pad;
	char line[REQUEST_LEN];
};

/* A process as the task iterator (tasks.bpf.c) reads it when the agent
 * seeds its graph: one record per thread-group leader, cut after args_len
 * bytes of args like an exec record. What /proc/PID/stat, status and
 * cmdline would say, read in one pass instead of several system calls a
 * process; the executable's path is not read here (bpf_d_path refuses
 * the iterator's task pointers). */
enum task_flags {
	TASK_FLAG_KERNEL = 1 << 0,          /* PF_KTHREAD: a kernel thread */
	TASK_FLAG_ARGS_TRUNCATED = 1 << 1,  /* argv longer than ARGS_LEN-1 bytes: cut */
	TASK_FLAG_ARGS_UNREADABLE = 1 << 2, /* argv could not be read */
	TASK_FLAG_ZOMBIE = 1 << 3,          /* the leader has exited (EXIT_ZOMBIE) */
	TASK_FLAG_DEAD = 1 << 4,            /* being reaped (EXIT_DEAD) */
};

/* A process's executable as /proc/PID/exe names it: the file's mount and
 * dentry (mm->exe_file->f_path, what d_path reads), and how many times the
 * process has exec'd (self_exec_id). Two processes with the same mount and
 * dentry read the same path, so user space reads one link for them all
 * (sensor.Tasks.Scan). Kernel addresses: compared, never shown. 0, 0: no
 * file (a kernel thread, an mm already gone). */
struct exe_ident {
	__u64 mnt;
	__u64 dentry;
	__u64 exec_id;
};

/* What list_tasks writes for each process. */
struct task_ident {
	struct proc_ident proc;
	struct exe_ident exe;
};

/* A task record's fields before its argv (what user space keeps). */
struct task_head {
	struct proc_ident proc;    /* tgid, the leader's start_boottime */
	__u32 ppid;                /* task->real_parent's tgid */
	__u32 uid;                 /* real uid (real_cred) */
	__u32 threads;             /* live threads (signal->nr_threads) */
	__u32 args_len;            /* bytes captured in args */
	__u32 args_size;           /* arg_end - arg_start */
	__u8 flags;                /* enum task_flags */
	__u8 stdin_mode;           /* fd 0: enum stdio_mode */
	__u8 stdout_mode;          /* fd 1: enum stdio_mode */
	__u8 _pad;
	char comm[COMM_LEN];
	struct exe_ident exe;
};

struct task_record {
	struct task_head head;
	char args[ARGS_LEN];       /* cut: head.args_len bytes are in the record */
};

#endif
