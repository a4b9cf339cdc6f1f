package api

import (
	"time"

	"github.com/mcptrace/mcptrace/internal/version"
	"github.com/mcptrace/mcptrace/lineage"
	"github.com/mcptrace/mcptrace/sessions"
)

// ProcessList is the answer of the process endpoints.
type ProcessList struct {
	// Now is CLOCK_BOOTTIME in ns when the answer was made, to compute ages.
	Now       uint64            `json:"now_ns"`
	Processes []lineage.Process `json:"processes"`
}

// Status describes the agent's health: what it tracks and what it lost.
type Status struct {
	Now uint64 `json:"now_ns"`
	// Partial: the caller is not root, and what moves with other users'
	// sessions is left out (sessions, enforcer, endings, leaks, problems,
	// the history's and the containers' counts).
	Partial bool `json:"partial,omitempty"`
	// Agent is the agent itself: its build, process, start and install.
	Agent AgentStatus `json:"agent"`
	// Kernel is the kernel side: the kernel, where the programs are
	// pinned, what it can do.
	Kernel KernelStatus `json:"kernel"`
	// Leaks are what the last metrics sample found leaked: zero for
	// anyone but root (they move with other users' sessions).
	Leaks LeakStatus `json:"leaks"`
	// Problems are the last warnings and errors the agent logged, oldest
	// first (root only: they may name other users' sessions).
	Problems []Problem `json:"problems,omitempty"`

	Tracked int    `json:"tracked_processes"`
	Alive   int    `json:"alive_processes"`
	Exited  int    `json:"exited_processes"`
	Retired uint64 `json:"retired_processes_total"`
	Repairs uint64 `json:"repairs_total"`
	// The lineage graph's caps (lineage.max-images, lineage.max-nodes):
	// exec images dropped from the middle of long exec chains, exited
	// processes evicted oldest first, exited processes folded out of
	// chains of exited creators, processes admitted over the cap because
	// nothing was left to evict or fold, and the bytes the kept images
	// hold by the graph's own accounting.
	ImagesDropped uint64 `json:"dropped_images_total"`
	Evicted       uint64 `json:"evicted_processes_total"`
	Folded        uint64 `json:"folded_processes_total"`
	// Dropped counts exited processes no session held that went once
	// newer exits followed (lineage.Config.RecentExits) instead of
	// staying for lineage.retention.
	Dropped    uint64 `json:"dropped_processes_total"`
	OverCap    uint64 `json:"over_cap_processes_total"`
	ImageBytes int    `json:"image_bytes"`
	// Events applied and events the kernel could not send, per kind.
	Events map[string]uint64 `json:"events_total"`
	Lost   map[string]uint64 `json:"lost_events_total"`
	// Recovered counts events the kernel skipped the primary program for
	// and the backup program delivered (preemptible tracepoints): not
	// lost, shown so a rising number is visible.
	Recovered map[string]uint64 `json:"recovered_events_total"`
	// Gaps counts what the graph had to fill in, per gap kind.
	Gaps map[string]uint64 `json:"gaps_total"`
	// RepairPending: a loss was seen and the /proc repair has not
	// succeeded yet (it is retried).
	RepairPending bool `json:"repair_pending,omitempty"`
	// PendingEndings counts sessions and generations whose members the
	// enforcer is still ending.
	PendingEndings int `json:"pending_endings"`
	// State is the agent's memory across restarts.
	State StateStatus `json:"state"`
	// Start says what the last start found and did.
	Start StartStatus `json:"start"`
	// API is the API's own counters and limits.
	API APIStatus `json:"api"`
	// Enforcer counts what the enforcer did, since the saved state began.
	Enforcer EnforcerStatus `json:"enforcer"`
	// Sessions are the session tracker's counters: refusals over the
	// per-uid cap, ended sessions dropped over quota, logs held back…
	Sessions sessions.Stats `json:"sessions"`
	// Metrics says where /metrics is served and how fresh its sample is.
	Metrics MetricsStatus `json:"metrics"`
	// Containers says whether containers that sessions start are
	// attributed and ended with them, and why not.
	Containers ContainerStatus `json:"containers"`
	// History is the journal of sessions kept on disk.
	History HistoryStatus `json:"history"`
	// Stream is the event stream and its export file (events.go).
	Stream EventsStatus `json:"event_stream"`
}

// AgentStatus is the agent process.
type AgentStatus struct {
	Build version.Info `json:"build"`
	PID   int          `json:"pid"`
	// Started is when the agent started (wall clock).
	Started time.Time `json:"started"`
	// Install is how it was started, and so how it is started again.
	Install Install `json:"install"`
	// Ready: it serves (the API and, when on, the metrics).
	Ready bool `json:"ready"`
}

// KernelStatus is the kernel side of the agent.
type KernelStatus struct {
	// Release is the running kernel (uname -r).
	Release string `json:"release"`
	// PinDir is where the programs and maps stay pinned between agents
	// (bpf.pin-dir); "" on Windows (ETW).
	PinDir string `json:"pin_dir,omitempty"`
	// Attached: the programs are attached and events flow.
	Attached bool `json:"attached"`
	// SignalAtFork: the kernel can signal a doomed process's new child
	// at fork (bpf_send_signal_task, 6.13+); before, at its first exec.
	SignalAtFork bool `json:"signal_at_fork,omitempty"`
	// Requests says why container engine requests are not read, "" when
	// they are (or attribution is off).
	RequestsOff string `json:"requests_off,omitempty"`
	// Doomed counts the entries of the kernel's map of processes of
	// ended sessions it kills at fork and exec, and its capacity.
	Doomed    int `json:"doomed"`
	DoomedMax int `json:"doomed_max"`
}

// LeakStatus are the leaks the last metrics sample found (the metrics'
// mcptrace_orphaned_*, mcptrace_unowned_*, mcptrace_duplicate_servers,
// mcptrace_idle_servers), summed over the node.
type LeakStatus struct {
	// SampledAgoSeconds is how long ago the sample was taken; 0: none
	// yet, nothing below is known.
	SampledAgoSeconds float64 `json:"sampled_ago_seconds,omitempty"`
	// Orphaned are live members of ended sessions and generations;
	// OrphanedRSS their memory.
	Orphaned    int    `json:"orphaned_processes"`
	OrphanedRSS uint64 `json:"orphaned_rss_bytes"`
	// Unowned are leaked MCP servers no session owns (mcptrace orphans).
	Unowned    int    `json:"unowned_servers"`
	UnownedRSS uint64 `json:"unowned_rss_bytes"`
	// Duplicates are servers a live host started again while the old one
	// lives; Idle servers did no I/O for metrics.idle-after.
	Duplicates int `json:"duplicate_servers"`
	Idle       int `json:"idle_servers"`
}

// Problem is one warning or error the agent logged.
type Problem struct {
	At    time.Time `json:"at"`
	Level string    `json:"level"`
	// What is the log message with its attributes as key=value.
	What string `json:"what"`
	// Repeats counts the same message logged again since (the last At).
	Repeats int `json:"repeats,omitempty"`
}

// ContainerStatus is container attribution and the engine it asks.
type ContainerStatus struct {
	// Attribution is "on" or "off"; Reason says why it is off.
	Attribution string `json:"attribution"`
	Reason      string `json:"reason,omitempty"`
	Socket      string `json:"engine_socket,omitempty"`
	Engine      string `json:"engine_version,omitempty"`
	API         string `json:"api_version,omitempty"`
	// Claimed counts the containers sessions claim; Unattributed those
	// among them that will not be stopped (started from two sessions, or
	// not verified with the engine).
	Claimed      int `json:"claimed"`
	Unattributed int `json:"unattributed"`
}

// MetricsStatus describes the agent's Prometheus endpoint.
type MetricsStatus struct {
	// Address is where /metrics is served; "" when metrics are off or
	// the configured address could not be had (yet).
	Address string `json:"address"`
	// ListenError says why the configured address is not served (another
	// program holds it); the agent tries again every 10 s and enforces
	// meanwhile. ListenFailures counts the attempts that failed.
	ListenError    string `json:"listen_error,omitempty"`
	ListenFailures uint64 `json:"listen_failures_total,omitempty"`
	// SampleAgeSeconds is how long ago the last sample was taken, and
	// SampleSeconds how long it took; both 0 before the first.
	SampleAgeSeconds float64 `json:"sample_age_seconds,omitempty"`
	SampleSeconds    float64 `json:"sample_seconds,omitempty"`
}

// APIStatus describes the API socket's connections, limits and refusals.
type APIStatus struct {
	// Connections open by non-root users, and the caps on them.
	Connections          int `json:"connections"`
	MaxConnections       int `json:"max_connections"`
	MaxConnectionsPerUID int `json:"max_connections_per_uid"`
	// Connections refused over the total cap and over a uid's cap.
	RefusedTotalCap uint64 `json:"refused_total_cap_total"`
	RefusedUIDCap   uint64 `json:"refused_uid_cap_total"`
	// RefusedIdentity counts connections whose peer could not be bound
	// (it exited before the accept, or its uid is not the socket peer's).
	RefusedIdentity uint64 `json:"refused_identity_total"`
	// RefusedGone counts requests refused because the process that
	// opened their connection had exited, or its pid was reused, or it
	// changed uid.
	RefusedGone uint64 `json:"refused_gone_total"`
	// Oversize counts request bodies refused over the body limit.
	Oversize uint64 `json:"oversize_requests_total"`
	// RefusedHistoryBusy counts history requests refused because the
	// caller's uid, or all users, had the most running (historywork.go).
	RefusedHistoryBusy uint64 `json:"refused_history_busy_total"`
	// FDLimit is the agent's RLIMIT_NOFILE (0 on Windows, which has
	// none).
	FDLimit uint64 `json:"fd_limit"`
	// PeerIdentity says how a connection is bound to its process:
	// "pidfd" (SO_PEERPIDFD, kernel 6.5+) or "start-time" on Linux,
	// "process-handle" on Windows.
	PeerIdentity string `json:"peer_identity"`
	// Requests counts the requests served, by endpoint pattern ("GET
	// /v1/sessions"; "other" for paths no endpoint matched).
	Requests map[string]uint64 `json:"requests_total,omitempty"`
}

// EnforcerStatus are the enforcer's counters (enforcer.Stats) and the
// kernel's doom counters.
type EnforcerStatus struct {
	Endings uint64 `json:"endings_total"`
	Killed  uint64 `json:"killed_total"`
	Spared  uint64 `json:"spared_total"`
	// SparedPrivilege counts members spared because the session's owner
	// (not root) could not signal them itself; they are in Spared too.
	SparedPrivilege uint64 `json:"spared_privilege_boundary_total"`
	Refused         uint64 `json:"refused_total"`
	Failed          uint64 `json:"failed_total"`
	Survivors       uint64 `json:"survivors_total"`
	Escalated       uint64 `json:"escalated_total"`
	DoomErrors      uint64 `json:"doom_errors_total"`
	// DoomSparedExecs counts doomed processes that exec'd a program a
	// spare rule may protect and left doom alive (kernel counter, summed
	// over the pin sets the agent reads).
	DoomSparedExecs uint64 `json:"doom_spared_execs_total"`
}

// StateStatus describes the saved state (the agent's state.dir).
type StateStatus struct {
	Dir   string `json:"dir"`
	Bytes int64  `json:"bytes"`
	// CheckpointAgeSeconds is how long ago the last checkpoint was
	// written; the journal holds what happened since.
	CheckpointAgeSeconds float64 `json:"checkpoint_age_seconds"`
	JournalBytes         int64   `json:"journal_bytes"`
	JournalErrors        uint64  `json:"journal_errors_total"`
}

// StartStatus says what the agent found when it started.
type StartStatus struct {
	// Restored: the saved state of a previous agent was loaded.
	Restored bool `json:"restored"`
	// Problems are saved state that could not be used (moved aside).
	Problems []string `json:"problems,omitempty"`
	// JournalRecords were replayed after the checkpoint; TornRecords were
	// cut from its end (a crash mid-write).
	JournalRecords int `json:"journal_records"`
	TornRecords    int `json:"torn_records,omitempty"`
	// Drained counts events read from the previous agent's ring buffer:
	// what happened while no agent ran.
	Drained uint64 `json:"drained_events"`
	// StartedMeanwhile and GoneMeanwhile: processes /proc showed that the
	// saved graph lacked, and processes it held that were gone.
	StartedMeanwhile int `json:"started_meanwhile"`
	GoneMeanwhile    int `json:"gone_meanwhile"`
	// Resumed counts endings the previous agent had not finished.
	Resumed int `json:"resumed_endings"`
	// ServingAfterMS is the time from start to serving.
	ServingAfterMS float64 `json:"serving_after_ms"`
}

// Error is the body of every non-2xx answer.
type Error struct {
	Error string `json:"error"`
}
