package agent

import (
	"fmt"

	"golang.org/x/sys/windows"
)

// kernelRelease is Windows' version (major.minor.build).
func kernelRelease() string {
	v := windows.RtlGetVersion()
	return fmt.Sprintf("Windows %d.%d.%d", v.MajorVersion, v.MinorVersion, v.BuildNumber)
}

// pinDirShown is "": ETW pins nothing.
func pinDirShown(string) string { return "" }
