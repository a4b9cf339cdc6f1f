// Package exporter serves the agent's metrics to Prometheus: the node's
// picture of agent hosts, their MCP servers and what leaked (sessions,
// members by role, servers with their memory and CPU, orphaned processes,
// duplicate and idle servers), and the agent's own health (events, losses,
// repairs, graph and map sizes, API requests and refusals, kills, the time
// endings take).
//
// The picture is computed elsewhere (the agent samples the lineage graph,
// the sessions and /proc every metrics.sample-interval) and handed to
// Build as plain SessionView values; Build only aggregates. The collector
// turns the last Picture and a Health read at scrape time into constant
// metrics on a private registry, so a scrape never walks the graph and
// its cost does not grow with the processes tracked.
//
// Labels are bounded: host_kind is a session's origin (a host rule's name,
// "run", "exec" or "api"), server a server identity from package roles,
// role one of roles.All. At most MaxServerNames server names and
// MaxHostKinds host kinds are shown per scrape, the busiest first; the
// rest are summed under "other" and counted in
// mcptrace_exporter_folded_label_values. No metric has a pid, a command
// line, an environment value, a session ID or a uid as a label.
//
// What exporter does not do: read /proc or the graph, decide roles or
// identities (package roles), kill anything (a superseded server is ended
// by the agent through the enforcer), or authenticate scrapers: it
// listens where metrics.listen-address says (loopback by default), and
// anyone who can reach that address reads the node-wide counts. It never
// imports the enforcer.
package exporter
