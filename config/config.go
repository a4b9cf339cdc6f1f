package config

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"
)

// DefaultFile is read when Load is given no file, if it exists.
const DefaultFile = "/etc/mcptrace/config.yaml"

// EnvPrefix starts the name of every environment variable Load reads.
const EnvPrefix = "MCPTRACE"

// Config is the agent's configuration.
type Config struct {
	API     API
	BPF     BPF
	Lineage Lineage
	Log     Log
}

// API configures the local API socket.
type API struct {
	// Socket is the path of the unix socket (api.socket).
	Socket string
	// SocketMode is the permission of the socket file (api.socket-mode). It
	// can be open to every user: each request is authorized by the caller's
	// credentials (SO_PEERCRED).
	SocketMode os.FileMode
}

// BPF configures the eBPF sensor.
type BPF struct {
	// RingBufferSize is the size in bytes of the ring buffer events come
	// through (bpf.ring-buffer-size): a power of two multiple of the page
	// size.
	RingBufferSize int
	// BPFFS is where the BPF file system is mounted (bpf.bpffs).
	BPFFS string
	// TraceFS is where tracefs is mounted (bpf.tracefs).
	TraceFS string
}

// Lineage configures the process graph.
type Lineage struct {
	// Retention is how long exited processes stay in the graph
	// (lineage.retention).
	Retention time.Duration
	// ProcRoot is the proc file system the graph is seeded and repaired
	// from (lineage.proc-root).
	ProcRoot string
	// RepairInterval is how often lost-event counters are checked, and the
	// graph repaired from ProcRoot after a loss (lineage.repair-interval).
	RepairInterval time.Duration
}

// Log configures the agent's own logging.
type Log struct {
	// Level is debug, info, warn or error (log.level).
	Level string
	// Format is text or json (log.format).
	Format string
}

// Default returns the configuration used for every option not set
// elsewhere.
func Default() Config {
	return Config{
		API: API{
			Socket:     "/run/mcptrace/mcptrace.sock",
			SocketMode: 0o666,
		},
		BPF: BPF{
			RingBufferSize: 8 << 20,
			BPFFS:          "/sys/fs/bpf",
			TraceFS:        "/sys/kernel/tracing",
		},
		Lineage: Lineage{
			Retention:      5 * time.Minute,
			ProcRoot:       "/proc",
			RepairInterval: time.Second,
		},
		Log: Log{
			Level:  "info",
			Format: "text",
		},
	}
}

// option ties a key to a field of a Config.
type option struct {
	key   string
	usage string
	value any          // *string, *int, *time.Duration or *os.FileMode
	check func() error // says what is wrong with the value, if anything
}

// options lists every option of c, pointing into c.
func (c *Config) options() []option {
	return []option{
		{"api.socket", "path of the API unix socket", &c.API.Socket,
			func() error { return socketPath(c.API.Socket) }},
		{"api.socket-mode", "permissions of the API socket, octal (callers are authorized per request)", &c.API.SocketMode,
			func() error { return fileMode(c.API.SocketMode) }},
		{"bpf.ring-buffer-size", "size in bytes of the BPF ring buffer, a power of two multiple of the page size", &c.BPF.RingBufferSize,
			func() error { return ringBufferSize(c.BPF.RingBufferSize) }},
		{"bpf.bpffs", "mount point of the BPF file system", &c.BPF.BPFFS,
			func() error { return absPath(c.BPF.BPFFS) }},
		{"bpf.tracefs", "mount point of tracefs", &c.BPF.TraceFS,
			func() error { return absPath(c.BPF.TraceFS) }},
		{"lineage.retention", "how long exited processes stay in the lineage graph", &c.Lineage.Retention,
			func() error { return atLeast(c.Lineage.Retention, time.Nanosecond) }},
		{"lineage.proc-root", "proc file system to seed and repair the lineage graph from", &c.Lineage.ProcRoot,
			func() error { return absPath(c.Lineage.ProcRoot) }},
		{"lineage.repair-interval", "how often lost events are checked for and the graph repaired", &c.Lineage.RepairInterval,
			func() error { return atLeast(c.Lineage.RepairInterval, 10*time.Millisecond) }},
		{"log.level", "log level: debug, info, warn or error", &c.Log.Level,
			func() error { return logLevel(c.Log.Level) }},
		{"log.format", "log format: text or json", &c.Log.Format,
			func() error { return oneOf(c.Log.Format, "text", "json") }},
	}
}

// Validate checks every option and reports every problem, each naming its
// key and what is allowed.
func (c Config) Validate() error {
	return c.validate(func(string) string { return "" })
}

// validate is Validate with source(key) saying where a value came from.
func (c *Config) validate(source func(key string) string) error {
	var errs []error
	for _, o := range c.options() {
		if err := o.check(); err != nil {
			errs = append(errs, fmt.Errorf("%s%s: %w", o.key, source(o.key), err))
		}
	}
	return errors.Join(errs...)
}

// LogLevel returns Log.Level as a slog level; Info if it is not valid.
func (c Config) LogLevel() slog.Level {
	var l slog.Level
	if err := l.UnmarshalText([]byte(c.Log.Level)); err != nil {
		return slog.LevelInfo
	}
	return l
}

// NewLogger returns a logger writing to w in Log.Format at Log.Level.
func (c Config) NewLogger(w io.Writer) *slog.Logger {
	opts := &slog.HandlerOptions{Level: c.LogLevel()}
	if c.Log.Format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}
