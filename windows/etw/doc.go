// Package etw turns the Windows kernel's process events, as ETW delivers
// them from the Microsoft-Windows-Kernel-Process provider, into the
// platform-neutral events the lineage graph applies (lineage.Event), the
// same graph the Linux sensor feeds.
//
// What is here runs on any system, so that it is tested everywhere from
// byte-exact payloads: the decoding of ProcessStart (event 1, versions 0
// to 3) and ProcessStop (event 2, versions 0 to 2) from their manifest
// layouts (kernelprocess.go), and the translation of a stream of them into
// lineage events with identities that survive PID reuse (translate.go).
//
// It does not yet consume a real-time ETW session (StartTrace,
// EnableTraceEx2, ProcessTrace), read command lines from new processes,
// seed from a process snapshot, or end anything: those are Windows-only
// and to come. It never guesses a creator: a parent that started after
// its child, or that it has never seen, is an unknown creator, as a lost
// fork is on Linux.
package etw
