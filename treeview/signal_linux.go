package treeview

import (
	"fmt"
	"syscall"

	"golang.org/x/sys/unix"
)

// sigkill is SIGKILL's number, as lineage.Process.Signal holds it.
const sigkill = int(unix.SIGKILL)

// signalName names a signal number as this machine's kernel numbers them.
func signalName(sig int) string {
	if name := unix.SignalName(syscall.Signal(sig)); name != "" {
		return name
	}
	return fmt.Sprintf("%d", sig)
}
