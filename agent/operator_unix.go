//go:build !windows

package agent

import "golang.org/x/sys/unix"

// kernelRelease is uname -r.
func kernelRelease() string {
	var u unix.Utsname
	if unix.Uname(&u) != nil {
		return ""
	}
	return unix.ByteSliceToString(u.Release[:])
}

// pinDirShown is the pin directory as status shows it.
func pinDirShown(dir string) string { return dir }
