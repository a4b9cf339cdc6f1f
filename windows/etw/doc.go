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
// Feed (feed.go) applies a stream to a lineage graph: it seeds, fills
// each start with the command line read from the new process, and
// repairs the graph from a new snapshot whenever the session reports a
// loss or a payload does not decode, as the Linux sensor repairs from
// /proc.
//
// On Windows, session_windows.go runs the real-time session: StartTrace,
// EnableTraceEx2 (keyword KeywordProcess), OpenTrace and ProcessTrace,
// with the loss counters ControlTrace reports polled every LossPoll. They
// are lazy advapi32 calls of this package's own: x/sys/windows lacks
// them and no maintained pure-Go consumer is served by the module
// proxy here. That code is built and its structures are checked against
// the SDK's sizes, but it has not consumed a real session: wine's ETW
// is a stub (it accepts every call, its OpenTrace denies access, and its
// kernel logs no process events).
//
// It ends nothing: package enforcer does. It never guesses a creator: a
// parent that started after its child, or that it has never seen, is an
// unknown creator, as a lost fork is on Linux.
package etw
