// Package winproc reads and ends Windows processes: the one place the
// Windows side of mcptrace touches a process, as package procfs is on
// Linux.
//
// It takes a process snapshot (CreateToolhelp32Snapshot, with every
// process's create time from GetProcessTimes), reads a process's command
// line from its PEB (NtQueryInformationProcess, then ReadProcessMemory of
// the PEB, its RTL_USER_PROCESS_PARAMETERS and the command line buffer),
// opens a process as a Handle whose create time is checked against the
// identity it is opened for, terminates through that handle, and runs a
// program in a Job Object created suspended, so that nothing it starts can
// run outside the job.
//
// A process is named by its PID and its create time (a FILETIME). A held
// handle keeps its PID from being reused, so an identity checked once on
// an open handle stays true for as long as the handle is open: every
// termination goes through such a handle, never through a PID.
//
// What is here runs on any system: Clock, which places Windows times on
// the lineage's clock, and Snapshots, which turns snapshot entries into
// lineage snapshots with creator edges checked against create times (a
// parent PID whose process was created after the child is a reused PID,
// not the parent). The rest is Windows-only (the _windows.go files) and is
// tested under wine (scripts/wine-test.sh).
//
// It does not decide what to end: package enforcer does. It does not
// consume ETW: package etw does. It reads no environment block, only the
// command line.
package winproc
