package main

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/mcptrace/mcptrace/api"
	"github.com/mcptrace/mcptrace/treeview"
)

// writeStatus writes the status summary: one line per part of the agent,
// what an operator checks first, then the last problems. now is the
// wall clock the times are shown against.
func writeStatus(w io.Writer, st api.Status, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	line := func(what, format string, args ...any) {
		fmt.Fprintf(tw, "%s\t%s\n", what, fmt.Sprintf(format, args...))
	}
	a := st.Agent
	state := "serving"
	if !a.Ready {
		state = "starting"
	}
	since := ""
	if !a.Started.IsZero() {
		since = fmt.Sprintf(" since %s (%s)", a.Started.In(now.Location()).Format(timeLayout), treeview.Duration(now.Sub(a.Started)))
	}
	line("agent", "%s%s, pid %d, %s", state, since, a.PID, a.Install)
	line("version", "%s", a.Build)

	k := st.Kernel
	var kp []string
	switch {
	case k.Attached && k.PinDir != "":
		kp = append(kp, "programs attached, pinned in "+k.PinDir)
	case k.Attached:
		kp = append(kp, "events flowing")
	default:
		kp = append(kp, "not attached")
	}
	if k.SignalAtFork {
		kp = append(kp, "a doomed process's children die at fork")
	}
	if k.DoomedMax > 0 {
		kp = append(kp, fmt.Sprintf("%d of %d doomed entries in use", k.Doomed, k.DoomedMax))
	}
	if k.RequestsOff != "" {
		kp = append(kp, "container requests not read: "+k.RequestsOff)
	}
	line("kernel", "%s: %s", orDash(k.Release), strings.Join(kp, "; "))

	line("processes", "%s alive, %s exited kept; %s events applied", count(st.Alive), count(st.Exited), count(sum(st.Events)))

	lost, recovered := sum(st.Lost), sum(st.Recovered)
	switch {
	case lost == 0 && !st.RepairPending:
		line("losses", "none: no event lost (%s repairs from %s, %s recovered by backup programs)", count(st.Repairs), "/proc", count(recovered))
	default:
		l := fmt.Sprintf("%s events lost (%s), repaired from /proc %s times", count(lost), perKind(st.Lost), count(st.Repairs))
		if st.RepairPending {
			l += "; a repair is pending"
		}
		line("losses", "%s", l)
	}

	ss, en := st.Sessions, st.Enforcer
	if st.Partial {
		line("sessions", "(root only)")
	} else {
		l := fmt.Sprintf("%d active, %d ended listed; %s killed", ss.Active, ss.Retained, count(en.Killed))
		if en.Survivors+en.Failed > 0 {
			l += fmt.Sprintf(", %s survived, %s kills failed", count(en.Survivors), count(en.Failed))
		}
		if st.PendingEndings > 0 {
			l += fmt.Sprintf("; %s under way", plural(st.PendingEndings, "ending", "endings"))
		}
		if ss.RefusedOverCap > 0 {
			l += fmt.Sprintf("; %s refused over sessions.max-active-per-uid", count(ss.RefusedOverCap))
		}
		line("sessions", "%s", l)
	}

	lk := st.Leaks
	switch {
	case lk.SampledAgoSeconds == 0 && st.Metrics.Address == "" && st.Metrics.ListenError == "":
		line("leaks", "not sampled: metrics are off (metrics.listen-address); mcptrace orphans looks now")
	case st.Partial:
		line("leaks", "(root only)")
	case lk.SampledAgoSeconds == 0:
		line("leaks", "not sampled yet")
	case lk.Orphaned+lk.Unowned+lk.Duplicates == 0:
		line("leaks", "none (sampled %s ago; %d idle servers)", treeview.Duration(secs(lk.SampledAgoSeconds)), lk.Idle)
	default:
		line("leaks", "%s of ended sessions (%s), %s no session owns (%s), %s started again beside the old one, %d idle (sampled %s ago): see mcptrace orphans, mcptrace sessions",
			plural(lk.Orphaned, "orphaned process", "orphaned processes"), humanBytes(lk.OrphanedRSS), plural(lk.Unowned, "leaked server", "leaked servers"), humanBytes(lk.UnownedRSS),
			plural(lk.Duplicates, "server", "servers"), lk.Idle, treeview.Duration(secs(lk.SampledAgoSeconds)))
	}

	c := st.Containers
	switch {
	case c.Attribution == "on":
		l := fmt.Sprintf("attributed through %s", c.Socket)
		if c.Engine != "" {
			l += fmt.Sprintf(" (engine %s)", c.Engine)
		}
		if c.Claimed > 0 {
			l += fmt.Sprintf("; %d claimed, %d not attributed", c.Claimed, c.Unattributed)
		}
		line("containers", "%s", l)
	case c.Reason != "":
		line("containers", "not attributed: %s", c.Reason)
	default:
		line("containers", "not attributed")
	}

	h := st.History
	switch {
	case h.Off != "":
		line("history", "none: %s", h.Off)
	case h.Stats == nil:
		line("history", "%s", h.Store)
	default:
		hs := h.Stats
		l := fmt.Sprintf("%s, %s on disk", h.Store, humanBytes(uint64(max(hs.FileBytes, 0))))
		if !hs.Oldest.IsZero() {
			l += fmt.Sprintf(", back to %s", hs.Oldest.In(now.Location()).Format(timeLayout))
		}
		if hs.Dropped+hs.Failed > 0 {
			l += fmt.Sprintf("; %s records dropped, %s failed", count(hs.Dropped), count(hs.Failed))
		}
		if hs.Corrupt {
			l += "; found damaged: moved aside at the next start"
		}
		line("history", "%s", l)
	}

	switch m := st.Metrics; {
	case m.Address == "" && m.ListenError != "":
		line("metrics", "not served, tried again every 10s (%s failed; enforcement goes on): %s", plural(int(m.ListenFailures), "attempt", "attempts"), m.ListenError)
	case m.Address == "":
		line("metrics", "off (metrics.listen-address is empty)")
	default:
		l := fmt.Sprintf("http://%s/metrics, /healthz, /readyz", m.Address)
		if m.SampleAgeSeconds > 0 {
			l += fmt.Sprintf(" (sampled %s ago in %s)", treeview.Duration(secs(m.SampleAgeSeconds)), treeview.Duration(secs(m.SampleSeconds)))
		}
		line("metrics", "%s", l)
	}

	s := st.State
	l := fmt.Sprintf("%s, %s, checkpoint %s ago", s.Dir, humanBytes(uint64(max(s.Bytes, 0))), treeview.Duration(secs(s.CheckpointAgeSeconds)))
	if s.JournalErrors > 0 {
		l += fmt.Sprintf("; %s journal writes failed", count(s.JournalErrors))
	}
	if st.Start.Restored {
		l += fmt.Sprintf("; restored at start (%s events drained, %s resumed)", count(st.Start.Drained), plural(st.Start.Resumed, "ending", "endings"))
	}
	line("state", "%s", l)
	for _, p := range st.Start.Problems {
		line("", "at start: %s", p)
	}

	switch {
	case st.Partial:
		line("problems", "(root only)")
	case len(st.Problems) == 0:
		line("problems", "none logged")
	default:
		for i, p := range st.Problems {
			what := ""
			if i == 0 {
				what = "problems"
			}
			rep := ""
			if p.Repeats > 0 {
				rep = fmt.Sprintf(" (%d more times)", p.Repeats)
			}
			line(what, "%s %s %s%s", p.At.In(now.Location()).Format(timeLayout), p.Level, p.What, rep)
		}
	}
	return tw.Flush()
}

func sum(m map[string]uint64) uint64 {
	var n uint64
	for _, v := range m {
		n += v
	}
	return n
}

// perKind is "fork 3, exit 1": the kinds with a count, sorted.
func perKind(m map[string]uint64) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if m[k] > 0 {
			parts = append(parts, fmt.Sprintf("%s %s", k, count(m[k])))
		}
	}
	return strings.Join(parts, ", ")
}

func secs(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// count is n with thousands separated: 12,345.
func count[T ~int | ~uint64](n T) string {
	s := fmt.Sprint(n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	if neg {
		return "-" + s
	}
	return s
}
