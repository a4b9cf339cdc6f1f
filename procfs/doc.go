// Package procfs reads the process table from /proc into lineage.Snapshot
// values, to seed and repair a lineage.Graph.
//
// Only Linux is supported; elsewhere Scan and Read return an error. The
// root of the tree is a parameter so tests can point it at a fake /proc.
//
// Each process is read through a directory handle on /proc/PID, so its
// files cannot come from a different process that recycled the PID halfway
// through the read. A process that exits while it is read is reported as
// gone (an error wrapping fs.ErrNotExist), never half-read.
//
// Start times in /proc have clock-tick precision (lineage.TickNS):
// /proc/PID/stat reports starttime in clock ticks of USER_HZ, which is part
// of the kernel ABI (sysconf(_SC_CLK_TCK), AT_CLKTCK) and independent of
// the kernel's internal HZ. USER_HZ is 100 on every architecture Linux and
// Go both support; only alpha (1024) and the removed ia64 ever differed,
// and Go targets neither. The kernel converts with nsec_to_clock_t, which
// truncates, so a process whose exact start is S shows S/TickNS ticks.
// Snapshot IDs carry Start = ticks*TickNS and the graph matches them to
// the kernel's exact start_boottime by tick.
package procfs

// DefaultRoot is where Scan and Read look when root is "" (lineage.proc-root).
const DefaultRoot = "/proc"
