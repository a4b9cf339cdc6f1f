// Package safefile reads, and replaces, a file a user named, for a
// command that may run as root, so that no other user can turn it into a
// read or a write of something else.
//
// Open walks the path from "/" one component at a time, each through a
// handle on the directory before it (openat with O_NOFOLLOW), and trusts
// only what root or the caller owns: a directory or a symbolic link of
// another user anywhere on the path, or (for a file that will be
// replaced) a file of another user, is refused with a *NotYoursError
// naming it and its owner, which the caller turns into "run it as that
// user". A symbolic link root or the caller owns is followed (its target
// is walked the same way, at most 40 links). The file is then opened,
// read and stat'ed through the handle of its real directory, which File
// keeps: Replace writes the backup and the temporary file and renames
// the new file over the old one through that handle, never by path, so
// swapping a directory on the path for a symbolic link
// (renameat2(RENAME_EXCHANGE)) between the read and the write changes
// nothing that is written. The new file keeps the old one's owner, group
// and mode; Replace refuses when the file at the name is no longer the
// one that was read.
//
// PrivateDir is the check of a directory that holds what only the
// process's own uid may read and write (the agent's state.dir and
// history.dir): not a symbolic link, a directory, owned by the effective
// uid, writable by no group or other user.
//
// What it does not do: lock the file against the host that owns it (a
// host writing its configuration between the read and the rename loses
// that write, as with any editor), or trust a directory by its mode: a
// directory root owns is trusted whatever its mode (a sticky /tmp), one
// of another user never, even when the caller could write it. Only
// Linux walks by handles; elsewhere Open and Replace go by path with
// the same owner rules where the system has them (Windows checks the
// caller's ownership its own way: config.checkTrusted).
package safefile
