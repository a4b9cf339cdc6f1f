//go:build !linux && !windows

package procfs

// BootID is not supported on this OS.
func BootID(root string) (string, error) { return "", errUnsupported }

// BootTimeNow returns 0: there is no CLOCK_BOOTTIME on this OS.
func BootTimeNow() uint64 { return 0 }
