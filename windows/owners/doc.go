// Package owners gives Windows users the owner numbers that the
// platform-neutral code (sessions, the API, the enforcer's records) keys
// owners by, where Linux has uids.
//
// A Windows owner is a token, not a number: what a process may end is
// what its token may open for termination. Two things decide it, and both
// are in a Token: the user SID, and whether the token is elevated (an
// administrator's token at high or system integrity with the
// Administrators group enabled, or the SYSTEM account's). An elevated
// token may open any process but protected ones, as root may signal any,
// so it is owner 0: root. Every other user SID gets a number of its own,
// from FirstUID up, the same for every token of that user (a medium
// integrity token cannot end an elevated process of the same user, and an
// elevated one is 0, so the rule "a session ends only its owner's
// members" holds for both).
//
// A Table keeps the numbers in a file so that a restart gives every user
// the number it had: sessions and records saved with the state name their
// owners by number. The file is written whole, atomically, when a new SID
// is seen. It is bounded (MaxOwners); a SID beyond the bound, or one that
// cannot be saved, has no number (Unknown), which matches no owner but
// root, so nothing is ever attributed to a wrong user.
//
// What it does not do: read tokens (package winproc does), decide what may
// be ended (package enforcer does, with the numbers and, on Windows, the
// SID of each member's token), or know domain accounts beyond their SIDs.
// It is pure Go and runs, and is tested, on every system.
package owners
