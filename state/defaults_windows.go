package state

// DefaultDir is under ProgramData: the agent makes it for SYSTEM and
// Administrators alone, and refuses it when anyone else could change it
// or a directory above it (agent/securedir_windows.go).
// It outlives a reboot, so a checkpoint carries the boot it was written
// in (procfs.BootID) and one of another boot is set aside, as on Linux.
const DefaultDir = `C:\ProgramData\mcptrace\state`
