package exporter

import (
	"cmp"
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/mcptrace/mcptrace/internal/version"
)

const namespace = "mcptrace"

// Label bounds: at most this many server names and host kinds per scrape;
// the rest fold into OtherLabel.
const (
	MaxServerNames = 100
	MaxHostKinds   = 32
	OtherLabel     = "other"
	// MaxNamesPerOwner bounds the server names one session owner puts on
	// the endpoint: another user's names stay visible however many one
	// user makes up.
	MaxNamesPerOwner = 10
)

// Source gives the collector what a scrape shows: the last sampled
// Picture and the agent's Health now. It is called once per scrape.
type Source func() (Picture, Health)

func desc(subsystem, name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(prometheus.BuildFQName(namespace, subsystem, name), help, labels, nil)
}

var (
	descSessions        = desc("", "sessions", "Sessions the agent tracks, by state (ended ones while they stay listed) and the kind of host they run under.", "state", "host_kind")
	descMembers         = desc("session", "members", "Live members of active sessions by role (host, wrapper, server, container, tool, other).", "host_kind", "role")
	descServers         = desc("", "servers", "Live MCP server processes of active sessions, by host kind and server.", "host_kind", "server")
	descServerRSS       = desc("server", "resident_memory_bytes", "Resident memory of live MCP servers of active sessions and of every live member running for them (wrappers, what the server started).", "host_kind", "server")
	descServerCPU       = desc("server", "cpu_seconds", "CPU time (user and system) used so far by the live MCP servers of active sessions and the members running for them; it drops when they exit.", "host_kind", "server")
	descOrphaned        = desc("", "orphaned_processes", "Live processes of ended sessions and ended generations: what the enforcer could not, may not (audit mode, privilege boundary) or did not yet end. server is the server they are or run for, empty for none.", "host_kind", "server")
	descOrphanedRSS     = desc("", "orphaned_resident_memory_bytes", "Resident memory of the orphaned processes.", "host_kind", "server")
	descDuplicates      = desc("", "duplicate_servers", "Live MCP servers started again by a live host while an earlier instance of the same server lives: instances beyond the first per session, summed.", "host_kind", "server")
	descIdle            = desc("", "idle_servers", "Live MCP servers of active sessions that did no read or write for metrics.idle-after.", "host_kind", "server")
	descUnowned         = desc("", "unowned_servers", "Leaked MCP servers that no session owns (mcptrace orphans): by the host kind that started them (unknown when it is gone or named by no host rule), the evidence (host-gone, superseded, client-gone: a docker run -i container whose client went) and how sure it is (certain, likely). Not the orphaned processes of ended sessions.", "host_kind", "kind", "confidence")
	descUnownedProcs    = desc("", "unowned_processes", "Live processes of the leaked MCP servers no session owns, each counted from the top of its leaked chain (its wrappers) down.", "host_kind", "kind", "confidence")
	descUnownedRSS      = desc("", "unowned_resident_memory_bytes", "Resident memory of the processes of mcptrace_unowned_processes.", "host_kind", "kind", "confidence")
	descSampleDuration  = desc("exporter", "sample_duration_seconds", "How long the last sample of sessions, roles and /proc took.")
	descSampleTimestamp = desc("exporter", "last_sample_timestamp_seconds", "Unix time of the last sample.")
	descFolded          = desc("exporter", "folded_label_values", "Label values of the last sample summed under \"other\" to bound the series (server, host_kind).", "label")

	descProcesses    = desc("lineage", "processes", "Processes in the lineage graph, alive or exited (exited ones are kept while something they created lives, or for lineage.retention).", "state")
	descImageBytes   = desc("lineage", "image_bytes", "Bytes the exec images (file names and command lines) of the lineage graph hold, by the graph's own accounting.")
	descRepairs      = desc("lineage", "repairs_total", "Repairs of the lineage graph from /proc after lost events.")
	descGaps         = desc("lineage", "gaps_total", "What the lineage graph had to fill in, by kind of gap.", "gap")
	descRemoved      = desc("lineage", "removed_processes_total", "Exited processes the lineage graph let go, by why: retired, evicted (over a cap), folded (out of a chain of exited creators), dropped (no session held them).", "why")
	descEvents       = desc("bpf", "events_total", "Kernel events applied to the lineage graph, by kind.", "kind")
	descLost         = desc("bpf", "lost_events_total", "Kernel events the BPF programs could not send, by kind (each loss is repaired from /proc).", "kind")
	descRecovered    = desc("bpf", "recovered_events_total", "Kernel events the primary BPF program missed and a backup program delivered, by kind.", "kind")
	descMapEntries   = desc("bpf", "map_entries", "Entries in a BPF map.", "map")
	descMapMax       = desc("bpf", "map_max_entries", "Capacity of a BPF map.", "map")
	descRequests     = desc("api", "requests_total", "API requests served, by endpoint.", "route")
	descRefused      = desc("api", "refused_total", "API connections and requests refused, by reason.", "reason")
	descKills        = desc("enforcer", "kills_total", "Members of ended sessions and generations, by why they ended and what the enforcer did to each.", "reason", "result")
	descEndings      = desc("enforcer", "ending_duration_seconds", "Time from a session's (or generation's) end to the death of its last member that the enforcer ended.")
	descPending      = desc("enforcer", "pending_endings", "Endings of sessions and generations the enforcer is still working on.")
	descJournal      = desc("state", "journal_errors_total", "Appends to the state journal that failed (the agent checkpoints instead).")
	descAttribution  = desc("container", "attribution", "1 when containers that session members start are attributed to their sessions and ended with them; 0 when attribution is off (mcptrace status says why: no engine, engine not answering, no kernel hook).")
	descContainers   = desc("", "containers", "Containers session members started, by attribution: attributed (ended with the session) or unattributed (started from two sessions, or not verified with the engine: never ended).", "attribution")
	descClaims       = desc("container", "claims_total", "Container starts the kernel read from container clients, by what became of them: claimed by a session, contested (another session claimed it too), refused (over a bound), ignored (sent from no session), unread (the kernel's client table was full or the request could not be read), over-uid-budget (unread: its sender's uid sent more than its budget, which blinds that user alone).", "result")
	descHistory      = desc("history", "records_total", "Records handed to the history journal, by result: written (events and session records on disk), dropped (the queue to the writer was full), failed (the store refused the batch). Dropped and failed are lost to the history.", "result")
	descHistoryBytes = desc("history", "bytes", "The history store's file size on disk (bounded by history.max-bytes).")
	descHistoryOn    = desc("history", "enabled", "1 when the agent keeps a history (history.dir); 0 when it is off or its store could not be opened (mcptrace status says why).")
	descBuildInfo    = desc("", "build_info", "Always 1; the labels say which build of mcptrace runs.", "version", "revision", "goversion")
)

// collector turns a Source into metrics.
type collector struct {
	src   Source
	build [3]string
}

func newCollector(src Source) *collector {
	b := version.Get()
	return &collector{src: src, build: [3]string{b.Version, b.Revision, b.GoVersion}}
}

// Describe sends every descriptor.
func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descSessions, descMembers, descServers, descServerRSS, descServerCPU, descOrphaned,
		descOrphanedRSS, descDuplicates, descIdle, descUnowned, descUnownedProcs, descUnownedRSS, descSampleDuration, descSampleTimestamp, descFolded, descProcesses,
		descImageBytes, descRepairs, descGaps, descRemoved, descEvents, descLost, descRecovered, descMapEntries, descMapMax,
		descRequests, descRefused, descKills, descEndings, descPending, descJournal, descAttribution, descContainers, descClaims, descHistory, descHistoryBytes, descHistoryOn, descBuildInfo} {
		ch <- d
	}
}

// Collect sends the metrics of one scrape.
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	pic, h := c.src()
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
	}
	folded := c.collectPicture(pic, gauge)
	for k, u := range pic.Unowned {
		gauge(descUnowned, float64(u.Servers), k.HostKind, k.Kind, k.Confidence)
		gauge(descUnownedProcs, float64(u.Processes), k.HostKind, k.Kind, k.Confidence)
		gauge(descUnownedRSS, float64(u.RSSBytes), k.HostKind, k.Kind, k.Confidence)
	}
	gauge(descFolded, float64(folded.servers), "server")
	gauge(descFolded, float64(folded.hostKinds), "host_kind")

	gauge(descProcesses, float64(h.AliveProcesses), "alive")
	gauge(descProcesses, float64(h.ExitedProcesses), "exited")
	gauge(descImageBytes, float64(h.ImageBytes))
	counter(descRepairs, float64(h.Repairs))
	for _, m := range []struct {
		d *prometheus.Desc
		v map[string]uint64
	}{{descGaps, h.Gaps}, {descRemoved, h.Removed}, {descEvents, h.Events}, {descLost, h.Lost}, {descRecovered, h.Recovered},
		{descRequests, h.Requests}, {descRefused, h.Refused}} {
		for k, v := range m.v {
			counter(m.d, float64(v), k)
		}
	}
	for _, m := range h.Maps {
		gauge(descMapEntries, float64(m.Entries), m.Name)
		gauge(descMapMax, float64(m.Max), m.Name)
	}
	for k, v := range h.Kills {
		counter(descKills, float64(v), k.Reason, k.Result)
	}
	if hist := h.Endings; len(hist.Counts) == len(hist.Bounds)+1 {
		buckets := make(map[float64]uint64, len(hist.Bounds))
		var cum uint64
		for i, b := range hist.Bounds {
			cum += hist.Counts[i]
			buckets[b] = cum
		}
		ch <- prometheus.MustNewConstHistogram(descEndings, hist.Count, hist.Sum, buckets)
	} else {
		ch <- prometheus.MustNewConstHistogram(descEndings, 0, 0, nil)
	}
	gauge(descPending, float64(h.PendingEndings))
	counter(descJournal, float64(h.JournalErrors))
	attribution := 0.0
	if h.ContainerAttribution {
		attribution = 1
	}
	gauge(descAttribution, attribution)
	for k, v := range h.Containers {
		gauge(descContainers, float64(v), k)
	}
	for k, v := range h.ContainerClaims {
		counter(descClaims, float64(v), k)
	}
	on := 0.0
	if h.History {
		on = 1
		for k, v := range h.HistoryRecords {
			counter(descHistory, float64(v), k)
		}
		gauge(descHistoryBytes, float64(h.HistoryBytes))
	}
	gauge(descHistoryOn, on)
	gauge(descBuildInfo, 1, c.build[:]...)
}

type foldCounts struct{ servers, hostKinds int }

// collectPicture sends the picture's metrics with server names and host
// kinds bounded: the busiest keep their names, the rest are summed under
// OtherLabel.
func (c *collector) collectPicture(pic Picture, gauge func(*prometheus.Desc, float64, ...string)) foldCounts {
	var fc foldCounts
	hostKinds := map[string]int{}
	for k, n := range pic.Sessions {
		hostKinds[k.HostKind] += n
	}
	for k, s := range pic.Servers {
		hostKinds[k.HostKind] += s.Live + s.Orphaned
	}
	keepHost := keepBusiest(hostKinds, MaxHostKinds)
	fc.hostKinds = len(hostKinds) - len(keepHost)
	host := func(h string) string {
		if keepHost[h] {
			return h
		}
		return OtherLabel
	}
	keepName, allNames := keepServerNames(pic.Servers)
	fc.servers = allNames - len(keepName)

	sessions := map[SessionKey]int{}
	for k, n := range pic.Sessions {
		sessions[SessionKey{k.Active, host(k.HostKind)}] += n
	}
	for k, n := range sessions {
		state := "ended"
		if k.Active {
			state = "active"
		}
		gauge(descSessions, float64(n), state, k.HostKind)
	}
	members := map[MemberKey]int{}
	for k, n := range pic.Members {
		members[MemberKey{host(k.HostKind), k.Role}] += n
	}
	for k, n := range members {
		gauge(descMembers, float64(n), k.HostKind, k.Role.String())
	}
	servers := map[ServerKey]*ServerStats{}
	for k, s := range pic.Servers {
		fk := ServerKey{host(k.HostKind), k.Server}
		if !keepName[k.Server] {
			fk.Server = OtherLabel
		}
		t := servers[fk]
		if t == nil {
			t = &ServerStats{}
			servers[fk] = t
		}
		t.add(s)
	}
	for k, s := range servers {
		if s.Live > 0 || s.RSSBytes > 0 {
			gauge(descServers, float64(s.Live), k.HostKind, k.Server)
			gauge(descServerRSS, float64(s.RSSBytes), k.HostKind, k.Server)
			gauge(descServerCPU, s.CPUSeconds, k.HostKind, k.Server)
			gauge(descDuplicates, float64(s.Duplicates), k.HostKind, k.Server)
			gauge(descIdle, float64(s.Idle), k.HostKind, k.Server)
		}
		if s.Orphaned > 0 {
			gauge(descOrphaned, float64(s.Orphaned), k.HostKind, k.Server)
			gauge(descOrphanedRSS, float64(s.OrphanedRSS), k.HostKind, k.Server)
		}
	}
	if !pic.At.IsZero() {
		gauge(descSampleDuration, pic.Took.Seconds())
		gauge(descSampleTimestamp, float64(pic.At.UnixNano())/1e9)
	}
	return fc
}

// keepBusiest returns the keys of counts to keep by name: the max with
// the highest counts (ties by name), and "" always (it is no name).
func keepBusiest(counts map[string]int, max int) map[string]bool {
	keys := make([]string, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b string) int {
		if c := cmp.Compare(counts[b], counts[a]); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
	keep := make(map[string]bool, min(len(keys), max))
	for _, k := range keys {
		if k == "" || len(keep) < max {
			keep[k] = true
		}
	}
	return keep
}

// keepServerNames returns the server names shown by name, and how many
// names there are: each owner's MaxNamesPerOwner busiest names (those
// with orphans first), then of those the MaxServerNames with orphans
// first, then held by the most owners, then with the most processes.
// "" is always kept (it is no name). The rest fold into OtherLabel.
func keepServerNames(servers map[ServerKey]*ServerStats) (map[string]bool, int) {
	type score struct {
		orphaned, processes int
		owners              map[uint32]bool
	}
	byName := map[string]*score{}
	byOwner := map[uint32]map[string]OwnerCount{}
	for k, s := range servers {
		sc := byName[k.Server]
		if sc == nil {
			sc = &score{owners: map[uint32]bool{}}
			byName[k.Server] = sc
		}
		for o, c := range s.Owners {
			sc.orphaned += c.Orphaned
			sc.processes += c.Processes
			sc.owners[o] = true
			if byOwner[o] == nil {
				byOwner[o] = map[string]OwnerCount{}
			}
			t := byOwner[o][k.Server]
			t.Processes += c.Processes
			t.Orphaned += c.Orphaned
			byOwner[o][k.Server] = t
		}
	}
	candidates := map[string]bool{}
	for _, names := range byOwner {
		list := make([]string, 0, len(names))
		for n := range names {
			list = append(list, n)
		}
		slices.SortFunc(list, func(a, b string) int {
			x, y := names[a], names[b]
			return cmp.Or(cmp.Compare(min(y.Orphaned, 1), min(x.Orphaned, 1)), cmp.Compare(y.Processes, x.Processes), strings.Compare(a, b))
		})
		for _, n := range list[:min(len(list), MaxNamesPerOwner)] {
			candidates[n] = true
		}
	}
	list := make([]string, 0, len(candidates))
	for n := range candidates {
		list = append(list, n)
	}
	slices.SortFunc(list, func(a, b string) int {
		x, y := byName[a], byName[b]
		return cmp.Or(cmp.Compare(min(y.orphaned, 1), min(x.orphaned, 1)), cmp.Compare(len(y.owners), len(x.owners)),
			cmp.Compare(y.processes, x.processes), strings.Compare(a, b))
	})
	keep := map[string]bool{"": true}
	for _, n := range list {
		if len(keep) > MaxServerNames {
			break
		}
		keep[n] = true
	}
	if _, ok := byName[""]; !ok {
		return keep, len(byName) + 1
	}
	return keep, len(byName)
}
