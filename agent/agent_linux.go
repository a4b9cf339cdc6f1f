package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcptrace/mcptrace/api"
	"github.com/mcptrace/mcptrace/enforcer"
	"github.com/mcptrace/mcptrace/lineage"
	"github.com/mcptrace/mcptrace/procfs"
	"github.com/mcptrace/mcptrace/sensor"
	"github.com/mcptrace/mcptrace/sessions"
)

// Options configure an Agent. Zero values take the documented defaults.
type Options struct {
	Socket         string        // default /run/mcptrace/mcptrace.sock
	SocketMode     os.FileMode   // default 0666 (see package api)
	RingBufferSize int           // bytes, default 8 MiB
	TraceFS, BPFFS string        // mounted when missing
	ProcRoot       string        // default /proc
	Retention      time.Duration // default 5m
	RepairInterval time.Duration // how often lost counters are checked, default 1s
	// Sessions says which processes are session roots. The zero value
	// matches no host (no rules): only `mcptrace run`/`exec` tags and the
	// API declare roots. cmd/mcptrace turns the default rules on.
	Sessions sessions.Config
	// Enforcer says what happens to the members of ended sessions.
	Enforcer enforcer.Config
	Logger   *slog.Logger
}

func (o *Options) defaults() {
	if o.Socket == "" {
		o.Socket = "/run/mcptrace/mcptrace.sock"
	}
	if o.SocketMode == 0 {
		o.SocketMode = 0o666
	}
	if o.ProcRoot == "" {
		o.ProcRoot = "/proc"
	}
	if o.Retention == 0 {
		o.Retention = 5 * time.Minute
	}
	if o.RepairInterval == 0 {
		o.RepairInterval = time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
}

// Agent owns the sensor, the graph and the API server.
type Agent struct {
	opts    Options
	log     *slog.Logger
	graph   *lineage.Graph
	sensor  *sensor.Sensor
	tracker *sessions.Tracker
	enf     *enforcer.Enforcer
	// endCtx bounds enforcement; it outlives Run's context by a grace so
	// that an agent stopping mid-kill finishes the session it was ending.
	endCtx    context.Context
	endCancel context.CancelFunc
	ending    sync.WaitGroup
	reportsMu sync.Mutex
	reports   map[string]enforcer.Report
	order     []string // report keys, oldest first

	events    [4]atomic.Uint64 // applied, by lineage.EventKind
	decodeErr atomic.Uint64
	mu        sync.Mutex
	lost      map[lineage.EventKind]uint64 // last seen kernel counters
	recovered map[lineage.EventKind]uint64 // events the backup programs delivered
	// reconciled: the start-up repair ran (see checkLost).
	reconciled bool
	ready      chan struct{}
}

// New returns an agent that has not started yet. It fails on invalid
// session rules or enforcer configuration, never silently falling back.
func New(opts Options) (*Agent, error) {
	opts.defaults()
	if err := opts.Enforcer.Validate(); err != nil {
		return nil, fmt.Errorf("enforcer configuration: %w", err)
	}
	a := &Agent{
		opts:  opts,
		log:   opts.Logger.With("component", "agent"),
		graph: lineage.New(lineage.Config{Retention: opts.Retention, TickNS: procfs.TickNS}),
		lost:  map[lineage.EventKind]uint64{},
		ready: make(chan struct{}),
	}
	if opts.Sessions.Now == nil {
		opts.Sessions.Now = procfs.BootTimeNow
	}
	var err error
	a.tracker, err = sessions.NewTracker(a.graph, opts.Sessions, opts.Logger.With("component", "sessions"))
	if err != nil {
		return nil, err
	}
	return a, nil
}

// Sessions is the session tracker.
func (a *Agent) Sessions() *sessions.Tracker { return a.tracker }

// Enforcer is the enforcer; nil before Run.
func (a *Agent) Enforcer() *enforcer.Enforcer { return a.enf }

// Socket is the API socket path.
func (a *Agent) Socket() string { return a.opts.Socket }

// Graph is the live lineage graph.
func (a *Agent) Graph() *lineage.Graph { return a.graph }

// Ready is closed once the graph is seeded and the API listens.
func (a *Agent) Ready() <-chan struct{} { return a.ready }

// Run starts the agent and blocks until ctx ends or a part fails.
func (a *Agent) Run(ctx context.Context) error {
	s, err := sensor.Open(sensor.Options{
		RingBufferSize: a.opts.RingBufferSize,
		TraceFS:        a.opts.TraceFS,
		BPFFS:          a.opts.BPFFS,
		Logger:         a.opts.Logger,
	})
	if err != nil {
		return err
	}
	a.sensor = s
	defer s.Close()
	a.enf = enforcer.New(a.opts.Enforcer, s, a.opts.Logger.With("component", "enforcer"))
	if cfg := a.enf.Config(); cfg.Mode == enforcer.ModeAudit {
		a.log.Warn("audit mode: sessions are tracked and ended, nothing is signalled")
	}
	if pid := a.opts.Sessions.WithinPID; pid != 0 {
		a.log.Info("sessions narrowed to one subtree: processes outside it begin and end no session", "within_pid", pid)
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	a.endCtx, a.endCancel = context.WithCancel(context.Background())
	defer a.endCancel()
	var wg sync.WaitGroup
	errc := make(chan error, 3)

	// The sensor buffers from Open on; consume before scanning /proc so a
	// process forked during the scan is seen by one or the other (or both,
	// which the graph merges by identity).
	wg.Add(1)
	go func() {
		defer wg.Done()
		errc <- a.consume()
	}()

	start := time.Now()
	readAt := procfs.BootTimeNow()
	snaps, err := procfs.Scan(a.opts.ProcRoot)
	if err != nil {
		return fmt.Errorf("seed from %s: %w", a.opts.ProcRoot, err)
	}
	a.graph.Seed(snaps, readAt)
	a.log.Info("seeded from /proc", "processes", len(snaps), "took", time.Since(start).Round(time.Millisecond))
	a.endSessions(a.tracker.Scan())
	for _, s := range a.tracker.Sessions() {
		a.log.Info("session found at start", "session", s.ID, "origin", s.Origin, "root", s.Root.PID)
	}

	l, err := api.Listen(a.opts.Socket, a.opts.SocketMode)
	if err != nil {
		return err
	}
	srv := &api.Server{
		Graph:    a.graph,
		Sessions: a.tracker,
		Enforcer: a.enf,
		End:      a.endSessions,
		Report:   a.Report,
		Refresh:  a.refreshParents,
		Status:   a.Status,
		Now:      procfs.BootTimeNow,
		Log:      a.opts.Logger.With("component", "api"),
	}
	wg.Add(2)
	go func() {
		defer wg.Done()
		errc <- srv.Serve(ctx, l)
	}()
	go func() {
		defer wg.Done()
		a.maintain(ctx)
	}()
	a.log.Info("serving", "socket", a.opts.Socket, "mode", fmt.Sprintf("%#o", a.opts.SocketMode))
	close(a.ready)

	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	cancel()
	s.Close() // unblocks consume
	wg.Wait()
	a.finishEnding(10 * time.Second)
	os.Remove(a.opts.Socket)
	if err != nil && !errors.Is(err, sensor.ErrClosed) {
		return err
	}
	return nil
}

// consume applies kernel events to the graph until the sensor closes.
func (a *Agent) consume() error {
	debug := a.log.Enabled(context.Background(), slog.LevelDebug-4)
	for {
		ev, err := a.sensor.Read()
		if errors.Is(err, sensor.ErrClosed) {
			return nil
		}
		if err != nil {
			// A malformed record is a bug to report, not a reason to stop
			// tracking the node.
			a.decodeErr.Add(1)
			a.log.Error("skipping undecodable record", "err", err)
			continue
		}
		if debug {
			a.log.Debug("event", "kind", ev.Kind.String(), "pid", ev.Proc.PID, "start_ns", ev.Proc.Start, "comm", ev.Comm, "file", filepath.Base(ev.Filename), "argc", len(ev.Argv))
		}
		a.graph.Apply(ev)
		a.events[ev.Kind&3].Add(1)
		if acts := a.tracker.Observe(ev); len(acts) > 0 {
			a.endSessions(acts)
		}
	}
}

// maintain checks the kernel's lost counters and repairs the graph after
// losses, and retires dead branches.
func (a *Agent) maintain(ctx context.Context) {
	t := time.NewTicker(a.opts.RepairInterval)
	defer t.Stop()
	retire := time.NewTicker(max(a.opts.Retention/10, time.Second))
	defer retire.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := a.checkLost(); err != nil {
				a.log.Error("lost-event check failed", "err", err)
			}
		case <-retire.C:
			now := procfs.BootTimeNow()
			a.endSessions(a.tracker.Sweep(now))
			if n := a.graph.Retire(now); n > 0 {
				a.log.Debug("retired dead branches", "processes", n)
			}
		}
	}
}

// checkLost repairs the graph from /proc when the kernel dropped events
// since the last check. Losses are logged and counted, never hidden.
func (a *Agent) checkLost() error {
	lost, err := a.sensor.Lost()
	if err != nil {
		return err
	}
	recovered, err := a.sensor.Recovered()
	if err != nil {
		return err
	}
	a.mu.Lock()
	a.recovered = recovered
	var grew []any
	for k, n := range lost {
		if n > a.lost[k] {
			grew = append(grew, k.String(), n-a.lost[k])
		}
	}
	a.lost = lost
	startup := !a.reconciled
	a.reconciled = true
	a.mu.Unlock()
	// One repair after start-up even without a loss: a process whose exit
	// tracepoint fired just before the programs were attached still looks
	// alive in /proc until exit_notify, so the seed can take it for alive
	// and no exit event will ever come.
	if len(grew) == 0 && !startup {
		return nil
	}
	readAt := procfs.BootTimeNow()
	snaps, err := procfs.Scan(a.opts.ProcRoot)
	if err != nil {
		return fmt.Errorf("repair from %s: %w", a.opts.ProcRoot, err)
	}
	res := a.graph.Repair(snaps, readAt)
	a.endSessions(a.tracker.Scan())
	switch {
	case len(grew) > 0:
		a.log.Warn("kernel lost events; graph repaired from /proc",
			append(grew, "added", res.Added, "marked_exited", res.MarkedExited)...)
	case res.Added+res.MarkedExited > 0:
		a.log.Info("start-up reconcile with /proc", "added", res.Added, "marked_exited", res.MarkedExited)
	}
	return nil
}

// Status reports the agent's counters for the API.
func (a *Agent) Status() api.Status {
	gs := a.graph.Stats()
	st := api.Status{
		Tracked: gs.Tracked,
		Alive:   gs.Alive,
		Exited:  gs.Exited,
		Retired: gs.Retired,
		Repairs: gs.Repairs,
		Events:  map[string]uint64{},
		Lost:    map[string]uint64{},
		Gaps:    gapCounts(gs),

		Recovered: map[string]uint64{},
	}
	for _, k := range []lineage.EventKind{lineage.KindFork, lineage.KindExec, lineage.KindExit} {
		st.Events[k.String()] = a.events[k].Load()
	}
	a.mu.Lock()
	for k, n := range a.lost {
		st.Lost[k.String()] = n
	}
	for k, n := range a.recovered {
		st.Recovered[k.String()] = n
	}
	a.mu.Unlock()
	return st
}

func gapCounts(gs lineage.Stats) map[string]uint64 {
	out := make(map[string]uint64, len(gs.Gaps))
	for g, n := range gs.Gaps {
		out[g.String()] = n
	}
	return out
}

// endSessions hands ended sessions to the enforcer, each in its own
// goroutine. A session whose enclosing session ends in the same batch is
// covered by it: the outer session's members include the inner's.
func (a *Agent) endSessions(acts []sessions.Action) {
	ending := map[string]bool{}
	for _, act := range acts {
		ending[act.End.ID] = true
	}
	for _, act := range acts {
		covered := false
		for p := act.End.Parent; p != "" && !covered; {
			covered = ending[p]
			s, ok := a.tracker.Get(p)
			if !ok {
				break
			}
			p = s.Parent
		}
		if covered {
			continue
		}
		s := act.End
		a.log.Info("session ended", "session", s.ID, "origin", s.Origin, "root", s.Root.PID, "reason", s.EndReason)
		a.ending.Add(1)
		go func() {
			defer a.ending.Done()
			rep := a.enf.End(a.endCtx, s.ID, s.EndedAt, s.EndReason, func() []lineage.Process { return a.tracker.Members(s.ID) })
			a.keepReport(rep)
		}()
	}
}

// finishEnding waits for enforcements under way, at most d, then cancels
// them (their survivors are reported as such).
func (a *Agent) finishEnding(d time.Duration) {
	done := make(chan struct{})
	go func() { a.ending.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(d):
		a.log.Error("stopping with enforcement still under way; cancelling it", "waited", d)
		a.endCancel()
		<-done
	}
}

const maxReports = 1000

func (a *Agent) keepReport(rep enforcer.Report) {
	a.reportsMu.Lock()
	defer a.reportsMu.Unlock()
	if a.reports == nil {
		a.reports = map[string]enforcer.Report{}
	}
	if _, ok := a.reports[rep.Session]; !ok {
		a.order = append(a.order, rep.Session)
	}
	a.reports[rep.Session] = rep
	for len(a.order) > maxReports {
		delete(a.reports, a.order[0])
		a.order = a.order[1:]
	}
}

// Report returns the enforcer's report for a session once it finished.
func (a *Agent) Report(session string) (enforcer.Report, bool) {
	a.reportsMu.Lock()
	defer a.reportsMu.Unlock()
	r, ok := a.reports[session]
	return r, ok
}

// refreshParents updates the current parent of live processes from /proc:
// the kernel reparents the children of an exiting process without an
// event, so the graph learns the reaper only when asked. The creator edge
// is untouched. A process whose /proc entry belongs to another identity
// (a recycled pid) is left as it is.
func (a *Agent) refreshParents(procs []lineage.Process) {
	now := procfs.BootTimeNow()
	for i := range procs {
		p := &procs[i]
		if p.Exited || p.Kernel {
			continue
		}
		snap, err := procfs.Read(a.opts.ProcRoot, p.ID.PID)
		if err != nil || snap.ID.Start/procfs.TickNS != p.ID.Start/procfs.TickNS || snap.PPID == p.Parent.PID {
			continue
		}
		if a.graph.SetParent(p.ID, snap.PPID, now) {
			if q, ok := a.graph.Get(p.ID); ok {
				p.Parent = q.Parent
			}
		}
	}
}
