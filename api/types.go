package api

import "github.com/mcptrace/mcptrace/lineage"

// ProcessList is the answer of the process endpoints.
type ProcessList struct {
	// Now is CLOCK_BOOTTIME in ns when the answer was made, to compute ages.
	Now       uint64            `json:"now_ns"`
	Processes []lineage.Process `json:"processes"`
}

// Status describes the agent's health: what it tracks and what it lost.
type Status struct {
	Now     uint64 `json:"now_ns"`
	Tracked int    `json:"tracked_processes"`
	Alive   int    `json:"alive_processes"`
	Exited  int    `json:"exited_processes"`
	Retired uint64 `json:"retired_processes_total"`
	Repairs uint64 `json:"repairs_total"`
	// The lineage graph's caps (lineage.max-images, lineage.max-nodes):
	// exec images dropped from the middle of long exec chains, exited
	// processes evicted oldest first, processes admitted over the cap
	// because nothing was left to evict, and the bytes the kept images
	// hold by the graph's own accounting.
	ImagesDropped uint64 `json:"dropped_images_total"`
	Evicted       uint64 `json:"evicted_processes_total"`
	OverCap       uint64 `json:"over_cap_processes_total"`
	ImageBytes    int    `json:"image_bytes"`
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
