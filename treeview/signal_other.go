//go:build !linux

package treeview

import "strconv"

// sigkill is SIGKILL's number on Linux, the only system whose events set
// lineage.Process.Signal (a Windows process ends with an exit code).
const sigkill = 9

// signalName names a signal number: Linux's numbers, which this system
// cannot name.
func signalName(sig int) string { return strconv.Itoa(sig) }
