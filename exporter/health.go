package exporter

// Health is the agent's own state, read at every scrape. Counters count
// since the agent's saved state began where the agent keeps them (events,
// losses, kills), else since it started.
type Health struct {
	AliveProcesses, ExitedProcesses int
	ImageBytes                      int
	Repairs                         uint64
	// Gaps counts what the graph had to fill in, by gap kind; Removed,
	// the processes it let go, by why ("retired", "evicted", "folded",
	// "dropped").
	Gaps, Removed map[string]uint64
	// Events applied, lost and recovered, by kind.
	Events, Lost, Recovered map[string]uint64
	Maps                    []MapUsage
	// Requests by endpoint pattern; Refused by reason.
	Requests, Refused map[string]uint64
	// Kills by reason and result class.
	Kills   map[KillKey]uint64
	Endings Histogram
	// PendingEndings are endings decided and not finished.
	PendingEndings int
	JournalErrors  uint64
	// ContainerAttribution: containers sessions start are attributed and
	// ended with them (the engine answers, the kernel reads requests).
	ContainerAttribution bool
	// Containers are the containers sessions claim, by attribution
	// ("attributed", "unattributed": contested or not verified).
	Containers map[string]int
	// ContainerClaims counts container starts by what became of them
	// ("claimed", "contested", "refused", "ignored", "unread", and
	// "over-uid-budget": unread because the sender's uid sent more than
	// its budget).
	ContainerClaims map[string]uint64
	// History: the agent keeps a history. HistoryRecords counts records
	// by result ("written", "dropped", "failed", "evicted": removed to
	// make room, of the uid that held the most); HistoryBytes is the
	// store's file size.
	History        bool
	HistoryRecords map[string]uint64
	HistoryBytes   int64
}

// MapUsage is how full one BPF map is.
type MapUsage struct {
	Name         string
	Entries, Max int
}

// KillKey labels the enforcer's kill counts.
type KillKey struct{ Reason, Result string }

// Histogram is a histogram with per-bucket (not cumulative) counts: Counts
// has one more entry than Bounds, for the observations above them all.
type Histogram struct {
	Bounds []float64
	Counts []uint64
	Count  uint64
	Sum    float64
}
