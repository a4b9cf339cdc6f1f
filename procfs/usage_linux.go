package procfs

import (
	"bytes"
	"errors"
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/mcptrace/mcptrace/lineage"
)

// Usage is what a process has used so far: memory, CPU and I/O, as
// /proc/PID/stat and /proc/PID/io report them.
type Usage struct {
	// RSSBytes is the resident set size.
	RSSBytes uint64
	// CPUTicks is user plus system time in clock ticks (lineage.TickNS
	// each).
	CPUTicks uint64
	// IOBytes is the bytes the process passed to read(2) and write(2)
	// and their kin (rchar + wchar): pipes, sockets and files alike, so
	// any stdio traffic of an MCP server moves it.
	IOBytes uint64
}

// CPUSeconds is CPUTicks in seconds.
func (u Usage) CPUSeconds() float64 { return float64(u.CPUTicks*lineage.TickNS) / 1e9 }

// UsageReader reads the usage of many processes with one reused buffer.
// It is not safe for concurrent use.
type UsageReader struct {
	Root string // DefaultRoot when ""
	rd   Reader
}

// Read returns the usage of process id. The files are read through one
// handle on /proc/PID and the start time is checked against id, so a
// recycled PID reads as gone (an error wrapping fs.ErrNotExist), never as
// another process's usage.
func (u *UsageReader) Read(id lineage.ID) (Usage, error) {
	var us Usage
	dfd, err := u.rd.openIdentified(u.Root, id, func(b []byte) (uint64, error) {
		var start uint64
		var err error
		us, start, err = parseStatUsage(b)
		return start, err
	})
	if err != nil {
		return Usage{}, err
	}
	defer unix.Close(dfd)
	b, err := u.rd.file(dfd, "io")
	if err != nil {
		return Usage{}, readErr(id.PID, err)
	}
	if us.IOBytes, err = parseIO(b); err != nil {
		return Usage{}, fmt.Errorf("procfs: process %d: io: %w", id.PID, err)
	}
	return us, nil
}

// errGone says the PID now names another process.
var errGone = errors.New("the pid names another process now")

// Fields of /proc/PID/stat after comm, numbered as in proc(5).
const (
	fUTime      = 14
	fSTime      = 15
	fStartTicks = 22
	fRSS        = 24
)

// parseStatUsage takes utime, stime and rss (in pages) from a stat file,
// and the start time in clock ticks that says whose they are.
func parseStatUsage(b []byte) (u Usage, startTicks uint64, err error) {
	end := bytes.LastIndexByte(b, ')')
	if end < 0 {
		return Usage{}, 0, errors.New("malformed: no (comm)")
	}
	var f [fRSS + 1][]byte
	if err := statFields(b[end+1:], f[:]); err != nil {
		return Usage{}, 0, err
	}
	ut, err := parseUint(f[fUTime], 64)
	if err != nil {
		return Usage{}, 0, fmt.Errorf("malformed utime: %w", err)
	}
	stime, err := parseUint(f[fSTime], 64)
	if err != nil {
		return Usage{}, 0, fmt.Errorf("malformed stime: %w", err)
	}
	if startTicks, err = parseUint(f[fStartTicks], 64); err != nil {
		return Usage{}, 0, fmt.Errorf("malformed starttime: %w", err)
	}
	u.CPUTicks = ut + stime
	// rss is signed in the kernel's format; a negative one (never seen)
	// reads as malformed.
	rss, err := parseUint(f[fRSS], 63)
	if err != nil {
		return Usage{}, 0, fmt.Errorf("malformed rss: %w", err)
	}
	u.RSSBytes = rss * uint64(unix.Getpagesize())
	return u, startTicks, nil
}

// parseIO sums rchar and wchar of /proc/PID/io.
func parseIO(b []byte) (uint64, error) {
	var sum uint64
	found := 0
	for line := range bytes.Lines(b) {
		k, v, ok := bytes.Cut(bytes.TrimSpace(line), []byte(": "))
		if !ok || (string(k) != "rchar" && string(k) != "wchar") {
			continue
		}
		n, err := parseUint(v, 64)
		if err != nil {
			return 0, fmt.Errorf("malformed %s: %w", k, err)
		}
		sum += n
		found++
	}
	if found != 2 {
		return 0, errors.New("malformed: no rchar and wchar")
	}
	return sum, nil
}
