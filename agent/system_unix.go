//go:build !windows

package agent

import (
	"fmt"
	"sync"

	"github.com/cilium/ebpf/btf"

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

// procReader is how the agent reads every process: the kernel's task
// iterator where the kernel runs it (loaded beside the sensor's
// programs, not after them), or /proc's files (err says why).
type procReader struct {
	// kernelTypes is the kernel's BTF, decoded once for the sensor's
	// load and the iterator's; dropped at the first scan, when both are
	// loaded (it is the start-up's largest garbage).
	kernelTypes *btf.Cache
	ready       chan struct{} // closed once tasks or err is set; nil: /proc only
	tasks       *sensor.Tasks
	err         error
	said        sync.Once // the reason for /proc's files is logged once
}

// openSystem starts loading the task iterator when the graph is of this
// node's /proc (another root is a test's or a container's view, which
// the kernel's task list is not).
func (a *Agent) openSystem() error {
	if a.opts.ProcRoot != procfs.DefaultRoot {
		return nil
	}
	a.procs.kernelTypes = btf.NewCache()
	a.procs.ready = make(chan struct{})
	go func(kernelTypes *btf.Cache) {
		defer close(a.procs.ready)
		a.procs.tasks, a.procs.err = sensor.OpenTasks(a.opts.ProcRoot, kernelTypes)
	}(a.procs.kernelTypes)
	return nil
}

// closeSystem lets go of what openSystem holds.
func (a *Agent) closeSystem() {
	if a.procs.ready == nil {
		return
	}
	<-a.procs.ready
	if a.procs.tasks != nil {
		a.procs.tasks.Close()
	}
}

// scanProcesses reads every process, to seed or repair the graph, and
// says how: from the kernel's task iterator where it runs, else from
// /proc's files (said once, with the reason).
func (a *Agent) scanProcesses() ([]lineage.Snapshot, string, error) {
	if a.procs.ready != nil {
		<-a.procs.ready
		a.procs.kernelTypes = nil // the sensor has loaded too
		if a.procs.tasks != nil {
			snaps, fromFiles, err := a.procs.tasks.Scan()
			if err != nil {
				return nil, "", fmt.Errorf("read the kernel's task list: %w", err)
			}
			return snaps, fmt.Sprintf("the kernel's task iterator, %d from %s's files", fromFiles, a.opts.ProcRoot), nil
		}
		a.procs.said.Do(func() {
			a.log.Info("processes are read from /proc's files, a dozen system calls each: the kernel's task iterator is not available", "reason", a.procs.err)
		})
	}
	snaps, err := procfs.Scan(a.opts.ProcRoot)
	if err != nil {
		return nil, "", fmt.Errorf("read %s: %w", a.opts.ProcRoot, err)
	}
	return snaps, "the files of " + a.opts.ProcRoot, nil
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

// systemSensor adds what the system's sensor needs to o: the kernel's
// BTF the task iterator's load shares.
func (a *Agent) systemSensor(o *sensor.Options) { o.KernelTypes = a.procs.kernelTypes }

// systemAPI adds what the system's API server needs to srv.
func (a *Agent) systemAPI(*api.Server) {}
