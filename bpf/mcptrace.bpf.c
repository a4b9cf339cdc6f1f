//go:build ignore
// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * Process lineage programs: one record per process fork, exec and exit,
 * sent through the ring buffer "events". Threads are not processes: thread
 * creation is ignored and exit is reported once, when the last thread of the
 * group leaves. Every record that could not be sent is counted per kind in
 * "lost_events", never dropped silently.
 *
 * Hooks are BTF-enabled raw tracepoints (tp_btf, Linux 5.5+); the ring buffer
 * needs 5.8. Task fields are read with CO-RE so one object loads on every
 * kernel of the matrix. Nothing here calls bpf_get_current_task_btf (5.11+):
 * every hook receives its task as an argument.
 *
 * Every hook has two programs, a primary and a backup, attached in that
 * order. Kernels whose tracepoints are preemptible (seen on 7.2, with
 * PREEMPT_LAZY) skip a program invoked on a CPU where the same program is
 * preempted mid-run, counting it only in the program's recursion_misses.
 * The backup, a program of its own with its own guard, runs the event
 * when the primary was skipped for it: the primary claims each event in
 * "claims", the backup runs only for events nobody claimed and counts
 * them in "recovered". An event is lost only when both runs are skipped;
 * user space counts those as the primary's misses minus recovered.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_tracing.h>
#include "events.h"
#include "task_stdio.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* Make the record types visible in BTF for bpf2go -type. */
const struct event *unused_event __attribute__((unused));
const struct exec_event *unused_exec_event __attribute__((unused));
const enum event_kind *unused_event_kind __attribute__((unused));
const enum event_flags *unused_event_flags __attribute__((unused));
const enum doom_kill *unused_doom_kill __attribute__((unused));
const enum clock_tick *unused_clock_tick __attribute__((unused));
const struct barrier_event *unused_barrier_event __attribute__((unused));
const enum record_format *unused_record_format __attribute__((unused));
const struct request_event *unused_request_event __attribute__((unused));
const enum request_drop *unused_request_drop __attribute__((unused));
const enum stdio_mode *unused_stdio_mode __attribute__((unused));

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 8 << 20); /* user space resizes before load */
} events SEC(".maps");

/* Records that could not be sent, indexed by enum event_kind. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, EVENT_KIND_MAX);
	__type(key, __u32);
	__type(value, __u64);
} lost_events SEC(".maps");

/* Processes of ended sessions, by tgid; the value is the process's start
 * time in clock ticks (start_boottime / DOOM_TICK_NS, the precision of
 * /proc/PID/stat, so processes the agent only knows from /proc can be
 * doomed too), so a recycled pid is never taken for a doomed one. User space
 * (the enforcer) adds every member right before it sends SIGKILL; the fork
 * program adds the children of doomed processes, and a doomed process that
 * forks or execs is killed on the spot (unless the exec starts a program a
 * spare rule may protect: spare_comms). Entries leave at exit. Allocated
 * as entries come (BPF_F_NO_PREALLOC): the table is empty on a node where
 * no session ends, and preallocating its 65,536 entries took 5 MB of
 * kernel memory and 16 ms of every start (docs/benchmarks.md). An entry
 * the kernel cannot allocate is a child the fork hook does not doom, as
 * with a full table: the enforcer's sweep of the session still kills it. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 65536);
	__type(key, __u32);
	__type(value, __u64);
} doomed SEC(".maps");

/* The enforcer's spare rules as the kernel applies them at exec: a doomed
 * process that execs a program whose name (comm, zero-padded to COMM_LEN)
 * is a key here, or any program when spare_all[0] is not 0 (rules the
 * kernel cannot evaluate: exe globs, argv patterns), leaves doom instead
 * of being killed, and the enforcer judges the new program in user space.
 * A spared program is never killed by the kernel. Filled by user space
 * before any process is doomed; not pinned. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__uint(key_size, COMM_LEN);
	__uint(value_size, 1);
} spare_comms SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} spare_all SEC(".maps");

/* Kills counted by the kernel, indexed by enum doom_kill. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, DOOM_KILL_MAX);
	__type(key, __u32);
	__type(value, __u64);
} doom_kills SEC(".maps");

/* Exec records are built here, then copied into the ring buffer cut
 * after their argv (see struct exec_event): reserving the full 4.4 KB
 * would cost the ring that much for every exec. One slot per program run
 * (enum run) and CPU: the kernel never runs one program twice at once on
 * a CPU (that is what makes it skip programs), and a run stays on its CPU. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, struct exec_event);
} exec_scratch SEC(".maps");

/* Events the primary program handled, so the backup knows to stand down.
 * A table, not a hash: each kind of event has CLAIM_SLOTS slots, and a
 * task's claim goes into the slot of its tid. An array slot is an address
 * computed inline; the LRU hash this replaces cost the two programs 300
 * ns more per fork (590 ns in all, 325 with the table) and 400 ns more
 * per exec (bpf_stats, storms pinned to one CPU). A claim lives from the
 * primary's run to the backup's on the same task, microseconds, and is
 * never removed: with its slot it names its event whole (task, kind,
 * start time, exec count), so a stale claim never matches another event.
 * Two tasks whose tids share a slot and hit the same hook in the same
 * microseconds overwrite each other's claim: the backup then runs too,
 * the event comes twice (the graph applies it once) and counts as
 * recovered without a skip. That never loses an event, but user space
 * counts losses as misses minus recovered, so each such duplicate can
 * hide one later loss of both programs from the count (docs/SECURITY.md,
 * "Known limits"). CLAIM_SLOTS is the kernel's default pid_max: where
 * pid_max is not raised, live tids never share a slot. */
#define CLAIM_SLOTS 32768

struct claim {
	__u64 start; /* the task's start_boottime: tids are reused */
	__u64 seq;   /* exec: the task's self_exec_id; 0 otherwise */
	__u32 tid;
	__u32 _pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 3 * CLAIM_SLOTS); /* fork, exec, exit */
	__type(key, __u32);
	__type(value, struct claim);
} claims SEC(".maps");

/* Events the backup ran because the primary was skipped, by event kind. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, EVENT_KIND_MAX);
	__type(key, __u32);
	__type(value, __u64);
} recovered SEC(".maps");

enum run {
	RUN_PRIMARY,
	RUN_BACKUP,
};

/* Linux 6.13+: signal another task. Weak: resolved to 0 on older kernels,
 * where the branch that calls it is dead code the verifier drops. */
extern int bpf_send_signal_task(struct task_struct *task, int sig, enum pid_type type, __u64 value) __ksym __weak;

#define MCPTRACE_SIGKILL 9

/* From the uapi headers (vmlinux.h has no macros). */
#define MCPTRACE_SOCK_STREAM 1
#define MCPTRACE_AF_UNIX 1

/* SIGNAL_GROUP_EXIT from include/linux/sched/signal.h. */
#define MCPTRACE_SIGNAL_GROUP_EXIT 0x00000004

/* The programs whose requests to a container engine are read (their
 * process name, comm, zero-padded to COMM_LEN): container clients.
 * Filled by user space before attaching. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16);
	__uint(key_size, COMM_LEN);
	__uint(value_size, 1);
} client_comms SEC(".maps");

/* The engine sockets, by the identity of their inode (struct sock_id):
 * a client's request is read only when its socket's peer is bound to one
 * of these. A path would not do: anyone can bind a socket of that name in
 * a mount namespace of their own. User space keeps it up to date (an
 * engine that restarts makes a new socket). */
struct sock_id {
	__u64 ino;
	__u32 dev; /* the kernel's dev_t: major << 20 | minor */
	__u32 _pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8);
	__type(key, struct sock_id);
	__type(value, __u8);
} engine_sockets SEC(".maps");

/* Requests not sent to user space, by enum request_drop. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, REQUEST_DROP_MAX);
	__type(key, __u32);
	__type(value, __u64);
} request_drops SEC(".maps");

/* The rate limits of request records: per uid, at most
 * REQUESTS_PER_UID_PER_SEC in each second (one user's clients writing
 * start lines in a loop use up their own budget only), then per CPU, at
 * most REQUESTS_PER_SEC (many users at once must not crowd fork, exec
 * and exit records out of the ring buffer). */
struct request_window {
	__u64 second;
	__u64 sent;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct request_window);
} request_rate SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, REQUEST_UIDS);
	__type(key, __u32);
	__type(value, struct request_window);
} request_uid_rate SEC(".maps");

static __always_inline void count(void *map, __u32 key)
{
	__u64 *n = bpf_map_lookup_elem(map, &key);
	/* Atomic: on a preemptible tracepoint another program can update
	 * the same per-CPU slot in the middle of this one. */
	if (n)
		__sync_fetch_and_add(n, 1);
}

/* should_run decides whether this run handles the event of kind on task
 * tid (start, seq): the primary always does and claims it; the backup
 * does only when its claim is not there, i.e. the primary was skipped. */
static __always_inline bool should_run(enum run run, __u32 tid, __u32 kind, __u64 start, __u64 seq)
{
	__u32 slot = (kind - EVENT_FORK) * CLAIM_SLOTS + (tid & (CLAIM_SLOTS - 1));
	struct claim *c = bpf_map_lookup_elem(&claims, &slot);
	if (!c)
		return true; /* cannot happen: the slot is in range */
	if (run == RUN_PRIMARY) {
		c->start = start;
		c->seq = seq;
		c->tid = tid;
		return true;
	}
	if (c->tid == tid && c->start == start && c->seq == seq)
		return false;
	count(&recovered, kind);
	return true;
}

static __always_inline void count_lost(__u32 kind)
{
	count(&lost_events, kind);
}

/* is_doomed reports whether the process id is in the doomed map with the
 * same start time. */
static __always_inline bool is_doomed(struct proc_ident *id)
{
	__u64 *tick = bpf_map_lookup_elem(&doomed, &id->pid);
	return tick && *tick == id->start / DOOM_TICK_NS;
}

/* The process a task belongs to: tgid and its leader's start time. */
static __always_inline void ident_of(struct proc_ident *id, struct task_struct *task)
{
	id->pid = task->tgid;
	id->start = task->group_leader->start_boottime;
}

static __always_inline void fill_header(struct event *e, __u8 kind, struct task_struct *task)
{
	e->time = bpf_ktime_get_boot_ns();
	e->kind = kind;
	e->flags = 0;
	e->exit_code = 0;
	e->uid = (__u32)bpf_get_current_uid_gid();
	e->cgroup_id = bpf_get_current_cgroup_id();
	ident_of(&e->proc, task);
	ident_of(&e->parent, task->real_parent);
	e->creator.pid = 0;
	e->creator.start = 0;
	struct task_struct *leader = task->group_leader;
	bpf_probe_read_kernel_str(e->comm, sizeof(e->comm), &leader->comm);
}

/* doom_fork: the child of a doomed process inherits doom, and the doomed
 * parent that forked is killed. Runs after the fork record is sent (or
 * counted lost), so the graph learns about the child even when it dies at
 * once. */
static __always_inline void doom_fork(struct task_struct *parent, struct task_struct *child)
{
	struct proc_ident p, c;
	ident_of(&p, parent);
	if (!is_doomed(&p))
		return;
	ident_of(&c, child);
	__u64 tick = c.start / DOOM_TICK_NS;
	bpf_map_update_elem(&doomed, &c.pid, &tick, BPF_ANY);
	if (bpf_send_signal(MCPTRACE_SIGKILL) == 0)
		count(&doom_kills, DOOM_KILL_FORKER);
	if (bpf_send_signal_task) {
		/* Kill the child before it ever runs (6.13+). Older kernels
		 * rely on the exec hook and the user-space sweep. */
		if (bpf_send_signal_task(child, MCPTRACE_SIGKILL, PIDTYPE_TGID, 0) == 0)
			count(&doom_kills, DOOM_KILL_CHILD);
	}
}

static __always_inline int on_fork(enum run run, struct task_struct *parent, struct task_struct *child)
{
	/* clone(CLONE_THREAD) makes a thread, not a process. */
	__u32 tid = child->pid;
	if (tid != child->tgid)
		return 0;
	if (!should_run(run, tid, EVENT_FORK, child->start_boottime, 0))
		return 0;

	struct event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (e) {
		fill_header(e, EVENT_FORK, child);
		/* The creator is the process that forked, even when CLONE_PARENT
		 * makes the child's real_parent someone else. */
		ident_of(&e->creator, parent);
		bpf_ringbuf_submit(e, 0);
	} else {
		count_lost(EVENT_FORK);
	}
	/* Doom holds whether or not the ring had room: while no agent reads
	 * it (a stop, a crash, an upgrade) the ring fills, and that is when
	 * doom alone holds a session's members. */
	doom_fork(parent, child);
	return 0;
}

/* exec_spared reports whether a spare rule may protect the program task p
 * has just exec'd: the kernel cannot tell for sure, so it spares whatever
 * might be (see spare_comms). */
static __always_inline bool exec_spared(struct task_struct *p)
{
	__u32 zero = 0;
	__u32 *all = bpf_map_lookup_elem(&spare_all, &zero);
	if (all && *all)
		return true;
	/* Zero-padded: the key is all COMM_LEN bytes. */
	char comm[COMM_LEN] = {};
	struct task_struct *leader = p->group_leader;
	if (bpf_probe_read_kernel_str(comm, sizeof(comm), &leader->comm) < 0)
		return false;
	return bpf_map_lookup_elem(&spare_comms, comm) != NULL;
}

/* doom_exec: a doomed process may not start a new program, unless a spare
 * rule may protect the program: then it leaves doom and lives, and the
 * enforcer judges it. Runs after the exec record is sent (or counted
 * lost). */
static __always_inline void doom_exec(struct task_struct *p)
{
	struct proc_ident self;
	ident_of(&self, p);
	if (!is_doomed(&self))
		return;
	if (exec_spared(p)) {
		bpf_map_delete_elem(&doomed, &self.pid);
		count(&doom_kills, DOOM_SPARED_EXEC);
		return;
	}
	if (bpf_send_signal(MCPTRACE_SIGKILL) == 0)
		count(&doom_kills, DOOM_KILL_EXEC);
}

static __always_inline int on_exec(enum run run, struct task_struct *p, struct linux_binprm *bprm)
{
	/* self_exec_id counts the task's execs: one claim per exec. */
	if (!should_run(run, p->pid, EVENT_EXEC, p->start_boottime, p->self_exec_id))
		return 0;
	__u32 slot = run;
	struct exec_event *e = bpf_map_lookup_elem(&exec_scratch, &slot);
	if (!e) {
		count_lost(EVENT_EXEC);
		doom_exec(p);
		return 0;
	}
	/* After de_thread the exec'ing thread is the group leader and carries
	 * the old leader's start time, so the identity survives a non-leader
	 * exec. */
	fill_header(&e->base, EVENT_EXEC, p);

	long n = bpf_probe_read_kernel_str(e->filename, sizeof(e->filename), bprm->filename);
	if (n < 0) {
		e->filename[0] = 0;
		n = 1;
	}
	e->filename_len = n - 1;
	if (e->filename_len == FILENAME_LEN - 1)
		e->base.flags |= EVENT_FLAG_FILENAME_TRUNCATED;

	/* argv sits on the new image's stack between mm->arg_start and
	 * arg_end, written by the exec moments ago, so it is resident. It is
	 * read here because wrappers such as `sh -c` or `npm exec` may be gone
	 * before user space could look at /proc. */
	struct mm_struct *mm = p->mm;
	unsigned long start = mm->arg_start;
	unsigned long end = mm->arg_end;
	__u64 size = end > start ? end - start : 0;
	__u64 len = size;
	if (len > ARGS_LEN - 1) {
		len = ARGS_LEN - 1;
		e->base.flags |= EVENT_FLAG_ARGS_TRUNCATED;
	}
	len &= ARGS_LEN - 1;
	e->args_size = size;
	if (bpf_probe_read_user(e->args, len, (void *)start) < 0) {
		len = 0;
		e->base.flags |= EVENT_FLAG_ARGS_UNREADABLE;
	}
	e->args_len = len;
	/* The descriptors the new image starts with: the exec'ing task's
	 * own file table (shared with its threads, never with its creator
	 * after a fork). */
	e->stdin_mode = stdio_mode(p, 0);
	e->stdout_mode = stdio_mode(p, 1);
	if (bpf_ringbuf_output(&events, e, offsetof(struct exec_event, args) + (len & (ARGS_LEN - 1)), 0) < 0)
		count_lost(EVENT_EXEC);
	doom_exec(p);
	return 0;
}

static __always_inline int on_exit(enum run run, struct task_struct *p)
{
	/* Claimed before the test below: another thread leaving meanwhile
	 * could make the backup's reading of live differ from the
	 * primary's. */
	if (!should_run(run, p->pid, EVENT_EXIT, p->start_boottime, 0))
		return 0;
	/* Only the last thread of the group reports: signal->live reached
	 * zero in do_exit before this tracepoint. */
	if (p->signal->live.counter != 0)
		return 0;

	struct proc_ident self;
	ident_of(&self, p);
	if (is_doomed(&self))
		bpf_map_delete_elem(&doomed, &self.pid);

	struct event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e) {
		count_lost(EVENT_EXIT);
		return 0;
	}
	fill_header(e, EVENT_EXIT, p);
	unsigned int sflags = p->signal->flags;
	if (sflags & MCPTRACE_SIGNAL_GROUP_EXIT)
		e->exit_code = p->signal->group_exit_code;
	else
		e->exit_code = p->exit_code;
	bpf_ringbuf_submit(e, 0);
	return 0;
}

/* engine_peer reports whether sk, a client's end of a unix stream
 * connection, is connected to a socket whose inode is one of
 * engine_sockets, and returns that peer (the engine's end), or NULL. An
 * accepted socket carries its listener's path, so the peer of a client's
 * socket names the engine's socket file; a client's own end has no path,
 * so what the engine sends back is never taken for a request. */
static __always_inline struct sock *engine_peer(struct sock *sk)
{
	struct sock *peer = BPF_CORE_READ((struct unix_sock *)sk, peer);
	if (!peer)
		return NULL;
	struct inode *ino = BPF_CORE_READ((struct unix_sock *)peer, path.dentry, d_inode);
	if (!ino)
		return NULL;
	struct sock_id id = {};
	id.ino = BPF_CORE_READ(ino, i_ino);
	id.dev = BPF_CORE_READ(ino, i_sb, s_dev);
	if (!bpf_map_lookup_elem(&engine_sockets, &id))
		return NULL;
	return peer;
}

/* request_uid_allowed applies the per-uid rate limit of request
 * records. The window is shared by the uid's CPUs: a reset racing an
 * increment may let a few more through in that second, never fewer. */
static __always_inline bool request_uid_allowed(__u32 uid)
{
	__u64 second = bpf_ktime_get_boot_ns() / 1000000000ULL;
	struct request_window *w = bpf_map_lookup_elem(&request_uid_rate, &uid);
	if (!w) {
		struct request_window fresh = {.second = second, .sent = 0};
		bpf_map_update_elem(&request_uid_rate, &uid, &fresh, BPF_NOEXIST);
		w = bpf_map_lookup_elem(&request_uid_rate, &uid);
		if (!w)
			return true; /* evicted at once: the per-CPU bound holds */
	}
	if (w->second != second) {
		w->second = second;
		w->sent = 0;
	}
	if (w->sent >= REQUESTS_PER_UID_PER_SEC) {
		count(&request_drops, REQUEST_DROP_UID_RATE);
		return false;
	}
	__sync_fetch_and_add(&w->sent, 1);
	return true;
}

/* request_allowed applies the per-uid, then the per-CPU rate limit of
 * request records. */
static __always_inline bool request_allowed(__u32 uid)
{
	if (!request_uid_allowed(uid))
		return false;
	__u32 zero = 0;
	struct request_window *w = bpf_map_lookup_elem(&request_rate, &zero);
	if (!w)
		return false;
	__u64 second = bpf_ktime_get_boot_ns() / 1000000000ULL;
	if (w->second != second) {
		w->second = second;
		w->sent = 0;
	}
	if (w->sent >= REQUESTS_PER_SEC) {
		count(&request_drops, REQUEST_DROP_RATE);
		return false;
	}
	w->sent++;
	return true;
}

/* starts_container reports whether a request line's path ends in
 * "/start" or "/restart": the only requests user space keeps
 * (containers.ParseRequest), and so the only ones that use a uid's
 * budget and room in the ring (a docker run also sends a create, an
 * attach and a wait: a budget they used up would let a session's own
 * starts go unread, and the race at 200 sessions showed it). The path
 * ends at its first ' ' or '?' after "POST /"; a line with none within
 * the n bytes read starts nothing (user space would refuse it too). This
 * is a necessary condition only: user space still parses the line. The
 * loop is unrolled, so every read of line is at a constant offset (the
 * 5.10 verifier refuses a variable one on the stack); the last 8 bytes
 * before the end are kept in a shift register. */
#define PATH_START_BYTES 0x2f7374617274ULL        /* "/start" */
#define PATH_RESTART_BYTES 0x2f72657374617274ULL  /* "/restart" */
static __always_inline bool starts_container(const char *line, __u32 n)
{
	__u64 last = 0;
	bool ended = false, start = false;
#pragma unroll
	for (__u32 i = 6; i < REQUEST_LEN; i++) {
		char c = line[i];
		if (!ended && i < n) {
			if (c == ' ' || c == '?') {
				start = (last & 0xffffffffffffULL) == PATH_START_BYTES || last == PATH_RESTART_BYTES;
				ended = true;
			}
			last = last << 8 | (__u8)c;
		}
	}
	return start;
}

/* connector returns the process that connected the engine's end peer:
 * the leader of the thread group whose tgid the kernel recorded as its
 * peer at connect (sk_peer_pid, what SO_PEERCRED reports), or NULL when
 * that process is gone. The struct pid outlives its tasks, so a pid
 * number reused since is never taken for the connector. */
static __always_inline struct task_struct *connector(struct sock *peer)
{
	struct pid *pid = BPF_CORE_READ(peer, sk_peer_pid);
	if (!pid)
		return NULL;
	struct hlist_node *first = BPF_CORE_READ(pid, tasks[PIDTYPE_TGID].first);
	if (!first)
		return NULL;
	/* container_of(first, struct task_struct, pid_links[PIDTYPE_TGID]) */
	return (struct task_struct *)((void *)first - bpf_core_field_offset(struct task_struct, pid_links) -
				      PIDTYPE_TGID * sizeof(struct hlist_node));
}

/* fill_request_header is fill_header for a request's sender, which is
 * not the current task (the engine is): every field is read with a
 * probe, the cgroup and uid from the task. */
static __always_inline void fill_request_header(struct event *e, struct task_struct *task, char *comm)
{
	e->time = bpf_ktime_get_boot_ns();
	e->kind = EVENT_REQUEST;
	e->flags = 0;
	e->exit_code = 0;
	e->uid = BPF_CORE_READ(task, cred, uid.val);
	e->cgroup_id = BPF_CORE_READ(task, cgroups, dfl_cgrp, kn, id);
	e->proc.pid = BPF_CORE_READ(task, tgid);
	e->proc.start = BPF_CORE_READ(task, group_leader, start_boottime);
	e->parent.pid = BPF_CORE_READ(task, real_parent, tgid);
	e->parent.start = BPF_CORE_READ(task, real_parent, group_leader, start_boottime);
	e->creator.pid = 0;
	e->creator.start = 0;
	__builtin_memcpy(e->comm, comm, COMM_LEN);
}

/* request_recv: an engine reads bytes a container client sent it. The
 * hook is where every socket receive copies a buffer out to user space
 * (skb_copy_datagram_iter, Linux 3.19+, the same on every kernel of the
 * matrix): it fires on socket reads only, never on other system calls,
 * and what is not a unix stream returns at its first compares, what is
 * not sent to an engine (map engine_sockets, by inode) at a map lookup.
 * When the buffer is the start of what a client sent (the first read of
 * it) and starts "POST /", and the process that connected (the peer the
 * kernel recorded at connect, what SO_PEERCRED reports) runs a program
 * named in client_comms, and the line's path ends in "/start" or
 * "/restart" (starts_container), its first REQUEST_LEN bytes go to user
 * space:
 * the request line names the container the client acts on
 * (`POST /v1.41/containers/<id>/start`). The request's sender is that
 * process. Read on the engine's side, because the client's side has no
 * hook but system call entry (fentry and kprobes are refused on this
 * kernel kind, shared/FACTS.md), and a hook on every system call slows
 * every system call on the node. No backup program: a run the kernel
 * skips is counted in this program's recursion_misses, which user space
 * reports as lost requests. */
SEC("tp_btf/skb_copy_datagram_iovec")
int BPF_PROG(request_recv, const struct sk_buff *skb, int len)
{
	struct sock *sk = skb->sk;
	if (!sk || sk->__sk_common.skc_family != MCPTRACE_AF_UNIX || sk->sk_type != MCPTRACE_SOCK_STREAM)
		return 0;
	/* The bytes first: one read, and nearly nothing on a node starts
	 * "POST /" (what does is then checked for its peer). */
	unsigned char *data = skb->data;
	__u32 head_len = skb->len - skb->data_len;
	char head[6];
	if (head_len < sizeof(head) || bpf_probe_read_kernel(head, sizeof(head), data) < 0)
		return 0;
	if (head[0] != 'P' || head[1] != 'O' || head[2] != 'S' || head[3] != 'T' || head[4] != ' ' || head[5] != '/')
		return 0;
	struct sock *peer = engine_peer(sk);
	if (!peer)
		return 0;
	/* A read that goes on where an earlier one stopped is not the start
	 * of what the client sent (af_unix.c: UNIXCB(skb).consumed). */
	struct unix_skb_parms *cb = (struct unix_skb_parms *)skb->cb;
	if (BPF_CORE_READ(cb, consumed) != 0)
		return 0;
	struct task_struct *task = connector(peer);
	if (!task)
		return 0;
	char comm[COMM_LEN] = {};
	if (bpf_probe_read_kernel_str(comm, sizeof(comm), &task->comm) < 0)
		return 0;
	if (!bpf_map_lookup_elem(&client_comms, comm))
		return 0;
	__u64 n = head_len < REQUEST_LEN ? head_len : REQUEST_LEN;
	/* Bounded where the verifier sees it, whatever the compiler made of
	 * the line above. */
	barrier_var(n);
	if (n > REQUEST_LEN)
		n = REQUEST_LEN;
	char line[REQUEST_LEN] = {};
	if (n == 0 || bpf_probe_read_kernel(line, n, data) < 0) {
		count(&request_drops, REQUEST_DROP_UNREADABLE);
		return 0;
	}
	if (!starts_container(line, n))
		return 0;
	/* The budget is the connector's uid's: the engine, whose context
	 * this is, runs as root for every client. */
	if (!request_allowed(BPF_CORE_READ(task, cred, uid.val)))
		return 0;
	struct request_event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e) {
		count_lost(EVENT_REQUEST);
		return 0;
	}
	fill_request_header(&e->base, task, comm);
	__builtin_memcpy(e->line, line, REQUEST_LEN);
	e->len = n;
	e->_pad = 0;
	bpf_ringbuf_submit(e, 0);
	return 0;
}

/* The programs: a primary and a backup per hook (see the top). */

SEC("tp_btf/sched_process_fork")
int BPF_PROG(sched_process_fork, struct task_struct *parent, struct task_struct *child)
{
	return on_fork(RUN_PRIMARY, parent, child);
}

SEC("tp_btf/sched_process_fork")
int BPF_PROG(sched_process_fork_backup, struct task_struct *parent, struct task_struct *child)
{
	return on_fork(RUN_BACKUP, parent, child);
}

SEC("tp_btf/sched_process_exec")
int BPF_PROG(sched_process_exec, struct task_struct *p, pid_t old_pid, struct linux_binprm *bprm)
{
	return on_exec(RUN_PRIMARY, p, bprm);
}

SEC("tp_btf/sched_process_exec")
int BPF_PROG(sched_process_exec_backup, struct task_struct *p, pid_t old_pid, struct linux_binprm *bprm)
{
	return on_exec(RUN_BACKUP, p, bprm);
}

SEC("tp_btf/sched_process_exit")
int BPF_PROG(sched_process_exit, struct task_struct *p)
{
	return on_exit(RUN_PRIMARY, p);
}

SEC("tp_btf/sched_process_exit")
int BPF_PROG(sched_process_exit_backup, struct task_struct *p)
{
	return on_exit(RUN_BACKUP, p);
}

/* The barrier (see struct barrier_event in events.h): run by user space
 * with BPF_PROG_TEST_RUN and ctx->args[0] = a sequence number; never
 * attached to its tracepoint. Returns 1 when the ring buffer is full, so
 * the caller can retry once the reader has made room. */
SEC("raw_tp")
int ring_barrier(struct bpf_raw_tracepoint_args *ctx)
{
	struct barrier_event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e)
		return 1;
	__builtin_memset(e, 0, sizeof(*e));
	e->base.time = bpf_ktime_get_boot_ns();
	e->base.kind = EVENT_BARRIER;
	e->seq = ctx->args[0];
	bpf_ringbuf_submit(e, 0);
	return 0;
}
