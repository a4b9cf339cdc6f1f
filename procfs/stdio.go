package procfs

import (
	"strconv"
	"strings"
)

// StdinKind says what a process's standard input (fd 0) is.
type StdinKind string

const (
	StdinPipe    StdinKind = "pipe"
	StdinSocket  StdinKind = "socket"
	StdinTTY     StdinKind = "tty"
	StdinDevNull StdinKind = "/dev/null"
	StdinFile    StdinKind = "file"
	StdinClosed  StdinKind = "closed"
	StdinOther   StdinKind = "other"
)

// Facts are what leak detection reads of one process beyond its
// snapshot: where its standard input comes from, and its cgroup.
type Facts struct {
	// Stat is the process's stat file, read with them.
	Stat  Stat
	Stdin StdinKind
	// StdinInode is the pipe's or socket's inode when Stdin is one (a
	// Node.js host's stdio is a unix socketpair): the processes of one
	// chain read the same one. StdinCutOff says whether it can still be
	// written.
	StdinInode uint64
	// Stdout and StdoutInode are the same of its standard output (fd 1):
	// a stdio MCP server answers its host there.
	Stdout      StdinKind
	StdoutInode uint64
	// UIDs are its user IDs, read through the same handle: the graph
	// keeps the uid of a process's last exec or fork, not a setuid(2)
	// since.
	UIDs UIDs
	// Exe is the target of its /proc/PID/exe ("" when unreadable).
	Exe string
	// Cgroup is the process's cgroup path: the unified (v2) one, else
	// systemd's name=systemd one; "" when neither is listed.
	Cgroup string
}

// Stdio is what the kernel says of a process's standard input and
// output when they are pipes or sockets (Stdio reads it).
type Stdio struct {
	// InCut: fd 0 is a pipe no writer holds any more, or a socket whose
	// peer will send nothing more. OutCut: fd 1 is a pipe no reader holds
	// any more, or a socket whose peer is gone. Both false for anything
	// else (a file, a tty, /dev/null, closed).
	InCut, OutCut bool
	// InLocal and OutLocal: the fd is a pipe or a unix socket (a host's
	// stdio), not a network socket (an inetd-style service's).
	InLocal, OutLocal bool
	// InPeer and OutPeer are, for a unix socket, the process that made
	// its peer (SO_PEERCRED: for a socketpair, the process that called
	// socketpair(2), which is the host that spawned the chain); 0 for a
	// pipe or when not known.
	InPeer, OutPeer uint32
}

// stdinOf classifies the target of /proc/PID/fd/0 ("" when fd 0 is
// closed) and gives the inode of a pipe or socket.
func stdinOf(target string) (StdinKind, uint64) {
	switch {
	case target == "":
		return StdinClosed, 0
	case strings.HasPrefix(target, "pipe:["):
		ino, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimPrefix(target, "pipe:["), "]"), 10, 64)
		if err != nil {
			return StdinOther, 0
		}
		return StdinPipe, ino
	case strings.HasPrefix(target, "socket:["):
		ino, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimPrefix(target, "socket:["), "]"), 10, 64)
		if err != nil {
			return StdinOther, 0
		}
		return StdinSocket, ino
	case target == "/dev/null":
		return StdinDevNull, 0
	case strings.HasPrefix(target, "/dev/pts/") || strings.HasPrefix(target, "/dev/tty") || target == "/dev/console":
		return StdinTTY, 0
	case strings.HasPrefix(target, "/"):
		return StdinFile, 0
	}
	return StdinOther, 0
}

// cgroupOf picks the cgroup path from /proc/PID/cgroup: the unified
// line ("0::/…"), else systemd's named hierarchy ("N:name=systemd:/…").
func cgroupOf(data string) string {
	var named string
	for line := range strings.Lines(data) {
		line = strings.TrimRight(line, "\n")
		hier, rest, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		ctrl, path, ok := strings.Cut(rest, ":")
		if !ok {
			continue
		}
		if hier == "0" && ctrl == "" {
			return path
		}
		if ctrl == "name=systemd" {
			named = path
		}
	}
	return named
}
