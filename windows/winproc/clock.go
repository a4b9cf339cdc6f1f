package winproc

// Clock places Windows times on the lineage's clock, nanoseconds since
// boot (CLOCK_BOOTTIME on Linux).
type Clock struct {
	// Boot is when the machine booted, as a FILETIME (100 ns units since
	// 1601).
	Boot uint64
}

// Since is ft in ns since boot; 0 for a time before boot.
func (c Clock) Since(ft uint64) uint64 {
	if ft <= c.Boot {
		return 0
	}
	return (ft - c.Boot) * 100
}
