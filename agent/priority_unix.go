//go:build !windows

package agent

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"

	"github.com/mcptrace/mcptrace/procfs"
)

// setPriority sets the scheduling priority (nice) of every thread of the
// agent's process: on Linux a nice value is a thread's, and a thread the
// Go runtime starts later takes its creator's. Two rounds, so that a
// thread started during the first is set in the second. What cannot be
// set (no CAP_SYS_NICE for a value below the current one) is said, and
// the agent runs on at the priority it has.
func (a *Agent) setPriority(nice int) {
	pid := uint32(os.Getpid())
	var set int
	var failed error
	for range 2 {
		tids, err := procfs.Threads("", pid)
		if err != nil {
			failed = errors.Join(failed, err)
			break
		}
		set = 0
		for _, tid := range tids {
			if err := unix.Setpriority(unix.PRIO_PROCESS, int(tid), nice); err != nil && !errors.Is(err, unix.ESRCH) {
				failed = err
				continue
			}
			set++
		}
	}
	if failed != nil {
		a.log.Warn("the agent's scheduling priority could not be set: it runs at the one it was started with, and other users' CPU floods can slow its enforcement (enforcer.nice needs CAP_SYS_NICE)", "nice", nice, "threads_set", set, "err", failed)
		return
	}
	a.log.Info("scheduling priority set", "nice", nice, "threads", set)
}
