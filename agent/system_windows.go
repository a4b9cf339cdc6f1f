package agent

import (
	"errors"
	"fmt"
	"path/filepath"

	"github.com/mcptrace/mcptrace/api"
	"github.com/mcptrace/mcptrace/enforcer"
	"github.com/mcptrace/mcptrace/lineage"
	"github.com/mcptrace/mcptrace/procfs"
	"github.com/mcptrace/mcptrace/sensor"
	"github.com/mcptrace/mcptrace/windows/owners"
	"github.com/mcptrace/mcptrace/windows/winproc"
)

// The system the agent runs on, Windows: processes are read from a
// snapshot (package winproc), on the kernel's boot clock, and each is
// owned by its token's owner in a table kept beside the state
// (package owners).

// The agent's words for what the system does: where it reads processes
// from, and what stays when it stops.
const (
	processSource  = "a process snapshot"
	stoppedMessage = "stopped; the ETW session ended with it, and the next agent seeds from a snapshot"
)

// ownersFile is the owners table's file in Options.StateDir.
const ownersFile = "owners.json"

// procReader: Windows processes come from one snapshot call.
type procReader struct{}

// openSystem secures the agent's directories (secureDir: what another
// user made there first is refused) and loads the owners table: the
// numbers saved sessions and records name owners by.
func (a *Agent) openSystem() error {
	dirs := []string{a.opts.StateDir}
	if a.opts.HistoryDir != "-" {
		dirs = append(dirs, a.opts.HistoryDir)
	}
	for _, d := range dirs {
		if err := secureDir(d); err != nil {
			return fmt.Errorf("agent directory: %w", err)
		}
		h, err := pinDir(d)
		if err != nil {
			return err
		}
		a.pins = append(a.pins, h)
	}
	t, err := owners.Load(filepath.Join(a.opts.StateDir, ownersFile))
	if err != nil {
		return fmt.Errorf("%w (move the file aside to start afresh: owners are numbered again, and saved sessions' owners with them)", err)
	}
	a.owners = t
	return nil
}

// closeSystem lets go of what openSystem holds.
func (a *Agent) closeSystem() {
	for _, p := range a.pins {
		p.Close()
	}
	a.pins = nil
}

// ownerOf is a token's owner number; owners.Unknown when it has none.
// A failure is logged, the first ones and then every thousandth: service
// accounts are never numbered, and are no news.
func (a *Agent) ownerOf(tok owners.Token) uint32 {
	uid, err := a.owners.Owner(tok)
	if err != nil && !errors.Is(err, owners.ErrNotNumbered) {
		if n := a.ownerFailures.Add(1); n <= 10 || n%1000 == 0 {
			a.log.Warn("a user could not be numbered: their processes are no session owner's", "sid", tok.SID, "failures", n, "err", err)
		}
	}
	return uid
}

// scanProcesses reads every process from a snapshot, to seed or repair
// the graph.
func (a *Agent) scanProcesses() ([]lineage.Snapshot, string, error) {
	if procfs.BootTimeNow() == 0 {
		return nil, "", errors.New("the boot time could not be read")
	}
	clock, err := winproc.SystemClock()
	if err != nil {
		return nil, "", err
	}
	entries, err := winproc.Snapshot()
	if err != nil {
		return nil, "", fmt.Errorf("process snapshot: %w", err)
	}
	return winproc.Snapshots(entries, clock, a.ownerOf), processSource, nil
}

// readProcess: Windows never reparents (a process keeps its parent's PID
// after the parent exits), so there is no current parent to learn.
func (a *Agent) readProcess(pid uint32) (lineage.Snapshot, error) {
	return lineage.Snapshot{}, errors.New("processes are not reparented on Windows")
}

// systemEnforcer has the enforcer read each member's owner from its
// token at termination time.
func (a *Agent) systemEnforcer(c *enforcer.Config) { c.Owner = a.ownerOf }

// systemDoomer: Windows has no doom (the enforcer ends processes
// through handles only).
func systemDoomer(*sensor.Sensor) enforcer.Doomer { return nil }

// systemSensor gives the ETW sensor the owners of the processes it sees.
func (a *Agent) systemSensor(o *sensor.Options) { o.Owner, o.ETW = a.ownerOf, a.opts.ETW }

// systemAPI gives the API the owners of its callers.
func (a *Agent) systemAPI(srv *api.Server) { srv.Owners = a.owners }
