//go:build !windows

package agent

import (
	"fmt"

	"github.com/mcptrace/mcptrace/api"
	"github.com/mcptrace/mcptrace/enforcer"
	"github.com/mcptrace/mcptrace/lineage"
	"github.com/mcptrace/mcptrace/procfs"
	"github.com/mcptrace/mcptrace/sensor"
)

// The system the agent runs on, Linux: processes are read from /proc
// (package procfs), owners are uids, and the sensor and the API need
// nothing more than Options says.

// The agent's words for what the system does: where it reads processes
// from, and what stays when it stops.
const (
	processSource  = "/proc"
	stoppedMessage = "stopped; the kernel programs stay attached for the next agent (mcptrace uninstall removes them)"
)

// openSystem prepares what the system needs before the sensor opens.
func (a *Agent) openSystem() error { return nil }

// closeSystem lets go of what openSystem holds.
func (a *Agent) closeSystem() {}

// scanProcesses reads every process, to seed or repair the graph.
func (a *Agent) scanProcesses() ([]lineage.Snapshot, error) {
	snaps, err := procfs.Scan(a.opts.ProcRoot)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", a.opts.ProcRoot, err)
	}
	return snaps, nil
}

// readProcess reads one process as it is now: its current parent
// (reparenting happens without an event).
func (a *Agent) readProcess(pid uint32) (lineage.Snapshot, error) {
	return procfs.Read(a.opts.ProcRoot, pid)
}

// systemEnforcer adds what the system's enforcer needs to c.
func (a *Agent) systemEnforcer(*enforcer.Config) {}

// systemDoomer is what dooms the members of ended sessions in the
// kernel: the sensor.
func systemDoomer(s *sensor.Sensor) enforcer.Doomer { return s }

// systemSensor adds what the system's sensor needs to o.
func (a *Agent) systemSensor(*sensor.Options) {}

// systemAPI adds what the system's API server needs to srv.
func (a *Agent) systemAPI(*api.Server) {}
