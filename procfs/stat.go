package procfs

// Stat is what mcptrace reads of /proc/PID/stat (proc(5)).
type Stat struct {
	PID   uint32
	Comm  string
	State byte // R, S, D, Z, X, ...
	PPID  uint32
	// Session is the process's session ID (setsid(2)): a daemon that
	// detached has its own.
	Session uint32
	Flags   uint64 // PF_* flags
	// Nice is the scheduling priority, -20 to 19 (of the thread whose
	// stat was read: a nice value is a thread's).
	Nice int
	// StartTicks is the start time in clock ticks since boot
	// (lineage.TickNS each).
	StartTicks uint64
}
