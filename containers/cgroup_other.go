//go:build !linux

package containers

import (
	"errors"
	"runtime"
)

var errUnsupported = errors.New("containers: cgroups are not supported on " + runtime.GOOS)

// CgroupDir is not supported on this OS.
func CgroupDir(pid int, id string) (string, error) { return "", errUnsupported }

// CgroupKill is not supported on this OS.
func CgroupKill(dir string) (killed int, err error) { return 0, errUnsupported }
