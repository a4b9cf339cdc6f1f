// Package winsec tells whether a file or directory on Windows can be
// changed by anyone but the machine's administrators: what the agent,
// running as SYSTEM, reads its configuration and state from, and what the
// service runs, must not be.
//
// A path is trusted when no component, from the volume root down, is a
// reparse point (a junction or link that leads elsewhere), each is owned
// by SYSTEM, Administrators, TrustedInstaller or the calling process's
// own user, and no access-allowed ACE that applies to it grants anyone
// else what would let them change it: for a directory above the target,
// deleting or renaming what is in it, or changing its own security or
// owner; for the target, also writing or adding to it. Creating new,
// unrelated entries in a directory above (as every user may in C:\ and
// ProgramData) changes nothing the agent uses, and CREATOR OWNER's
// inherit-only ACEs apply only to what their holder creates, whose owner
// is checked in turn.
//
// What it does not do: pin what it checked (the caller holds the handles
// that keep a checked directory from being renamed), or judge a share or
// another volume's mount point (a reparse point is refused). It runs on
// Windows only; under wine, which keeps no security descriptors on files
// here, every component reads as owned by the caller's user.
package winsec
