package bpf

import (
	"testing"

	"github.com/mcptrace/mcptrace/lineage"
)

// TestKernelAndGoShareTheClockTick: the programs compare doomed start
// times in ticks of CLOCK_TICK_NS (events.h); the agent writes those ticks
// with lineage.ID.Tick. A different tick on either side would make every
// doomed identity miss (no kernel kill) or match the wrong process.
func TestKernelAndGoShareTheClockTick(t *testing.T) {
	if got := uint64(McptraceClockTickCLOCK_TICK_NS); got != lineage.TickNS {
		t.Errorf("events.h CLOCK_TICK_NS = %d, lineage.TickNS = %d", got, lineage.TickNS)
	}
}
