package treeview

import (
	"fmt"
	"time"

	"github.com/mcptrace/mcptrace/lineage"
)

// state describes whether p runs or how it ended.
func state(p *lineage.Process) string {
	switch {
	case !p.Exited:
		return "alive"
	case p.Gaps&lineage.GapNoExit != 0:
		return "exited ?" // vanished from /proc: how is unknown
	case p.Signal == sigkill:
		return "killed SIGKILL"
	case p.Signal != 0:
		return "signal " + signalName(p.Signal)
	}
	return fmt.Sprintf("exited %d", p.ExitCode)
}

// age is how long p has been running (alive) or ran (exited, "lived …"), or
// "" when the times needed are unknown.
func age(p *lineage.Process, now uint64) string {
	if p.Exited {
		if p.ExitTime == 0 || p.ExitTime < p.ID.Start {
			return ""
		}
		return "lived " + Duration(time.Duration(p.ExitTime-p.ID.Start))
	}
	if now == 0 || now < p.ID.Start {
		return ""
	}
	return Duration(time.Duration(now - p.ID.Start))
}

// ageOf is age as opts say it: for a tree from the history
// (Options.Wall), a live process says since when it ran, a time, not
// how long before the recording.
func ageOf(p *lineage.Process, opts Options) string {
	if opts.Wall != nil && !p.Exited && p.ID.Start != 0 {
		return "since " + opts.Wall(p.ID.Start).Format("15:04:05")
	}
	return age(p, opts.Now)
}

// Duration formats d compactly with two units at most, rounding down:
// <1ms, 4ms, 1.2s, 12s, 3m04s, 2h05m, 3d4h.
func Duration(d time.Duration) string {
	switch {
	case d < time.Millisecond:
		return "<1ms"
	case d < time.Second:
		return fmt.Sprintf("%dms", d/time.Millisecond)
	case d < 10*time.Second:
		return fmt.Sprintf("%d.%ds", d/time.Second, d%time.Second/(100*time.Millisecond))
	case d < time.Minute:
		return fmt.Sprintf("%ds", d/time.Second)
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", d/time.Minute, d%time.Minute/time.Second)
	case d < 24*time.Hour:
		return fmt.Sprintf("%dh%02dm", d/time.Hour, d%time.Hour/time.Minute)
	}
	day := 24 * time.Hour
	return fmt.Sprintf("%dd%dh", d/day, d%day/time.Hour)
}
