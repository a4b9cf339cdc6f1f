// Package state keeps the agent's memory across restarts and crashes: a
// checkpoint of its whole state plus a write-ahead log (WAL) of every input
// applied since that checkpoint. After a restart the agent loads the
// checkpoint, replays the WAL records in order, and carries on.
//
// This package is the storage layer only: files, framing, checksums,
// rotation, crash safety and corruption handling, plus a compact binary
// codec for lineage.Event (AppendEvent, DecodeEvent). What a checkpoint
// payload holds and what a record Kind means is the caller's business.
//
// # Use
//
//	st, ld, err := state.Open(state.Options{Dir: "/run/mcptrace/state", Logger: log})
//	// restore from ld.Checkpoint, apply ld.Records in order;
//	// on a first start (ld.Checkpoint == nil) write a checkpoint at once.
//	st.Append(rec...)              // with each input, under the agent's lock
//	c := st.Cut()                  // under the same lock, when capturing the state
//	st.WriteCheckpoint(c, payload) // later, outside the lock
//
// Records appended before a Cut belong to the checkpoint written with it;
// records appended after it are replayed on top of it. WAL segments that
// have no checkpoint are not replayed (there is no state to apply them to),
// so the caller writes a checkpoint right after a first start and after
// Discard. All methods of Store are safe for concurrent use; Open takes an
// exclusive lock on the directory (flock), released by Close or by the
// process's death.
//
// # Files
//
// Dir (0700, owned by the agent's uid) holds, all files 0600, all integers
// little-endian, every checksum CRC32C (Castagnoli):
//
//	checkpoint
//	    header: magic "MCPTRACE-STATE", u16 format version (1),
//	    u64 first WAL segment not covered, u64 payload length,
//	    u32 CRC32C of the payload, u8 boot id length n, n bytes boot id,
//	    u32 CRC32C of all header bytes before it; then the payload.
//	wal-<16-digit sequence>
//	    header: magic "MCPTRACE-WAL", u16 format version (1),
//	    u64 sequence (as in the name), u8 boot id length n, n bytes boot id,
//	    u32 CRC32C of all header bytes before it; then records:
//	    u32 data length (at most MaxRecord), u32 CRC32C of kind and data,
//	    u8 kind (not 0), data.
//	checkpoint.tmp, wal-<seq>.tmp
//	    a checkpoint or segment being written; renamed into place when
//	    complete; a leftover is an interrupted write and Open removes it.
//	<name>.<reason>-<UTC time, 20060102T150405.000000000Z>[-N]
//	    a file (or the bad tail of a segment) moved aside as evidence.
//	    reason: corrupt, other-boot, newer-format, no-checkpoint,
//	    unreplayed (an intact segment after a gap or corruption), discarded.
//	    Files moved together share the time; Open and Discard keep the
//	    newest 4 such generations and delete older ones.
//
// Segments are numbered without gaps. A segment file is created by the
// first Append after a Cut (so a Cut with nothing appended since the last
// one changes nothing). After Open the store appends to a new segment
// numbered after the last one it kept, never into one it read.
//
// # Crash safety
//
// The promise is: whatever instant the agent is killed (SIGKILL, a panic,
// the OOM killer), the next Open returns a checkpoint and records that are
// exactly a prefix of what was appended, the only loss being a tail of the
// Append in flight, and it reports no Problem.
//
//   - Append frames all its records into one buffer and writes it with one
//     pwrite(2) at the end of the segment. A kill can only shorten that
//     write, leaving an incomplete record at the very end of the last
//     segment: Open cuts it (Loaded.Torn) and keeps the whole records
//     before it.
//   - A checkpoint or segment header is written to a .tmp file and renamed
//     into place, so neither is ever seen half-written. The checkpoint is
//     fsynced before the rename and the directory after it, so a directory
//     on a persistent file system also survives power loss with a valid
//     checkpoint.
//   - The segments a checkpoint covers are deleted only after its rename;
//     Open silently deletes any a crash left.
//   - Open's own repairs are ordered so a crash halfway through leaves a
//     directory the next Open repairs the same way.
//
// It deliberately does not fsync WAL appends: the promise covers agent
// crashes, not power loss or a kernel crash. The default directory is on
// /run, a tmpfs that does not survive a reboot anyway; and a checkpoint
// from before a reboot would be moved aside, since processes do not
// survive a reboot either (the boot id in every header says which boot
// wrote it).
//
// # Corruption
//
// Anything else that is wrong is corruption, which no crash of this code
// produces: a checksum or length that does not match, a bad record followed
// by more bytes (or anywhere but in the last segment), a missing segment in
// the numbering, a file from another boot, a newer format version. Open
// never panics on any content and reads nothing beyond the files' sizes
// (a length field is checked against the bytes that remain and MaxRecord).
// It stops replay at the last good record, keeps the good prefix where it
// is, moves everything after it aside (splitting a segment when needed),
// and reports each file in Loaded.Problems. A bad checkpoint moves the
// checkpoint and every segment aside: Open then returns an empty Loaded and
// the agent starts from /proc as on a first start. Evidence is never
// deleted, except the oldest generations beyond the newest 4.
//
// # Security
//
// The state holds process command lines. Open refuses (ErrUnsafeDir) a
// directory that is a symlink, not owned by the effective uid or writable
// by group or others, and says what to do. Every file is opened relative
// to the directory's descriptor with O_NOFOLLOW and created 0600.
//
// # Not done here
//
// The package does not fsync appends (above), does not compress, does not
// encrypt, does not decide when to checkpoint (Size helps the caller
// decide), and does not interpret payloads or record kinds. It does not
// repair: what it cannot read is moved aside, never patched.
package state
