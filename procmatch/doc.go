// Package procmatch is mcptrace's one rule matcher for processes: a Rule
// names a program by its process name (comm), a glob on the executed file
// and regular expressions on its argv, with Not patterns that veto a match.
//
// Two users read the same Rule type with different semantics, chosen
// explicitly when a rule is compiled:
//
//   - Any (sessions.rules, a host): the rule matches when ANY of its comm,
//     exe or argv patterns matches and NONE of its Not patterns does. A
//     host is recognised by whichever of its forms shows.
//   - All (enforcer.spare, a program never signalled): every field that is
//     set must match (within a field, any of its patterns), and no Not
//     pattern may. An exemption must be as narrow as written.
//
// Windows images (a filename or argv[0] with a drive, UNC or NT path) are
// read both as given and as Windows names them, so rules written with
// Linux names match them: case does not count, .exe, .cmd and .bat do
// not count, argv[0] is its program's name; a Not pattern vetoes in
// either reading (windows.go).
//
// Unknown facts never match: an image without a comm, filename or argv
// matches no pattern on that field (in All mode the rule then fails).
//
// What procmatch does not do: read processes (procfs does, and the
// callers pass what they know), decide what a match means (a session's
// root, a spared member), or evaluate rules in the kernel (the enforcer
// hands the kernel the comm names a rule needs, Matcher.Comms).
package procmatch
