package config

import (
	"errors"
	"fmt"
	"github.com/mcptrace/mcptrace/containers"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/mcptrace/mcptrace/api"
	"github.com/mcptrace/mcptrace/enforcer"
	"github.com/mcptrace/mcptrace/events"
	"github.com/mcptrace/mcptrace/exporter"
	"github.com/mcptrace/mcptrace/history"
	"github.com/mcptrace/mcptrace/lineage"
	"github.com/mcptrace/mcptrace/procfs"
	"github.com/mcptrace/mcptrace/procmatch"
	"github.com/mcptrace/mcptrace/sensor"
	"github.com/mcptrace/mcptrace/sessions"
	"github.com/mcptrace/mcptrace/state"
)

// EnvPrefix starts the name of every environment variable Load reads.
const EnvPrefix = "MCPTRACE"

// Config is the agent's configuration.
type Config struct {
	API        API
	BPF        BPF
	Lineage    Lineage
	Sessions   Sessions
	Enforcer   Enforcer
	State      State
	Metrics    Metrics
	Containers Containers
	History    History
	Export     Export
	Log        Log
	// Overridden lists the options the configuration file sets that a
	// flag or the environment overrides, each as "key (by)", for the
	// agent to say at start: an edit of the file that changes nothing
	// is not silent. Not an option.
	Overridden []string
}

// History configures the journal of what happened on the node, kept on
// disk for forensics (mcptrace history, tree --session of past sessions).
type History struct {
	// Dir holds the store (history.dir); "" keeps no history.
	Dir string
	// MaxAge is how long records are kept (history.max-age).
	MaxAge time.Duration
	// MaxBytes bounds the store's file (history.max-bytes).
	MaxBytes int
}

// Export configures the export file of the agent's event stream, for log
// pipelines: one JSON object a line, rotated at a size bound.
type Export struct {
	// File is where events are written (export.file); "" writes none.
	File string
	// MaxBytes is the size at which the file is rotated
	// (export.max-bytes); MaxFiles how many rotated files are kept
	// (export.max-files).
	MaxBytes int
	MaxFiles int
}

// Containers configures the attribution of containers that session
// members start, and their end with the session.
type Containers struct {
	// EngineSocket is the container engine's API socket
	// (containers.engine-socket); "" turns attribution off.
	EngineSocket string
}

// Metrics configures the Prometheus metrics the agent serves.
type Metrics struct {
	// ListenAddress is where /metrics is served (metrics.listen-address),
	// loopback by default; "" serves no metrics.
	ListenAddress string
	// SampleInterval is how often sessions, roles and the usage of their
	// members are sampled for the metrics (metrics.sample-interval).
	SampleInterval time.Duration
	// IdleAfter is how long a server must do no read or write to count as
	// idle (metrics.idle-after).
	IdleAfter time.Duration
	// OrphansEvery is how often the metrics look for leaked servers no
	// session owns (metrics.orphans-every).
	OrphansEvery time.Duration
	// ServerNames puts MCP server names on /metrics (metrics.server-names,
	// on by default); off, every name is "hidden" and the counts stay:
	// anyone who reaches the endpoint reads them (docs/SECURITY.md).
	ServerNames bool
}

// State configures the agent's memory across restarts.
type State struct {
	// Dir holds the saved state (state.dir): a checkpoint and a journal.
	// It lives on tmpfs by default: processes do not outlive a reboot,
	// neither does what the agent knew about them.
	Dir string
	// CheckpointInterval is how often the whole state is written and the
	// journal started anew (state.checkpoint-interval).
	CheckpointInterval time.Duration
}

// Sessions configures how session roots are recognised.
type Sessions struct {
	// DefaultRules turns on the built-in rules for the real agent hosts
	// (sessions.default-rules). Tests and CI switch it off so an agent
	// never matches anything on the machine but their own processes.
	DefaultRules bool
	// Rules are extra host rules, matched after the default ones
	// (sessions.rules; configuration file only).
	Rules []sessions.Rule
	// Retention is how long ended sessions stay listed (sessions.retention);
	// one a member of which still lives stays until it ends.
	Retention time.Duration
	// WithinPID narrows the agent to the processes this PID created, at any
	// depth, and itself (sessions.within-pid); 0, the default, is the whole
	// node. Test agents narrow themselves to their test binary with it.
	WithinPID int
	// MaxActivePerUID bounds the active sessions of one owner
	// (sessions.max-active-per-uid); a further declaration is refused.
	MaxActivePerUID int
	// MaxEndedPerUID bounds the ended sessions of one owner kept listed
	// (sessions.max-ended-per-uid); its oldest go first.
	MaxEndedPerUID int
}

// Enforcer configures what happens to the members of an ended session.
type Enforcer struct {
	// Mode is enforce (signal) or audit (record what would be killed)
	// (enforcer.mode).
	Mode string
	// Policy is graceful (SIGTERM, the grace period, then SIGKILL) or
	// immediate (SIGKILL) (enforcer.policy).
	Policy string
	// GracePeriod is the wait between SIGTERM and SIGKILL
	// (enforcer.grace-period).
	GracePeriod time.Duration
	// Spare exempts programs from ever being signalled (enforcer.spare;
	// configuration file only). The rules are procmatch rules read with
	// procmatch.All: every field a rule sets must match.
	Spare []procmatch.Rule
	// CrossUID lets a session owned by a non-root uid end members its
	// owner could not signal itself (enforcer.cross-uid); off, they are
	// spared across the privilege boundary.
	CrossUID bool
	// ReapSupersededAfter, when not 0, ends an MCP server whose host
	// started a newer instance of it once the older one did no I/O for
	// this long (enforcer.reap-superseded-after); 0 never does.
	ReapSupersededAfter time.Duration
	// Nice is the agent's scheduling priority (enforcer.nice): other
	// users' CPU floods must not starve the agent that ends their leaks.
	Nice int
}

// API configures the local API socket.
type API struct {
	// Socket is the path of the unix socket (api.socket); on Windows, of
	// the named pipe (\\.\pipe\NAME).
	Socket string
	// SocketMode is the permission of the socket file (api.socket-mode). It
	// can be open to every user: each request is authorized by the caller's
	// credentials (SO_PEERCRED).
	SocketMode os.FileMode
	// MaxConnections caps the open connections of all non-root users
	// together (api.max-connections); MaxConnectionsPerUID those of one
	// uid (api.max-connections-per-uid). Root's are not capped.
	MaxConnections       int
	MaxConnectionsPerUID int
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
	// PinDir is where the kernel side is pinned so that it keeps running
	// between agents (bpf.pin-dir): on bpffs.
	PinDir string
}

// Lineage configures the process graph.
type Lineage struct {
	// Retention is how long exited processes of a session stay in the
	// graph, and exited processes whose lineage the graph could not
	// prove (lineage.retention); other exited processes go once
	// lineage.DefaultRecentExits newer ones followed.
	Retention time.Duration
	// ProcRoot is the proc file system the graph is seeded and repaired
	// from (lineage.proc-root).
	ProcRoot string
	// RepairInterval is how often lost-event counters are checked, and the
	// graph repaired from ProcRoot after a loss (lineage.repair-interval).
	RepairInterval time.Duration
	// MaxNodes caps the processes the graph keeps (lineage.max-nodes):
	// past it the oldest entirely dead branches are evicted. Live
	// processes are never evicted (see lineage.Config.MaxNodes).
	MaxNodes int
	// MaxImages caps the exec images kept per process
	// (lineage.max-images): the first and the latest MaxImages-1.
	MaxImages int
	// MaxImageBytes caps the memory all kept images hold, by the graph's
	// own accounting (lineage.max-image-bytes); reaching it evicts like
	// MaxNodes.
	MaxImageBytes int
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
			Socket:               api.DefaultSocket,
			SocketMode:           api.DefaultSocketMode,
			MaxConnections:       api.DefaultMaxConnections,
			MaxConnectionsPerUID: api.DefaultMaxConnectionsPerUID,
		},
		BPF: BPF{
			RingBufferSize: sensor.DefaultRingBufferSize,
			BPFFS:          sensor.DefaultBPFFS,
			TraceFS:        sensor.DefaultTraceFS,
			PinDir:         sensor.DefaultPinDir,
		},
		Lineage: Lineage{
			Retention:      lineage.DefaultRetention,
			ProcRoot:       procfs.DefaultRoot,
			RepairInterval: lineage.DefaultRepairInterval,
			MaxNodes:       lineage.DefaultMaxNodes,
			MaxImages:      lineage.DefaultMaxImages,
			MaxImageBytes:  lineage.DefaultMaxImageBytes,
		},
		Sessions: Sessions{
			DefaultRules:    true,
			Retention:       sessions.DefaultRetention,
			MaxActivePerUID: sessions.DefaultMaxActivePerUID,
			MaxEndedPerUID:  sessions.DefaultMaxEndedPerUID,
		},
		Enforcer: Enforcer{
			Mode:        string(enforcer.ModeEnforce),
			Policy:      string(enforcer.PolicyGraceful),
			GracePeriod: enforcer.DefaultGrace,
			Nice:        enforcer.DefaultNice,
		},
		Metrics: Metrics{
			ListenAddress:  exporter.DefaultListenAddress,
			SampleInterval: exporter.DefaultSampleInterval,
			IdleAfter:      exporter.DefaultIdleAfter,
			OrphansEvery:   exporter.DefaultOrphansEvery,
			ServerNames:    true,
		},
		Containers: Containers{EngineSocket: containers.DefaultEngineSocket},
		History: History{
			Dir:      history.DefaultDir,
			MaxAge:   history.DefaultMaxAge,
			MaxBytes: history.DefaultMaxBytes,
		},
		Export: Export{MaxBytes: events.DefaultExportMaxBytes, MaxFiles: events.DefaultExportMaxFiles},
		State: State{
			Dir:                state.DefaultDir,
			CheckpointInterval: state.DefaultCheckpointInterval,
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
	value any          // *string, *int, *bool, *time.Duration, *os.FileMode, or a list (file only)
	check func() error // says what is wrong with the value, if anything
}

// options lists every option of c, pointing into c.
func (c *Config) options() []option {
	return []option{
		{"api.socket", "path of the API unix socket", &c.API.Socket,
			func() error { return api.CheckSocketPath(c.API.Socket) }},
		{"api.socket-mode", "permissions of the API socket, octal (callers are authorized per request)", &c.API.SocketMode,
			func() error { return api.CheckSocketMode(c.API.SocketMode) }},
		{"api.max-connections", "most connections all non-root users may hold open together (root's are not capped)", &c.API.MaxConnections,
			func() error { return between(c.API.MaxConnections, 1, api.MaxConnectionsLimit) }},
		{"api.max-connections-per-uid", "most connections one non-root uid may hold open, at most api.max-connections", &c.API.MaxConnectionsPerUID,
			func() error { return between(c.API.MaxConnectionsPerUID, 1, c.API.MaxConnections) }},
		{"bpf.ring-buffer-size", "size in bytes of the BPF ring buffer, a power of two multiple of the page size", &c.BPF.RingBufferSize,
			func() error { return sensor.CheckRingBufferSize(c.BPF.RingBufferSize) }},
		{"bpf.bpffs", "mount point of the BPF file system", &c.BPF.BPFFS,
			func() error { return absPath(c.BPF.BPFFS) }},
		{"bpf.tracefs", "mount point of tracefs", &c.BPF.TraceFS,
			func() error { return absPath(c.BPF.TraceFS) }},
		{"bpf.pin-dir", "where the kernel programs and maps are pinned so they keep running between agents (on bpffs; mcptrace uninstall removes them)", &c.BPF.PinDir,
			func() error { return absPath(c.BPF.PinDir) }},
		{"lineage.retention", fmt.Sprintf("how long exited processes of a session (and those whose lineage is unproven) stay in the lineage graph; others go once %d newer ones exited", lineage.DefaultRecentExits), &c.Lineage.Retention,
			func() error { return between(c.Lineage.Retention, time.Millisecond, maxRetention) }},
		{"lineage.proc-root", "proc file system to seed and repair the lineage graph from", &c.Lineage.ProcRoot,
			func() error { return absPath(c.Lineage.ProcRoot) }},
		{"lineage.repair-interval", "how often lost events are checked for and the graph repaired", &c.Lineage.RepairInterval,
			func() error { return between(c.Lineage.RepairInterval, 10*time.Millisecond, time.Hour) }},
		{"lineage.max-nodes", "most processes the lineage graph keeps; past it the oldest entirely dead branches are evicted, then chains of exited creators are folded (live processes never are)", &c.Lineage.MaxNodes,
			func() error { return between(c.Lineage.MaxNodes, lineage.MinMaxNodes, lineage.MaxMaxNodes) }},
		{"lineage.max-images", "most exec images kept per process: the first and the latest ones; the rest are counted as dropped", &c.Lineage.MaxImages,
			func() error { return between(c.Lineage.MaxImages, lineage.MinMaxImages, lineage.MaxMaxImages) }},
		{"lineage.max-image-bytes", "most bytes the kept exec images of all processes hold, by the graph's own accounting; past it the oldest entirely dead branches are evicted (live processes never are)", &c.Lineage.MaxImageBytes,
			func() error {
				return between(c.Lineage.MaxImageBytes, lineage.MinMaxImageBytes, lineage.MaxMaxImageBytes)
			}},
		{"sessions.default-rules", "recognise the real agent hosts (Claude Code, Codex, Copilot, Gemini, Qwen, MCP Inspector, opencode, Amp, crush, Cline, Kiro, Cursor, goose, OpenClaw, VS Code) as session roots", &c.Sessions.DefaultRules,
			func() error { return nil }},
		{"sessions.rules", "extra host rules: a list of {name, comm, exe, argv, not} (configuration file only)", &c.Sessions.Rules,
			func() error { return sessions.CompileRules(c.Sessions.Rules) }},
		{"sessions.retention", "how long ended sessions stay listed (one with a live member stays until it ends, within sessions.max-ended-per-uid)", &c.Sessions.Retention,
			func() error { return between(c.Sessions.Retention, time.Second, maxRetention) }},
		{"sessions.within-pid", "only this PID and the processes it created begin sessions or send destroy markers; 0: the whole node", &c.Sessions.WithinPID,
			func() error { return pid(c.Sessions.WithinPID) }},
		{"sessions.max-active-per-uid", "most active sessions one uid may have; a further one is refused (counted, and mcptrace run fails)", &c.Sessions.MaxActivePerUID,
			func() error { return between(c.Sessions.MaxActivePerUID, 1, maxActivePerUID) }},
		{"sessions.max-ended-per-uid", "most ended sessions of one uid kept listed (its oldest go first; no uid's churn evicts another's)", &c.Sessions.MaxEndedPerUID,
			func() error { return between(c.Sessions.MaxEndedPerUID, 1, sessions.DefaultMaxEnded) }},
		{"enforcer.mode", "enforce (signal the members of ended sessions) or audit (record what would be killed)", &c.Enforcer.Mode,
			func() error { return oneOf(c.Enforcer.Mode, "enforce", "audit") }},
		{"enforcer.policy", "graceful (SIGTERM, grace period, SIGKILL) or immediate (SIGKILL)", &c.Enforcer.Policy,
			func() error { return oneOf(c.Enforcer.Policy, "graceful", "immediate") }},
		{"enforcer.grace-period", "wait between SIGTERM and SIGKILL", &c.Enforcer.GracePeriod,
			func() error { return between(c.Enforcer.GracePeriod, time.Millisecond, enforcer.MaxGrace) }},
		{"enforcer.cross-uid", "a session owned by a non-root user also ends members that user could not signal itself (other uids, setuid programs); off: they are spared and counted", &c.Enforcer.CrossUID,
			func() error { return nil }},
		{"enforcer.reap-superseded-after", "end an MCP server its host started again (a newer instance of the same server lives in the same session) once the older one did no read or write for this long; 0 never does", &c.Enforcer.ReapSupersededAfter,
			func() error {
				if c.Enforcer.ReapSupersededAfter == 0 {
					return nil
				}
				return between(c.Enforcer.ReapSupersededAfter, time.Second, maxRetention)
			}},
		{"enforcer.nice", "the agent's scheduling priority, -20 (first) to 19 (last), for every thread of it: other users' CPU floods must not starve the agent that ends their leaks (Linux; on Windows below 0 is the above-normal priority class)", &c.Enforcer.Nice,
			func() error { return between(c.Enforcer.Nice, -20, 19) }},
		{"enforcer.spare", "programs never signalled: a list of {name, comm, exe, argv, not}, each field a pattern or a list, every field given must match (configuration file only)", &c.Enforcer.Spare,
			func() error { _, err := procmatch.CompileAll(c.Enforcer.Spare, procmatch.All); return err }},
		{"state.dir", "where the agent keeps its memory across restarts: sessions, lineage, pending kills (tmpfs by default)", &c.State.Dir,
			func() error { return absPath(c.State.Dir) }},
		{"state.checkpoint-interval", "how often the whole state is written and the journal started anew", &c.State.CheckpointInterval,
			func() error { return between(c.State.CheckpointInterval, time.Second, time.Hour) }},
		{"metrics.listen-address", "host:port where the agent serves Prometheus metrics on /metrics (loopback by default); empty: no metrics", &c.Metrics.ListenAddress,
			func() error { return listenAddress(c.Metrics.ListenAddress) }},
		{"metrics.sample-interval", "how often sessions, server roles and their memory, CPU and I/O are sampled for the metrics", &c.Metrics.SampleInterval,
			func() error { return between(c.Metrics.SampleInterval, 100*time.Millisecond, 10*time.Minute) }},
		{"metrics.idle-after", "how long an MCP server of a live host must do no read or write to count as idle", &c.Metrics.IdleAfter,
			func() error { return between(c.Metrics.IdleAfter, time.Second, maxRetention) }},
		{"metrics.orphans-every", "how often the metrics look for leaked MCP servers that no session owns (mcptrace orphans): a look reads /proc for unowned wrappers and servers", &c.Metrics.OrphansEvery,
			func() error { return between(c.Metrics.OrphansEvery, time.Second, time.Hour) }},
		{"metrics.server-names", "put MCP server names on /metrics, which every local user can read; false: each name is \"hidden\" and the counts stay (a shared node where users should not see each other's servers)", &c.Metrics.ServerNames,
			func() error { return nil }},
		{"containers.engine-socket", "the container engine's API socket: containers that session members start through it are attributed to their session and stopped with it; empty: off", &c.Containers.EngineSocket,
			func() error {
				if c.Containers.EngineSocket == "" {
					return nil
				}
				if len(c.Containers.EngineSocket) > 107 {
					return fmt.Errorf("longer than a unix socket path can be (107 bytes)")
				}
				return absPath(c.Containers.EngineSocket)
			}},
		{"history.dir", "where the journal of every session, process and kill is kept on disk for mcptrace history and past sessions' trees (argv redacted); empty: no history", &c.History.Dir,
			func() error {
				if c.History.Dir == "" {
					return nil
				}
				return absPath(c.History.Dir)
			}},
		{"history.max-age", "how long the history keeps records", &c.History.MaxAge,
			func() error { return between(c.History.MaxAge, time.Minute, 366*24*time.Hour) }},
		{"history.max-bytes", "most bytes the history's store takes on disk; past it the oldest records go first", &c.History.MaxBytes,
			func() error { return between(c.History.MaxBytes, history.MinBytes, 1<<40) }},
		{"export.file", "where every event (as mcptrace events --json prints it: sessions, markers, member execs, kills, containers, orphans, losses) is written for a log pipeline, one JSON object a line, argv redacted; its directory must be root's and writable by no one else; empty: none", &c.Export.File,
			func() error {
				if c.Export.File == "" {
					return nil
				}
				return absPath(c.Export.File)
			}},
		{"export.max-bytes", "size in bytes at which the export file is rotated (FILE.1 holds the previous one); a line never spans two files", &c.Export.MaxBytes,
			func() error { return between(c.Export.MaxBytes, events.MinExportMaxBytes, events.MaxExportMaxBytes) }},
		{"export.max-files", "how many rotated export files are kept (FILE.1 … FILE.N); the oldest goes", &c.Export.MaxFiles,
			func() error { return between(c.Export.MaxFiles, 1, events.MaxExportMaxFiles) }},
		{"log.level", "log level: debug, info, warn or error", &c.Log.Level,
			func() error { return logLevel(c.Log.Level) }},
		{"log.format", "log format: text or json", &c.Log.Format,
			func() error { return oneOf(c.Log.Format, "text", "json") }},
	}
}

// maxRetention bounds lineage.retention and sessions.retention: what is kept
// longer than a day is better read from the logs.
const maxRetention = 24 * time.Hour

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

// SessionsConfig is the sessions part as package sessions takes it.
func (c Config) SessionsConfig() sessions.Config {
	return sessions.Config{DefaultRules: c.Sessions.DefaultRules, Rules: c.Sessions.Rules, Retention: c.Sessions.Retention,
		WithinPID: uint32(c.Sessions.WithinPID), MaxActivePerUID: c.Sessions.MaxActivePerUID, MaxEndedPerUID: c.Sessions.MaxEndedPerUID}
}

// EnforcerConfig is the enforcer part as package enforcer takes it, with
// the spare rules compiled; errors name the rule.
func (c Config) EnforcerConfig() (enforcer.Config, error) {
	ec := enforcer.Config{
		Mode:     enforcer.Mode(c.Enforcer.Mode),
		Policy:   enforcer.Policy(c.Enforcer.Policy),
		Grace:    c.Enforcer.GracePeriod,
		CrossUID: c.Enforcer.CrossUID,
		Spare:    c.Enforcer.Spare,
	}
	return ec, ec.Validate()
}
