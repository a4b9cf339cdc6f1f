//go:build linux

// Package vm boots a test binary in a QEMU guest (host side) and runs it as
// the guest's PID 1 helper (guest side).
//
// The guest has three serial ports, each a separate channel to the host:
//
//	ttyS0  console: kernel messages and the guest init's own diagnostics
//	ttyS1  test output: the test binary's stdout+stderr, raw (no CR/LF
//	       translation), byte for byte what the test wrote
//	ttyS2  control: "VMEXEC <nonce> <record>" lines from the guest init
//
// So kernel messages can never be mixed into the test output (which
// go test -json parses), and the exit status cannot be spoofed or lost in
// test output. A run succeeds only if the control channel carries an EXIT
// record with the run's nonce.
package vm

import (
	"fmt"
	"strconv"
	"strings"
)

// Guest paths.
const (
	GuestConfigPath = "/vmexec/config.json"
	GuestBinDir     = "/vmexec/bin"
	guestConsole    = "/dev/ttyS0"
	guestOutPort    = "/dev/ttyS1"
	guestCtlPort    = "/dev/ttyS2"
)

// GuestConfig is written into the initramfs for the guest init.
type GuestConfig struct {
	Nonce   string   `json:"nonce"`
	Binary  string   `json:"binary"` // guest path of the program to run
	Args    []string `json:"args"`   // its arguments (without argv[0])
	Env     []string `json:"env"`
	Dir     string   `json:"dir"` // its working directory
	Verbose bool     `json:"verbose"`
	// NoHold leaves the hot tracepoints to the test (holdHotTracepoints).
	NoHold bool `json:"no_hold,omitempty"`
}

// Control records (guest → host), one per line: "VMEXEC <nonce> <kind> <rest>".
const (
	recStart  = "START"  // rest: uname release; the test binary is about to run
	recExit   = "EXIT"   // rest: exit code
	recSignal = "SIGNAL" // rest: signal number and name
	recError  = "ERROR"  // rest: message; the test binary could not be run
)

type record struct {
	Kind string
	Rest string
}

func formatRecord(nonce, kind, rest string) string {
	rest = strings.ReplaceAll(rest, "\n", " ")
	return fmt.Sprintf("\nVMEXEC %s %s %s\n", nonce, kind, rest)
}

func parseRecord(nonce, line string) (record, bool) {
	line = strings.TrimRight(line, "\r\n")
	i := strings.Index(line, "VMEXEC "+nonce+" ")
	if i < 0 {
		return record{}, false
	}
	kind, rest, _ := strings.Cut(line[i+len("VMEXEC "+nonce+" "):], " ")
	return record{kind, rest}, true
}

func (r record) exitCode() (int, bool) {
	if r.Kind != recExit {
		return 0, false
	}
	n, err := strconv.Atoi(strings.TrimSpace(r.Rest))
	return n, err == nil
}
