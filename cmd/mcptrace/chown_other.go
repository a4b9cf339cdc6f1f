//go:build !windows

package main

import (
	"os"
	"syscall"
)

// chownLike gives name st's owner when root writes it (a user's
// configuration rewritten by root stays the user's).
func chownLike(name string, st os.FileInfo) error {
	if sys, ok := st.Sys().(*syscall.Stat_t); ok && os.Geteuid() == 0 {
		return os.Chown(name, int(sys.Uid), int(sys.Gid))
	}
	return nil
}
