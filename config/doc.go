// Package config holds the agent's configuration and loads it with viper
// from, in increasing precedence: built-in defaults, a YAML file,
// MCPTRACE_* environment variables and command-line flags.
//
// Keys are dotted kebab-case (lineage.retention). The same key names a YAML
// entry (section lineage, entry retention), an environment variable (upper
// case, prefixed, with "." and "-" turned into "_": MCPTRACE_LINEAGE_RETENTION)
// and a flag (--lineage.retention). Every option has a default, so the agent
// runs without any configuration file.
//
// Durations are Go durations with a unit ("90s", "5m", "1h30m"). The socket
// mode is an octal string; in YAML write it quoted ("0660"), since YAML
// reads an unquoted 0660 as the number 432.
//
// A file key the agent does not know is an error naming the key, so typos
// do not silently fall back to defaults.
//
// Every value accepted means what it says: each option's check refuses
// what the agent would not honour as written (a socket mode no one could
// connect through, a grace period past what the sweep waits, a PID the
// kernel never hands out, a duration or cap outside its stated range) with
// an error naming the key, where the value came from and the valid range.
// The package does not check what only the running system knows (whether a
// path exists, is on bpffs or belongs to root): the agent does at start.
//
// Adding an option takes a field in Config (or a new section struct), its
// default in Default and one entry in Config.options, which gives it its
// key, flag, help text and check.
package config
