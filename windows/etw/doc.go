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
// The Translator also seeds from a process snapshot (winproc.Snapshot),
// so that what starts later finds its creator among what ran before.
//
// It does not yet consume a real-time ETW session (StartTrace,
// EnableTraceEx2, ProcessTrace) or read the command lines of processes
// it sees start (winproc reads them; the consumer that would call it is
// to come). It ends nothing: package enforcer does. It never guesses a
// creator: a parent that started after its child, or that it has never
// seen, is an unknown creator, as a lost fork is on Linux.
package etw
