package config

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/mcptrace/mcptrace/api"
	"github.com/mcptrace/mcptrace/enforcer"
	"github.com/mcptrace/mcptrace/procmatch"
)

// isolate keeps the test away from the host: no MCPTRACE_* variables and no
// /etc/mcptrace/config.yaml.
func isolate(t *testing.T) {
	t.Helper()
	for _, kv := range os.Environ() {
		if name, _, _ := strings.Cut(kv, "="); strings.HasPrefix(name, EnvPrefix+"_") {
			t.Setenv(name, "") // empty counts as unset
		}
	}
	old := defaultFile
	defaultFile = filepath.Join(t.TempDir(), "absent.yaml")
	t.Cleanup(func() { defaultFile = old })
}

func writeFile(t *testing.T, yaml string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// flagSet returns the agent's flags parsed from args.
func flagSet(t *testing.T, args ...string) *pflag.FlagSet {
	t.Helper()
	fs := pflag.NewFlagSet("mcptrace", pflag.ContinueOnError)
	BindFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return fs
}

func TestDefaultsValidate(t *testing.T) {
	if err := Default().Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestLoadWithoutFileGivesDefaults(t *testing.T) {
	isolate(t)
	for _, fs := range []*pflag.FlagSet{nil, flagSet(t)} {
		c, err := Load("", fs)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(c, Default()) {
			t.Errorf("Load = %+v, want the defaults %+v", c, Default())
		}
	}
}

func TestLoadReadsDefaultFileWhenPresent(t *testing.T) {
	isolate(t)
	defaultFile = writeFile(t, "lineage:\n  retention: 1m\n")
	c, err := Load("", nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Lineage.Retention != time.Minute {
		t.Errorf("retention = %v, want 1m from %s", c.Lineage.Retention, defaultFile)
	}
}

func TestLoadMissingFileFails(t *testing.T) {
	isolate(t)
	path := filepath.Join(t.TempDir(), "nope.yaml")
	_, err := Load(path, nil)
	if err == nil || !strings.Contains(err.Error(), path) {
		t.Errorf("Load(%s) = %v, want an error naming the file", path, err)
	}
}

// Flags over the environment over the file over the defaults; what the
// file sets and something else overrides is listed in Overridden.
func TestLoadPrecedence(t *testing.T) {
	const file = `
api:
  socket: /file.sock
  socket-mode: "0600"
bpf:
  ring-buffer-size: 16777216
lineage:
  retention: 1m
log:
  format: json
`
	tests := []struct {
		name  string
		file  bool
		env   map[string]string
		flags []string
		want  func(*Config)
	}{
		{"defaults alone", false, nil, nil, func(c *Config) {}},
		{"file over defaults", true, nil, nil, func(c *Config) {
			c.API.Socket, c.API.SocketMode, c.BPF.RingBufferSize, c.Lineage.Retention, c.Log.Format = "/file.sock", 0o600, 16<<20, time.Minute, "json"
		}},
		{"env over file", true, map[string]string{
			"MCPTRACE_LINEAGE_RETENTION":       "2m",
			"MCPTRACE_BPF_RING_BUFFER_SIZE":    "2097152",
			"MCPTRACE_API_SOCKET_MODE":         "0660",
			"MCPTRACE_LINEAGE_REPAIR_INTERVAL": "250ms",
		}, nil, func(c *Config) {
			c.API.Socket, c.API.SocketMode, c.BPF.RingBufferSize, c.Lineage.Retention, c.Log.Format = "/file.sock", 0o660, 2<<20, 2*time.Minute, "json"
			c.Lineage.RepairInterval = 250 * time.Millisecond
			c.Overridden = []string{"api.socket-mode (MCPTRACE_API_SOCKET_MODE)", "bpf.ring-buffer-size (MCPTRACE_BPF_RING_BUFFER_SIZE)", "lineage.retention (MCPTRACE_LINEAGE_RETENTION)"}
		}},
		{"flag over env", true, map[string]string{
			"MCPTRACE_LINEAGE_RETENTION":    "2m",
			"MCPTRACE_BPF_RING_BUFFER_SIZE": "2097152",
			"MCPTRACE_LOG_LEVEL":            "warn",
		}, []string{"--lineage.retention=3m", "--bpf.ring-buffer-size", "1048576", "--api.socket-mode=0666", "--log.format=text"}, func(c *Config) {
			c.API.Socket, c.BPF.RingBufferSize, c.Lineage.Retention, c.Log.Level = "/file.sock", 1<<20, 3*time.Minute, "warn"
			c.Overridden = []string{"api.socket-mode (flag --api.socket-mode)", "bpf.ring-buffer-size (flag --bpf.ring-buffer-size)", "lineage.retention (flag --lineage.retention)", "log.format (flag --log.format)"}
		}},
		{"flag left at its default does not override", true, map[string]string{
			"MCPTRACE_LINEAGE_RETENTION": "2m",
		}, []string{"--log.level=debug"}, func(c *Config) {
			c.API.Socket, c.API.SocketMode, c.BPF.RingBufferSize, c.Lineage.Retention, c.Log.Format, c.Log.Level = "/file.sock", 0o600, 16<<20, 2*time.Minute, "json", "debug"
			c.Overridden = []string{"lineage.retention (MCPTRACE_LINEAGE_RETENTION)"}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			isolate(t)
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			path := ""
			if tt.file {
				path = writeFile(t, file)
			}
			got, err := Load(path, flagSet(t, tt.flags...))
			if err != nil {
				t.Fatal(err)
			}
			want := Default()
			tt.want(&want)
			if !reflect.DeepEqual(got, want) {
				t.Errorf("Load\n got %+v\nwant %+v", got, want)
			}
		})
	}
}

func TestLoadRejects(t *testing.T) {
	tests := []struct {
		name  string
		file  string
		env   map[string]string
		flags []string
		want  []string // each must be in the error
	}{
		{"unknown key", "lineage:\n  retention: 1m\n  retension: 2m\n", nil, nil,
			[]string{"unknown key lineage.retension", "did you mean lineage.retention?"}},
		{"unknown section", "sessions:\n  idle: 1m\n", nil, nil, []string{"unknown key sessions.idle"}},
		{"value for a section", "api: /run/x.sock\n", nil, nil, []string{"api is a section (api.socket, api.socket-mode, api.max-connections, api.max-connections-per-uid)"}},
		{"snake case key", "bpf:\n  ring_buffer_size: 4096\n", nil, nil, []string{"unknown key bpf.ring_buffer_size", "did you mean bpf.ring-buffer-size?"}},
		{"ring buffer not a power of two", "bpf:\n  ring-buffer-size: 1000000\n", nil, nil,
			[]string{"bpf.ring-buffer-size (", "must be a power of two multiple of the page size", "got 1000000"}},
		{"ring buffer smaller than a page", "", map[string]string{"MCPTRACE_BPF_RING_BUFFER_SIZE": "64"}, nil,
			[]string{"bpf.ring-buffer-size (MCPTRACE_BPF_RING_BUFFER_SIZE)", "got 64"}},
		{"ring buffer too large", "", nil, []string{"--bpf.ring-buffer-size=2147483648"},
			[]string{"bpf.ring-buffer-size (flag --bpf.ring-buffer-size)", "up to 1073741824"}},
		{"ring buffer not a number", "", map[string]string{"MCPTRACE_BPF_RING_BUFFER_SIZE": "8MiB"}, nil,
			[]string{"bpf.ring-buffer-size (MCPTRACE_BPF_RING_BUFFER_SIZE): want a whole number", `"8MiB"`}},
		{"duration without unit in YAML", "lineage:\n  retention: 300\n", nil, nil,
			[]string{"lineage.retention (", "want a duration with a unit", "got 300"}},
		{"duration in words", "", map[string]string{"MCPTRACE_LINEAGE_RETENTION": "5 minutes"}, nil,
			[]string{"lineage.retention (MCPTRACE_LINEAGE_RETENTION): want a duration such as 90s", `"5 minutes"`}},
		{"negative retention", "lineage:\n  retention: -1m\n", nil, nil, []string{"lineage.retention (", "must be between 1ms and 24h0m0s, got -1m0s"}},
		{"repair too often", "", nil, []string{"--lineage.repair-interval=1ms"},
			[]string{"lineage.repair-interval (flag --lineage.repair-interval): must be between 10ms and 1h0m0s"}},
		{"unquoted socket mode", "api:\n  socket-mode: 0660\n", nil, nil, []string{"api.socket-mode (", "quote the mode"}},
		{"socket mode not octal", "", map[string]string{"MCPTRACE_API_SOCKET_MODE": "0999"}, nil,
			[]string{"api.socket-mode (MCPTRACE_API_SOCKET_MODE): want an octal mode"}},
		{"socket mode with sticky bit", "api:\n  socket-mode: \"01777\"\n", nil, nil, []string{"api.socket-mode (", "between 0000 and 0777, got 1777"}},
		{"relative socket", "api:\n  socket: mcptrace.sock\n", nil, nil, []string{"api.socket (", "must be an absolute path"}},
		{"socket path too long", "", map[string]string{"MCPTRACE_API_SOCKET": "/" + strings.Repeat("s", 200)}, nil,
			[]string{"api.socket (MCPTRACE_API_SOCKET): must be at most 107 bytes"}},
		{"metrics address without a port", "", nil, []string{"--metrics.listen-address=127.0.0.1"},
			[]string{"metrics.listen-address (flag --metrics.listen-address): must be host:port", "or empty for no metrics"}},
		{"metrics port out of range", "metrics:\n  listen-address: \":99999\"\n", nil, nil,
			[]string{"metrics.listen-address (", "port must be a number from 0 (any free port) to 65535"}},
		{"sampling too often", "", nil, []string{"--metrics.sample-interval=1ms"},
			[]string{"metrics.sample-interval (flag --metrics.sample-interval): must be between 100ms and 10m0s"}},
		{"no active session per uid", "", nil, []string{"--sessions.max-active-per-uid=0"},
			[]string{"sessions.max-active-per-uid (flag --sessions.max-active-per-uid): must be between 1 and 65536", "got 0"}},
		{"more ended sessions per uid than the node keeps", "", nil, []string{"--sessions.max-ended-per-uid=1001"},
			[]string{"sessions.max-ended-per-uid (flag --sessions.max-ended-per-uid): must be between 1 and 1000", "got 1001"}},
		{"negative within-pid", "", nil, []string{"--sessions.within-pid=-1"},
			[]string{"sessions.within-pid (flag --sessions.within-pid): must be 0 or a PID", "got -1"}},
		{"bad log level", "log:\n  level: verbose\n", nil, nil, []string{"log.level (", "must be debug, info, warn or error"}},
		{"bad log format", "", nil, []string{"--log.format=xml"}, []string{"log.format (flag --log.format): must be text or json"}},
		{"number for a string", "log:\n  format: 3\n", nil, nil, []string{"log.format (", "want a string"}},
		{"yaml syntax", "api: [\n", nil, nil, []string{"parse config"}},
		{"every problem at once", "log:\n  level: x\n  format: y\n", nil, nil, []string{"log.level", "log.format"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			isolate(t)
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			path := ""
			if tt.file != "" {
				path = writeFile(t, tt.file)
			}
			_, err := Load(path, flagSet(t, tt.flags...))
			if err == nil {
				t.Fatal("Load succeeded, want an error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestLoadAllowsEmptySection(t *testing.T) {
	isolate(t)
	if _, err := Load(writeFile(t, "api:\nlog:\n  level: debug\n"), nil); err != nil {
		t.Fatal(err)
	}
}

func TestLoadParsesDurations(t *testing.T) {
	tests := []struct {
		in   string
		want time.Duration
	}{
		{"90s", 90 * time.Second},
		{"1h30m", 90 * time.Minute},
		{"250ms", 250 * time.Millisecond},
		{"0.5h", 30 * time.Minute},
		{`"2m"`, 2 * time.Minute},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			isolate(t)
			c, err := Load(writeFile(t, "lineage:\n  retention: "+tt.in+"\n"), nil)
			if err != nil {
				t.Fatal(err)
			}
			if c.Lineage.Retention != tt.want {
				t.Errorf("retention = %v, want %v", c.Lineage.Retention, tt.want)
			}
		})
	}
}

func TestValidateNamesEveryBadKey(t *testing.T) {
	c := Config{} // every field zero: all wrong
	err := c.Validate()
	if err == nil {
		t.Fatal("Validate succeeded on a zero Config")
	}
	for _, o := range c.options() {
		switch o.key {
		case "sessions.default-rules", // false is valid
			"enforcer.cross-uid",               // false is valid
			"metrics.server-names",             // false is valid
			"sessions.within-pid",              // 0 (the whole node) is valid
			"metrics.listen-address",           // "" (no metrics) is valid
			"containers.engine-socket",         // "" (attribution off) is valid
			"history.dir",                      // "" (no history) is valid
			"export.file",                      // "" (no export) is valid
			"enforcer.reap-superseded-after",   // 0 (never) is valid
			"enforcer.nice",                    // 0 is a nice value
			"sessions.rules", "enforcer.spare": // no rules is valid
			continue
		}
		if !strings.Contains(err.Error(), o.key+": ") {
			t.Errorf("error does not name %s:\n%v", o.key, err)
		}
	}
}

func TestBindFlagsRegistersEveryOptionWithItsDefault(t *testing.T) {
	fs := flagSet(t)
	want := map[string]string{
		"api.socket":                     "/run/mcptrace/mcptrace.sock",
		"api.socket-mode":                "0666",
		"api.max-connections":            "128",
		"api.max-connections-per-uid":    "16",
		"bpf.ring-buffer-size":           "4194304",
		"bpf.bpffs":                      "/sys/fs/bpf",
		"bpf.tracefs":                    "/sys/kernel/tracing",
		"bpf.pin-dir":                    "/sys/fs/bpf/mcptrace",
		"state.dir":                      "/run/mcptrace/state",
		"state.checkpoint-interval":      "30s",
		"history.dir":                    "/var/lib/mcptrace/history",
		"history.max-age":                "168h0m0s",
		"history.max-bytes":              "268435456",
		"lineage.retention":              "5m0s",
		"lineage.proc-root":              "/proc",
		"lineage.repair-interval":        "1s",
		"lineage.max-nodes":              "200000",
		"lineage.max-images":             "8",
		"lineage.max-image-bytes":        "536870912",
		"log.level":                      "info",
		"log.format":                     "text",
		"sessions.default-rules":         "true",
		"sessions.retention":             "15m0s",
		"sessions.within-pid":            "0",
		"sessions.max-active-per-uid":    "1024",
		"sessions.max-ended-per-uid":     "200",
		"enforcer.mode":                  "enforce",
		"enforcer.policy":                "graceful",
		"enforcer.grace-period":          "2s",
		"enforcer.cross-uid":             "false",
		"metrics.listen-address":         "127.0.0.1:9467",
		"enforcer.reap-superseded-after": "0s",
		"enforcer.nice":                  "-10",
		"metrics.sample-interval":        "15s",
		"metrics.idle-after":             "30m0s",
		"metrics.orphans-every":          "1m0s",
		"metrics.server-names":           "true",
		"containers.engine-socket":       "/var/run/docker.sock",
		"export.file":                    "",
		"export.max-bytes":               "67108864",
		"export.max-files":               "4",
	}
	n := 0
	fs.VisitAll(func(f *pflag.Flag) {
		n++
		if f.DefValue != want[f.Name] {
			t.Errorf("--%s default %q, want %q", f.Name, f.DefValue, want[f.Name])
		}
		if f.Usage == "" {
			t.Errorf("--%s has no help text", f.Name)
		}
	})
	if n != len(want) {
		t.Errorf("%d flags, want %d", n, len(want))
	}
}

func TestLogLevel(t *testing.T) {
	tests := []struct {
		level string
		want  slog.Level
	}{
		{"debug", slog.LevelDebug},
		{"info", slog.LevelInfo},
		{"warn", slog.LevelWarn},
		{"ERROR", slog.LevelError},
		{"nonsense", slog.LevelInfo},
	}
	for _, tt := range tests {
		t.Run(tt.level, func(t *testing.T) {
			c := Default()
			c.Log.Level = tt.level
			if got := c.LogLevel(); got != tt.want {
				t.Errorf("LogLevel() = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestNewLoggerHonoursFormatAndLevel(t *testing.T) {
	c := Default()
	c.Log.Format, c.Log.Level = "json", "warn"
	var buf bytes.Buffer
	log := c.NewLogger(&buf)
	log.Info("hidden")
	log.Warn("shown", "k", 1)
	var rec map[string]any
	if err := json.Unmarshal(buf.Bytes(), &rec); err != nil {
		t.Fatalf("not one JSON record: %q: %v", buf.String(), err)
	}
	if rec["msg"] != "shown" {
		t.Errorf("record %v, want msg shown", rec)
	}

	c.Log.Format = "text"
	buf.Reset()
	c.NewLogger(&buf).Warn("plain")
	if !strings.Contains(buf.String(), "msg=plain") {
		t.Errorf("text output %q", buf.String())
	}
}

func TestLoadReadsRuleListsFromFile(t *testing.T) {
	isolate(t)
	path := writeFile(t, `
sessions:
  default-rules: false
  rules:
    - name: myhost
      comm: [myhost]
enforcer:
  mode: audit
  spare:
    - name: keep-sshd
      comm: sshd
`)
	c, err := Load(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Sessions.DefaultRules || len(c.Sessions.Rules) != 1 || c.Sessions.Rules[0].Name != "myhost" {
		t.Errorf("sessions = %+v", c.Sessions)
	}
	ec, err := c.EnforcerConfig()
	if err != nil || ec.Mode != "audit" || len(ec.Spare) != 1 || len(ec.Spare[0].Comm) != 1 || ec.Spare[0].Comm[0] != "sshd" {
		t.Errorf("enforcer = %+v, %v", ec, err)
	}
}

// The README's spare rule example loads, and a spare rule reads each
// field as one pattern or a list, with the matching procmatch gives it.
func TestSpareRulesTakeAPatternOrAList(t *testing.T) {
	isolate(t)
	path := writeFile(t, `
enforcer:
  spare:
    - name: editor-daemon
      comm: node
      argv: '^node /opt/editor/daemon\.js( |$)'
    - name: tools
      exe: [bin/jq, /opt/tools/*]
      not: ['--unsafe']
`)
	c, err := Load(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	ec, err := c.EnforcerConfig()
	if err != nil {
		t.Fatal(err)
	}
	ms, err := procmatch.CompileAll(ec.Spare, procmatch.All)
	if err != nil || len(ms) != 2 {
		t.Fatalf("compiled %d rules: %v", len(ms), err)
	}
	for _, tt := range []struct {
		im   procmatch.Image
		want string
	}{
		{procmatch.Image{Comm: "node", Filename: "/usr/bin/node", Argv: []string{"node", "/opt/editor/daemon.js"}}, "editor-daemon"},
		{procmatch.Image{Comm: "node", Filename: "/usr/bin/node", Argv: []string{"node", "/opt/editor/other.js"}}, ""},
		{procmatch.Image{Comm: "jq", Filename: "/usr/local/bin/jq", Argv: []string{"jq", "."}}, "tools"},
		{procmatch.Image{Comm: "jq", Filename: "/usr/local/bin/jq", Argv: []string{"jq", "--unsafe"}}, ""},
	} {
		got := ""
		if m := procmatch.First(ms, tt.im); m != nil {
			got = m.Name()
		}
		if got != tt.want {
			t.Errorf("%v: spared by %q, want %q", tt.im.Argv, got, tt.want)
		}
	}
}

func TestLoadRejectsBadRuleLists(t *testing.T) {
	for _, tc := range []struct{ name, yaml, want string }{
		{"unknown rule field", "sessions:\n  rules:\n    - name: x\n      command: [x]\n", `unknown field "command"`},
		{"bad rule regexp", "sessions:\n  rules:\n    - name: x\n      argv: ['(']\n", "sessions.rules"},
		{"empty spare rule", "enforcer:\n  spare:\n    - name: x\n", "no comm, exe or argv pattern"},
		{"bad mode", "enforcer:\n  mode: kill-all\n", "enforcer.mode"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			isolate(t)
			_, err := Load(writeFile(t, tc.yaml), nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestAPIConnectionCapsAreBounded(t *testing.T) {
	for _, tc := range []struct {
		total, perUID int
		bad           string
	}{
		{128, 16, ""},
		{0, 16, "api.max-connections"},
		{api.MaxConnectionsLimit + 1, 16, "api.max-connections"},
		{128, 0, "api.max-connections-per-uid"},
		{8, 16, "api.max-connections-per-uid"},
	} {
		c := Default()
		c.API.MaxConnections, c.API.MaxConnectionsPerUID = tc.total, tc.perUID
		err := c.Validate()
		if tc.bad == "" && err != nil || tc.bad != "" && (err == nil || !strings.Contains(err.Error(), tc.bad+": ")) {
			t.Errorf("total %d per uid %d: %v, want error naming %q", tc.total, tc.perUID, err, tc.bad)
		}
	}
}

// TestEveryAcceptedValueMeansWhatItSays: a value is either honoured as
// written or refused with a message naming the key and the valid range.
func TestEveryAcceptedValueMeansWhatItSays(t *testing.T) {
	tests := []struct {
		name  string
		flags []string
		want  string // "" accepted; else in the error
	}{
		{"socket mode 0000 is refused, not turned into 0666", []string{"--api.socket-mode=0000"}, "api.socket-mode (flag --api.socket-mode): must be 0600, 0660, 0606 or 0666"},
		{"socket mode read-only for others grants nothing", []string{"--api.socket-mode=0644"}, "got 0644"},
		{"socket mode execute bits mean nothing", []string{"--api.socket-mode=0777"}, "got 0777"},
		{"socket mode without owner write is refused", []string{"--api.socket-mode=0066"}, "got 0066"},
		{"socket mode 0600 is root only", []string{"--api.socket-mode=0600"}, ""},
		{"socket mode 0660 is the group", []string{"--api.socket-mode=0660"}, ""},
		{"grace period past the old fixed sweep timeout is honoured", []string{"--enforcer.grace-period=45s"}, ""},
		{"grace period at its maximum", []string{"--enforcer.grace-period=10m"}, ""},
		{"grace period beyond its maximum", []string{"--enforcer.grace-period=11m"}, "enforcer.grace-period (flag --enforcer.grace-period): must be between 1ms and 10m0s, got 11m0s"},
		{"within-pid is below pid_max", []string{"--sessions.within-pid=4194304"}, "sessions.within-pid (flag --sessions.within-pid): must be 0 or a PID (1 to 4194303), got 4194304"},
		{"within-pid at the largest pid", []string{"--sessions.within-pid=4194303"}, ""},
		{"log level with an offset names no listed level", []string{"--log.level=info+2"}, "log.level (flag --log.level): must be debug, info, warn or error"},
		{"log level in capitals", []string{"--log.level=WARN"}, ""},
		{"lineage retention beyond a day", []string{"--lineage.retention=25h"}, "lineage.retention (flag --lineage.retention): must be between 1ms and 24h0m0s"},
		{"sessions retention beyond a day", []string{"--sessions.retention=25h"}, "sessions.retention (flag --sessions.retention): must be between 1s and 24h0m0s"},
		{"repair interval beyond an hour", []string{"--lineage.repair-interval=2h"}, "lineage.repair-interval (flag --lineage.repair-interval): must be between 10ms and 1h0m0s"},
		{"checkpoint interval beyond an hour", []string{"--state.checkpoint-interval=2h"}, "state.checkpoint-interval (flag --state.checkpoint-interval): must be between 1s and 1h0m0s"},
		{"node cap zero", []string{"--lineage.max-nodes=0"}, "lineage.max-nodes (flag --lineage.max-nodes): must be between 1000 and 10000000, got 0"},
		{"node cap too large", []string{"--lineage.max-nodes=20000000"}, "got 20000000"},
		{"one image cannot keep the first and the latest", []string{"--lineage.max-images=1"}, "lineage.max-images (flag --lineage.max-images): must be between 2 and 1024, got 1"},
		{"image cap too large", []string{"--lineage.max-images=4096"}, "got 4096"},
		{"image byte cap too small", []string{"--lineage.max-image-bytes=1024"}, "lineage.max-image-bytes (flag --lineage.max-image-bytes): must be between 16777216 and 68719476736, got 1024"},
		{"smallest caps", []string{"--lineage.max-images=2", "--lineage.max-nodes=1000", "--lineage.max-image-bytes=16777216"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			isolate(t)
			c, err := Load("", flagSet(t, tt.flags...))
			if tt.want != "" {
				if err == nil || !strings.Contains(err.Error(), tt.want) {
					t.Fatalf("Load(%q) error %v, want one containing %q", tt.flags, err, tt.want)
				}
				return
			}
			if err != nil {
				t.Fatalf("Load(%q): %v", tt.flags, err)
			}
			// What the agent is given must be what was written.
			ec, err := c.EnforcerConfig()
			if err != nil {
				t.Fatalf("EnforcerConfig: %v", err)
			}
			got := enforcer.New(ec, nil, slog.New(slog.DiscardHandler)).Config()
			if got.Mode != enforcer.ModeEnforce || got.Grace != c.Enforcer.GracePeriod {
				t.Errorf("enforcer runs mode %s grace %s, configured enforce %s", got.Mode, got.Grace, c.Enforcer.GracePeriod)
			}
			if got.SweepTimeout <= got.Grace {
				t.Errorf("sweep gives up at %s, not after the grace period %s: SIGKILL would never be sent", got.SweepTimeout, got.Grace)
			}
		})
	}
}
