package sensor

import (
	"testing"

	"github.com/mcptrace/mcptrace/bpf"
)

// BenchmarkDecode prices turning ring buffer records into events, the
// first user-space step of every fork, exec and exit on the node: one
// fork, one exec of a typical MCP server command line and one exit per
// iteration.
//
//	go test -run '^$' -bench Decode -count 10 ./sensor/ | benchstat -
func BenchmarkDecode(b *testing.B) {
	argv := []byte("node\x00/usr/lib/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js\x00/home/user/project\x00")
	recs := [][]byte{
		encodeRecord(bpf.McptraceEventKindEVENT_FORK, 0, "node", "", 0, nil),
		encodeRecord(bpf.McptraceEventKindEVENT_EXEC, 0, "node", "/usr/bin/node", uint32(len(argv)), argv),
		encodeRecord(bpf.McptraceEventKindEVENT_EXIT, 0, "node", "", 0, nil),
	}
	var d decoder
	b.ReportAllocs()
	for b.Loop() {
		for _, raw := range recs {
			if _, err := d.decodeRecord(raw); err != nil {
				b.Fatal(err)
			}
		}
	}
}
