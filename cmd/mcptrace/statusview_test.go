package main

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcptrace/mcptrace/api"
	"github.com/mcptrace/mcptrace/history"
	"github.com/mcptrace/mcptrace/internal/version"
	"github.com/mcptrace/mcptrace/sessions"
)

var update = flag.Bool("update", false, "rewrite the golden files of testdata/")

// golden compares got with testdata/name, or writes it there with -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test -run %s -update writes it)", err, t.Name())
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs (go test -run %s -update rewrites it after a look):\n--- got\n%s--- want\n%s", path, t.Name(), got, want)
	}
}

// statusFixture is an agent's status as root sees it: twelve minutes up
// under systemd, a loss repaired, an orphan, no container engine, and two
// problems logged.
func statusFixture(now time.Time) api.Status {
	return api.Status{
		Agent: api.AgentStatus{
			Build: version.Info{Version: "0.1.0~git20261128080454.0123456789ab", Revision: "0123456789abcdef0123456789abcdef01234567", GoVersion: "go1.26.0", Platform: "linux/amd64"},
			PID:   4242, Started: now.Add(-12*time.Minute - 3*time.Second), Install: api.Install{Kind: api.InstallSystemd, Unit: "mcptrace.service"}, Ready: true,
		},
		Kernel:  api.KernelStatus{Release: "6.1.0-27-amd64", PinDir: "/sys/fs/bpf/mcptrace", Attached: true, Doomed: 3, DoomedMax: 65536},
		Tracked: 812, Alive: 301, Exited: 511, Repairs: 2,
		Events:     map[string]uint64{"fork": 120345, "exec": 80211, "exit": 119876, "request": 0},
		Lost:       map[string]uint64{"fork": 12, "exec": 0, "exit": 3},
		Recovered:  map[string]uint64{"fork": 1},
		Sessions:   sessions.Stats{Active: 4, Retained: 9, Begun: map[string]uint64{"rule:claude": 13}},
		Enforcer:   api.EnforcerStatus{Endings: 9, Killed: 37},
		Leaks:      api.LeakStatus{SampledAgoSeconds: 4.2, Orphaned: 2, OrphanedRSS: 96 << 20, Unowned: 1, UnownedRSS: 41 << 20, Idle: 1},
		Containers: api.ContainerStatus{Attribution: "off", Reason: "container engine at /var/run/docker.sock: connect: no such file or directory (is dockerd running? set containers.engine-socket)"},
		History:    api.HistoryStatus{Store: "/var/lib/mcptrace/history/history.db", Stats: &history.Stats{FileBytes: 18 << 20, Oldest: now.Add(-50 * time.Hour)}},
		Metrics:    api.MetricsStatus{Address: "127.0.0.1:9467", SampleAgeSeconds: 4.2, SampleSeconds: 0.012},
		State:      api.StateStatus{Dir: "/run/mcptrace/state", Bytes: 4 << 20, CheckpointAgeSeconds: 11},
		Start:      api.StartStatus{Restored: true, Drained: 2210, Resumed: 1},
		Problems: []api.Problem{
			{At: now.Add(-11 * time.Minute), Level: "WARN", What: "kernel lost events; repairing the graph from /proc exec=0 exit=3 fork=12"},
			{At: now.Add(-2 * time.Minute), Level: "ERROR", What: "kill failed session=claude-77 pid=9012 err=\"operation not permitted\"", Repeats: 2},
		},
	}
}

// TestStatusSummary: mcptrace status says in a dozen lines whether the
// agent runs and how it does, for root; another user sees what concerns
// everyone and is told what is left out.
func TestStatusSummary(t *testing.T) {
	now := time.Date(2026, 11, 28, 9, 30, 0, 0, time.UTC)
	st := statusFixture(now)
	var b bytes.Buffer
	if err := writeStatus(&b, st, now); err != nil {
		t.Fatal(err)
	}
	golden(t, "status.golden", b.Bytes())

	// As another user sees it (api.Server's handleStatus leaves these out).
	st.Partial = true
	st.Sessions, st.Enforcer, st.Leaks, st.Problems = sessions.Stats{}, api.EnforcerStatus{}, api.LeakStatus{}, nil
	st.History = api.HistoryStatus{Store: st.History.Store}
	st.Containers = api.ContainerStatus{Attribution: st.Containers.Attribution, Socket: "/var/run/docker.sock"}
	b.Reset()
	if err := writeStatus(&b, st, now); err != nil {
		t.Fatal(err)
	}
	golden(t, "status-partial.golden", b.Bytes())

	// A healthy fresh agent: nothing lost, nothing leaked, no problem.
	st = api.Status{Agent: api.AgentStatus{Build: version.Info{Version: "devel", Revision: "unknown", GoVersion: "go1.26.0", Platform: "linux/amd64"},
		PID: 1, Started: now.Add(-time.Second), Install: api.Install{Kind: api.InstallManual}, Ready: true},
		State:  api.StateStatus{Dir: "/run/mcptrace/state", Bytes: 120 << 10, CheckpointAgeSeconds: 1},
		Kernel: api.KernelStatus{Release: "6.12.1", Attached: true}, Leaks: api.LeakStatus{SampledAgoSeconds: 1},
		Containers: api.ContainerStatus{Attribution: "on", Socket: "/var/run/docker.sock", Engine: "20.10.24"},
		History:    api.HistoryStatus{Off: "turned off (history.dir is empty)"}, Enforcer: api.EnforcerStatus{Failed: 0}}
	b.Reset()
	if err := writeStatus(&b, st, now); err != nil {
		t.Fatal(err)
	}
	golden(t, "status-fresh.golden", b.Bytes())

	// Another program holds the metrics address: said, with the count of
	// failed attempts, and not as "off".
	st.Metrics = api.MetricsStatus{ListenError: "metrics: listen on 127.0.0.1:9467 (…): bind: address already in use", ListenFailures: 3}
	b.Reset()
	if err := writeStatus(&b, st, now); err != nil {
		t.Fatal(err)
	}
	if got := b.String(); !strings.Contains(got, "metrics     not served, tried again every 10s (3 attempts failed; enforcement goes on): metrics: listen on 127.0.0.1:9467") {
		t.Errorf("status with the metrics address taken:\n%s", got)
	}
}
