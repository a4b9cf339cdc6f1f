package state

// DefaultDir is under ProgramData, which only administrators may write.
// It outlives a reboot, so a checkpoint carries the boot it was written
// in (procfs.BootID) and one of another boot is set aside, as on Linux.
const DefaultDir = `C:\ProgramData\mcptrace\state`
