package sensor

import (
	"fmt"
	"os"
)

// Defaults of Options, and the bounds of the ring buffer size. Package
// config exposes them (bpf.*); Open applies the defaults to zero values.
const (
	// DefaultRingBufferSize is the kernel-to-agent ring buffer: about
	// 40,000 fork and exit records (104 bytes each with the ring's
	// header) or 8,700 exec records of a 100-byte argv (an exec record
	// holds the argv it read, up to 4.4 KB) between two reads, which
	// is what queues while the agent restarts. It is kernel memory, and
	// the reader's mapping of it is resident in the agent's RSS from the
	// start (once: the ring maps the data once, see newRing).
	DefaultRingBufferSize = 4 << 20
	// MaxRingBufferSize bounds the ring buffer, which is locked kernel
	// memory.
	MaxRingBufferSize = 1 << 30
	// DefaultTraceFS and DefaultBPFFS are mounted when missing.
	DefaultTraceFS = "/sys/kernel/tracing"
	DefaultBPFFS   = "/sys/fs/bpf"
	// DefaultPinDir is where the kernel side is pinned so that it keeps
	// running across agent restarts (bpf.pin-dir).
	DefaultPinDir = DefaultBPFFS + "/mcptrace"
	// DefaultSessionName is the ETW session of the Windows sensor
	// (Options.SessionName).
	DefaultSessionName = "mcptrace"
)

// MinRingBufferSize is the smallest buffer that holds two exec records,
// rounded up to a power of two multiple of the page size.
var MinRingBufferSize = func() int {
	n := os.Getpagesize()
	for n < 2*execSize {
		n *= 2
	}
	return n
}()

// CheckRingBufferSize says what is wrong with a ring buffer size, if
// anything: the kernel takes a power of two multiple of the page size,
// and the agent needs room for two exec records.
func CheckRingBufferSize(n int) error {
	if n < MinRingBufferSize || n > MaxRingBufferSize || n&(n-1) != 0 || n%os.Getpagesize() != 0 {
		return fmt.Errorf("must be a power of two multiple of the page size (%d) from %d up to %d, such as %d (4 MiB), got %d",
			os.Getpagesize(), MinRingBufferSize, MaxRingBufferSize, DefaultRingBufferSize, n)
	}
	return nil
}
