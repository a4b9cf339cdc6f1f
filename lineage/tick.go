package lineage

// TickNS is one clock tick in nanoseconds, 1e9/USER_HZ with USER_HZ = 100
// on every Linux architecture: the precision of process start times in
// /proc (so of identities seeded from a snapshot, Process.CoarseStart) and
// of the start times the kernel's doomed map keeps. It is the Go side of
// CLOCK_TICK_NS in bpf/events.h, the one definition;
// TestKernelAndGoShareTheClockTick (bpf/) holds the two equal.
const TickNS = 10_000_000

// Tick returns the clock tick the process started in.
func (id ID) Tick() uint64 { return id.Start / TickNS }

// SameTick reports whether two identities name the same process at tick
// precision: the same PID, started within the same clock tick. It is how
// an exact identity from the kernel is compared with one read from /proc.
func (id ID) SameTick(o ID) bool { return id.PID == o.PID && id.Tick() == o.Tick() }
