package agent

import "golang.org/x/sys/windows"

// setPriority puts the agent's process in the above-normal priority
// class when nice is below 0, the normal class otherwise; Windows has no
// finer scale a nice value maps to.
func (a *Agent) setPriority(nice int) {
	class, name := uint32(windows.NORMAL_PRIORITY_CLASS), "normal"
	if nice < 0 {
		class, name = windows.ABOVE_NORMAL_PRIORITY_CLASS, "above normal"
	}
	if err := windows.SetPriorityClass(windows.CurrentProcess(), class); err != nil {
		a.log.Warn("the agent's priority class could not be set: it runs at the one it was started with", "class", name, "err", err)
		return
	}
	a.log.Info("priority class set", "class", name, "nice", nice)
}
