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
	// Events applied and events the kernel could not send, per kind.
	Events map[string]uint64 `json:"events_total"`
	Lost   map[string]uint64 `json:"lost_events_total"`
	// Recovered counts events the kernel skipped the primary program for
	// and the backup program delivered (preemptible tracepoints): not
	// lost, shown so a rising number is visible.
	Recovered map[string]uint64 `json:"recovered_events_total"`
	// Gaps counts what the graph had to fill in, per gap kind.
	Gaps map[string]uint64 `json:"gaps_total"`
}

// Error is the body of every non-2xx answer.
type Error struct {
	Error string `json:"error"`
}
