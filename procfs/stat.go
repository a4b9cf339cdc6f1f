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
	// StartTicks is the start time in clock ticks since boot
	// (lineage.TickNS each).
	StartTicks uint64
}
