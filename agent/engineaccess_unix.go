//go:build !windows

package agent

import (
	"fmt"
	"os"
	"os/user"
	"slices"
	"strconv"
	"syscall"
)

// mayUseEngine reports whether uid could reach the engine at socket
// itself: root, the socket's owner (a rootless engine), or a member of
// the socket's group when the group may write to it. Membership is what
// the kernel gave a process of uid (kernel: its effective and
// supplementary groups, /proc/PID/status, as LDAP, SSSD, newgrp or a
// setgroups before an exec make them), or what the user and group
// databases say (groupsOf: /etc/group, read by Go's os/user, which does
// not ask NSS).
func mayUseEngine(socket string, uid uint32, kernel []uint32, groupsOf func(uid uint32) []string) (bool, string) {
	if uid == 0 {
		return true, ""
	}
	fi, err := os.Stat(socket)
	if err != nil {
		return false, fmt.Sprintf("engine socket %s: %v", socket, err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return false, "engine socket " + socket + ": no owner"
	}
	if st.Uid == uid && fi.Mode().Perm()&0o200 != 0 {
		return true, ""
	}
	if fi.Mode().Perm()&0o020 == 0 {
		return false, fmt.Sprintf("uid %d may not use the container engine (%s is not writable by its group)", uid, socket)
	}
	gid := strconv.FormatUint(uint64(st.Gid), 10)
	if slices.Contains(kernel, st.Gid) || slices.Contains(groupsOf(uid), gid) {
		return true, ""
	}
	return false, fmt.Sprintf("uid %d may not use the container engine (not in group %s of %s)", uid, gid, socket)
}

// userGroups are the group IDs uid is a member of, from the user and
// group databases (none when uid is unknown there).
func userGroups(uid uint32) []string {
	u, err := user.LookupId(strconv.FormatUint(uint64(uid), 10))
	if err != nil {
		return nil
	}
	gids, _ := u.GroupIds()
	return gids
}
