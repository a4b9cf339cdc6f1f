package procfs

import (
	"fmt"
	"sync"

	"github.com/mcptrace/mcptrace/windows/winproc"
)

// clock is the kernel's boot time, read once: every time on Windows is
// placed on it (winproc.Clock), as CLOCK_BOOTTIME is on Linux.
var clock = sync.OnceValues(winproc.SystemClock)

// BootID identifies this boot: the boot time in FILETIME ticks, exact as
// the kernel keeps it (root is ignored). A state written under another
// boot names other processes.
func BootID(root string) (string, error) {
	c, err := clock()
	if err != nil {
		return "", fmt.Errorf("procfs: boot time: %w", err)
	}
	return fmt.Sprintf("windows-boot-%d", c.Boot), nil
}

// BootTimeNow is the time since boot in nanoseconds, on the clock every
// Windows time is placed on (winproc.Clock); 0 when the boot time could
// not be read.
func BootTimeNow() uint64 {
	c, err := clock()
	if err != nil {
		return 0
	}
	return c.Now()
}
