// Package agent runs the node agent: it opens the kernel sensor, seeds the
// lineage graph from /proc while the sensor already buffers events (so no
// fork between the scan and the attach is missed), applies every event,
// repairs the graph from /proc whenever the kernel reports lost events,
// retires dead branches, and serves the API.
//
// cmd/mcptrace only turns configuration into Options and calls Run.
package agent
