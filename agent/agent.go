package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcptrace/mcptrace/api"
	"github.com/mcptrace/mcptrace/containers"
	"github.com/mcptrace/mcptrace/enforcer"
	"github.com/mcptrace/mcptrace/events"
	"github.com/mcptrace/mcptrace/exporter"
	"github.com/mcptrace/mcptrace/history"
	"github.com/mcptrace/mcptrace/internal/quota"
	"github.com/mcptrace/mcptrace/lineage"
	"github.com/mcptrace/mcptrace/orphans"
	"github.com/mcptrace/mcptrace/procfs"
	"github.com/mcptrace/mcptrace/sensor"
	"github.com/mcptrace/mcptrace/sessions"
	"github.com/mcptrace/mcptrace/state"
	"github.com/mcptrace/mcptrace/windows/owners"
)

// Options configure an Agent. Zero values take the defaults of the
// package that owns each value (api, sensor, lineage, procfs, state), as
// package config documents them.
type Options struct {
	Socket     string      // api.DefaultSocket
	SocketMode os.FileMode // api.DefaultSocketMode
	// APIMaxConnections and APIMaxConnectionsPerUID cap the API
	// connections of non-root users (api.Server); 0 takes api's defaults.
	APIMaxConnections       int
	APIMaxConnectionsPerUID int
	RingBufferSize          int           // sensor.DefaultRingBufferSize
	TraceFS, BPFFS          string        // mounted when missing
	ProcRoot                string        // procfs.DefaultRoot
	Retention               time.Duration // lineage.DefaultRetention
	RepairInterval          time.Duration // lineage.DefaultRepairInterval
	// MaxNodes, MaxImages and MaxImageBytes cap the lineage graph
	// (lineage.Config); zero takes lineage's defaults.
	MaxNodes, MaxImages, MaxImageBytes int
	// PinDir is where the kernel side is pinned so it keeps running
	// across restarts (sensor.DefaultPinDir).
	PinDir string
	// StateDir is where the agent keeps its memory across restarts
	// (state.DefaultDir).
	StateDir string
	// CheckpointInterval is how often the whole state is written and the
	// journal started anew (state.DefaultCheckpointInterval).
	CheckpointInterval time.Duration
	// Sessions says which processes are session roots. The zero value
	// matches no host (no rules): only `mcptrace run`/`exec` tags and the
	// API declare roots. cmd/mcptrace turns the default rules on.
	Sessions sessions.Config
	// Enforcer says what happens to the members of ended sessions. Its
	// Sync is the agent's own.
	Enforcer enforcer.Config
	// MetricsAddress is where /metrics is served; "" (the zero value)
	// serves none. cmd/mcptrace passes metrics.listen-address.
	MetricsAddress string
	// MetricsRetry is how long after the metrics address could not be
	// had (another program holds it) the agent tries it again; zero is
	// 10 s. Not configurable: tests shorten it.
	MetricsRetry time.Duration
	// SampleInterval is how often the metrics' picture of sessions,
	// roles and usage is sampled (exporter.DefaultSampleInterval);
	// IdleAfter, how long a server does no I/O to count as idle
	// (exporter.DefaultIdleAfter).
	SampleInterval, IdleAfter time.Duration
	// OrphansEvery is how often a sample looks for orphans (leaked
	// servers no session owns) for the metrics
	// (exporter.DefaultOrphansEvery); samples in between show the last
	// look.
	OrphansEvery time.Duration
	// HideServerNames puts "hidden" on /metrics for every server name
	// (metrics.server-names false); the agent's API still names them to
	// whom may see them.
	HideServerNames bool
	// OrphansConfirmAfter is how long a server's stdin must stay cut off
	// before it counts as a leak (orphans.DefaultConfirmAfter).
	OrphansConfirmAfter time.Duration
	// ReapSupersededAfter, when not 0, ends an MCP server that its host
	// started again (a newer instance of the same server lives in the
	// same session) once the older one did no I/O for this long; it is
	// checked at every sample (enforcer.reap-superseded-after). 0, the
	// default, never reaps.
	ReapSupersededAfter time.Duration
	// Nice, when not nil, is the scheduling priority the agent sets for
	// every thread of its process when it starts (enforcer.nice,
	// enforcer.DefaultNice; priority_unix.go). nil leaves it as it is:
	// agents a test runs in its own process.
	Nice *int
	// ContainerEngineSocket is the container engine whose containers
	// sessions start are attributed and ended
	// (containers.DefaultEngineSocket); "-" turns attribution off.
	ContainerEngineSocket string
	// HistoryDir holds the history journal (history.DefaultDir); "-"
	// keeps none. HistoryMaxAge and HistoryMaxBytes bound it (zero: the
	// history package's defaults).
	HistoryDir      string
	HistoryMaxAge   time.Duration
	HistoryMaxBytes int64
	// ExportFile, when not "", is the file every event is written to, one
	// JSON object a line (events.Export), rotated at ExportMaxBytes with
	// ExportMaxFiles rotated files kept (zero: the events package's
	// defaults). Node names this node in events ("": the host name).
	ExportFile     string
	ExportMaxBytes int64
	ExportMaxFiles int
	Node           string
	Logger         *slog.Logger
	// ETW stands in for the ETW session on Windows (sensor.Options.ETW):
	// tests under wine, whose ETW delivers nothing, deliver the events.
	// nil, the default, is the real session. Not configurable.
	ETW sensor.ETWSource

	// holdSeedCheckpoint, when not nil, holds the checkpoint after the
	// start-up's process read until it is closed: tests stand for a
	// crash before that checkpoint (export_test.go).
	holdSeedCheckpoint <-chan struct{}
}

func (o *Options) defaults() {
	if o.Socket == "" {
		o.Socket = api.DefaultSocket
	}
	if o.SocketMode == 0 {
		o.SocketMode = api.DefaultSocketMode
	}
	if o.ProcRoot == "" {
		o.ProcRoot = procfs.DefaultRoot
	}
	if o.Retention == 0 {
		o.Retention = lineage.DefaultRetention
	}
	if o.RepairInterval == 0 {
		o.RepairInterval = lineage.DefaultRepairInterval
	}
	if o.PinDir == "" {
		o.PinDir = sensor.DefaultPinDir
	}
	if o.StateDir == "" {
		o.StateDir = state.DefaultDir
	}
	if o.CheckpointInterval == 0 {
		o.CheckpointInterval = state.DefaultCheckpointInterval
	}
	if o.SampleInterval == 0 {
		o.SampleInterval = exporter.DefaultSampleInterval
	}
	if o.IdleAfter == 0 {
		o.IdleAfter = exporter.DefaultIdleAfter
	}
	if o.OrphansEvery == 0 {
		o.OrphansEvery = exporter.DefaultOrphansEvery
	}
	if o.OrphansConfirmAfter == 0 {
		o.OrphansConfirmAfter = orphans.DefaultConfirmAfter
	}
	if o.ContainerEngineSocket == "" {
		o.ContainerEngineSocket = containers.DefaultEngineSocket
	}
	if o.HistoryDir == "" {
		o.HistoryDir = history.DefaultDir
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
}

// engineSocket is the configured engine socket, "" when attribution is
// turned off.
func (o *Options) engineSocket() string {
	if o.ContainerEngineSocket == "-" {
		return ""
	}
	return o.ContainerEngineSocket
}

// Agent owns the sensor, the graph, the tracker, the enforcer, the durable
// state and the API server.
type Agent struct {
	// owners numbers Windows users (system_windows.go); nil elsewhere.
	// ownerFailures counts the tokens it could not number.
	owners        *owners.Table
	ownerFailures atomic.Uint64
	// pins hold the agent's directories open on Windows
	// (system_windows.go) until Run returns.
	pins []io.Closer

	// ops is what status tells the operator beyond counters
	// (operator.go).
	ops  operatorState
	opts Options
	// procs reads every process (system_*.go).
	procs   procReader
	log     *slog.Logger
	graph   *lineage.Graph
	sensor  *sensor.Sensor
	tracker *sessions.Tracker
	enf     *enforcer.Enforcer
	store   *state.Store

	// mu orders every change of the graph and the tracker with its
	// journal record, and guards what follows. Lock order: mu, then the
	// tracker, then the graph; nothing holding mu waits for the consumer.
	mu sync.Mutex
	// pending are the endings decided and not yet reported, by
	// sessions.Action.Key: they survive a restart.
	pending map[string]sessions.Action
	// stopping: the agent is stopping; no ending starts anymore.
	stopping bool
	// running are the endings the enforcer works on now, by key.
	running map[string]bool
	reports *quota.FIFO[string, enforcer.Report] // finished, by key, without records (newReports)
	kernel  kernelSeen
	// journaled counts bytes appended since the last checkpoint;
	// journalErrs counts appends that failed.
	journaled   int64
	journalErrs uint64
	// journalFailed: an append failed since the last checkpoint; the
	// consumer checkpoints before it commits the batch (durable anyway).
	journalFailed bool
	lastCP        time.Time
	// seedCheckpoint is the checkpoint after the process scan, written
	// once the API serves (Run); Run waits for it before it returns.
	seedCheckpoint sync.WaitGroup
	boot           bootReport

	events    [lineage.KindRequest + 1]atomic.Uint64 // applied, by lineage.EventKind
	decodeErr atomic.Uint64

	barrier barrierState
	hold    holdGate

	sampler sampler
	api     atomic.Pointer[api.Server]
	// metrics is the /metrics listener, tried again while it cannot be
	// had (metricslisten.go).
	metrics metricsEndpoint
	// containers is the container engine and what it said about the
	// containers sessions claim (containers_linux.go).
	containers *containerState
	// hist is the history journal and what was recorded in it
	// (history_linux.go).
	hist historyState
	// orphans remembers what Orphans read last (orphans_linux.go).
	orphans orphanState
	// stream is the event stream and its export file (events.go).
	stream eventStream

	// endCtx bounds enforcement; the agent cancels it when it stops,
	// and what was under way resumes at the next start.
	endCtx    context.Context
	endCancel context.CancelFunc
	ending    sync.WaitGroup
	ready     chan struct{}
}

// New returns an agent that has not started yet. It fails on invalid
// session rules or enforcer configuration, never silently falling back.
func New(opts Options) (*Agent, error) {
	opts.defaults()
	if err := opts.Enforcer.Validate(); err != nil {
		return nil, fmt.Errorf("enforcer configuration: %w", err)
	}
	if opts.Sessions.Now == nil {
		opts.Sessions.Now = procfs.BootTimeNow
	}
	ops := newOperatorState(&opts) // before anything takes the logger
	a := &Agent{
		ops:     ops,
		opts:    opts,
		log:     opts.Logger.With("component", "agent"),
		graph:   newGraph(opts),
		pending: map[string]sessions.Action{},
		running: map[string]bool{},
		reports: newReports(opts.Sessions),
		kernel:  newKernelSeen(),
		ready:   make(chan struct{}),

		containers: newContainerState(opts.engineSocket()),
	}
	a.stream.hub = events.NewHub(opts.nodeName(), procfs.BootTimeNow())
	var err error
	a.tracker, err = sessions.NewTracker(a.graph, opts.Sessions, opts.Logger.With("component", "sessions"))
	if err != nil {
		return nil, err
	}
	a.hold.init()
	return a, nil
}

func newGraph(opts Options) *lineage.Graph {
	return lineage.New(lineage.Config{Retention: opts.Retention, MaxNodes: opts.MaxNodes, MaxImages: opts.MaxImages, MaxImageBytes: opts.MaxImageBytes})
}

// Sessions is the session tracker. It is replaced by the one restored
// from the saved state when Run starts; call it after Ready.
func (a *Agent) Sessions() *sessions.Tracker { return a.tracker }

// Enforcer is the enforcer; nil before Run.
func (a *Agent) Enforcer() *enforcer.Enforcer { return a.enf }

// apiServer is the API server once Run serves it, else nil.
func (a *Agent) apiServer() *api.Server { return a.api.Load() }

// Socket is the API socket path.
func (a *Agent) Socket() string { return a.opts.Socket }

// Graph is the live lineage graph; like Sessions, replaced at Run.
func (a *Agent) Graph() *lineage.Graph { return a.graph }

// Ready is closed once the graph is seeded and the API listens.
func (a *Agent) Ready() <-chan struct{} { return a.ready }

// Run starts the agent and blocks until ctx ends or a part fails.
//
// Start-up, in this order: what can fail for a reason outside the agent
// (the API socket, which another agent may hold; the metrics address,
// which anyone may, and which is tried again while the agent runs
// without it; the state and history directories); the saved state is
// loaded (checkpoint, then the journal); the sensor attaches its
// programs and takes over those of the previous agent; kernel events are applied from then on, the previous
// agent's unread ones first; /proc is read and checked against the graph
// (Seed on a first start, Repair after a restart); once the graph has
// caught up with the kernel (a barrier), sessions are scanned for roots
// that died meanwhile, the endings that were under way are resumed, and
// the API serves.
//
// A start that fails once the sensor attached, before the API serves,
// takes its programs out of the kernel again (sensor.Withdraw). Stopping
// (ctx ends) leaves the kernel side running (pinned), interrupts
// enforcement (it resumes at the next start; the kernel keeps killing
// doomed processes meanwhile), and writes a final checkpoint.
func (a *Agent) Run(ctx context.Context) error {
	loadStart := time.Now()
	// What the kernel side needs is said first: it is what a user without
	// the privilege has to fix.
	if err := sensor.Preflight(); err != nil {
		return err
	}
	if a.opts.Nice != nil {
		a.setPriority(*a.opts.Nice)
	}
	// What can fail for a reason outside the agent is taken before the
	// kernel side is touched. The socket first: another agent serving
	// (or starting) there means this one stops having changed nothing,
	// no directory secured, no state read, no program loaded, nothing
	// pinned.
	l, err := api.Listen(a.opts.Socket, a.opts.SocketMode)
	if err != nil {
		return err
	}
	defer l.Close() // Serve closes it too; the socket file goes, then its lock
	defer a.closeSystem()
	if err := a.openSystem(); err != nil {
		return err
	}
	// The metrics address is anyone's to take on a loopback port: one
	// that cannot be had is tried again while the agent enforces.
	var ml net.Listener
	if a.opts.MetricsAddress != "" {
		ml = a.listenMetrics()
		if ml != nil {
			defer ml.Close()
		}
	}
	// The history first: the state's replay hands it the events a crash
	// may have taken from it.
	a.openHistory()
	defer a.closeHistory()
	if err := a.load(); err != nil {
		return err
	}
	defer a.store.Close()
	// Events from here on: the replay above published nothing again.
	a.openEvents()
	defer a.closeEvents()
	sopts := sensor.Options{
		RingBufferSize: a.opts.RingBufferSize,
		TraceFS:        a.opts.TraceFS,
		BPFFS:          a.opts.BPFFS,
		PinDir:         a.opts.PinDir,
		Logger:         a.opts.Logger,
	}
	if sock := a.opts.engineSocket(); sock != "" {
		sopts.ContainerClients = containers.Clients
		sopts.EngineSockets = []string{sock}
	}
	a.systemSensor(&sopts)
	s, err := sensor.Open(sopts)
	if err != nil {
		return err
	}
	a.sensor = s
	defer s.Close()
	// A start that fails from here until it serves leaves nothing
	// attached that it attached (Withdraw says when it keeps its set).
	serving := false
	defer func() {
		if serving {
			return
		}
		withdrawn, werr := s.Withdraw()
		switch {
		case werr != nil:
			a.log.Error("start failed, and its programs could not all be taken out of the kernel (mcptrace uninstall removes them)", "err", werr)
		case withdrawn:
			a.log.Info("start failed: its programs were taken out of the kernel")
		default:
			a.log.Warn("start failed after taking over the previous agent's programs: this start's programs stay attached in their place, for the next agent", "pin_dir", a.opts.PinDir)
		}
	}()
	ecfg := a.opts.Enforcer
	ecfg.Sync = a.Sync
	ecfg.Containers = engineStopper{a}
	a.systemEnforcer(&ecfg)
	a.enf = enforcer.New(ecfg, systemDoomer(s), a.limitSessionLogs(a.opts.Logger.With("component", "enforcer")))
	a.restoreEnforcer()
	if cfg := a.enf.Config(); cfg.Mode == enforcer.ModeAudit {
		a.log.Warn("audit mode: sessions are tracked and ended, nothing is signalled")
	}
	if pid := a.opts.Sessions.WithinPID; pid != 0 {
		a.log.Info("sessions narrowed to one subtree: processes outside it begin and end no session", "within_pid", pid)
	}
	// A journal is replayed only after a checkpoint: a first start (or a
	// state moved aside) writes one before the first append. A restored
	// state has one; the checkpoint after the /proc check follows soon.
	if !a.boot.restored {
		if err := a.checkpoint(); err != nil {
			return fmt.Errorf("write the first checkpoint: %w", err)
		}
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	a.endCtx, a.endCancel = context.WithCancel(context.Background())
	defer a.endCancel()
	var wg sync.WaitGroup
	errc := make(chan error, 4)

	// The sensor buffers from Open on; consume before scanning /proc so a
	// process forked during the scan is seen by one or the other (or both,
	// which the graph merges by identity).
	wg.Add(1)
	go func() {
		defer wg.Done()
		errc <- a.consume()
	}()

	if err := a.reconcile(ctx); err != nil {
		cancel()
		// Withdrawn before the sensor closes: its links are unpinned
		// while it still holds them, and detach as it closes them.
		serving = true
		if withdrawn, werr := s.Withdraw(); werr != nil || !withdrawn {
			a.log.Warn("start failed; this start's programs stay attached", "withdrawn", withdrawn, "err", werr)
		}
		s.Close()
		wg.Wait()
		a.seedCheckpoint.Wait()
		return err
	}
	a.boot.ready = time.Since(loadStart)

	srv := &api.Server{
		Graph:    a.graph,
		Sessions: a.tracker,
		Enforcer: a.enf,
		Do:       a.do,
		Sync:     a.Sync,
		Report:   a.Report,
		Refresh:  a.refreshParents,
		Status:   a.Status,

		Containers: a.sessionContainers,
		History:    a.History,
		Orphans:    a.Orphans,
		EndOrphans: a.EndOrphans,
		Events:     a.stream.hub,
		Now:        procfs.BootTimeNow,
		Log:        a.opts.Logger.With("component", "api"),

		MaxConnections:       a.opts.APIMaxConnections,
		MaxConnectionsPerUID: a.opts.APIMaxConnectionsPerUID,
	}
	a.systemAPI(srv)
	a.api.Store(srv)
	serving = true
	wg.Add(2)
	go func() {
		defer wg.Done()
		errc <- srv.Serve(ctx, l)
	}()
	go func() {
		defer wg.Done()
		a.maintain(ctx)
	}()
	wg.Add(1)
	go func() {
		defer wg.Done()
		a.watchContainers(ctx)
	}()
	hctx, hcancel := context.WithCancel(context.Background())
	hdone := make(chan struct{})
	go func() {
		defer close(hdone)
		a.recordHistory(hctx)
	}()
	if a.opts.MetricsAddress != "" || a.opts.ReapSupersededAfter > 0 || a.hist.j != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a.sample(ctx)
		}()
	}
	if a.opts.MetricsAddress != "" {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a.serveMetrics(ctx, ml)
		}()
	}
	a.log.Info("serving", "socket", a.opts.Socket, "mode", fmt.Sprintf("%#o", a.opts.SocketMode),
		"start_to_serving", a.boot.ready.Round(time.Millisecond))
	close(a.ready)
	// The checkpoint of what the seed or the /proc check learned is
	// written once the API serves, not before: encoding 10,000 processes
	// and waiting for the history's flush took a good part of the
	// start-up, and on two CPUs even beside the barrier and the session
	// scan it slowed them (docs/benchmarks.md, "startup"). Nothing waits
	// on it: the read itself is in the journal (takeScan), before every
	// event that descends from what it found, so an agent that stops
	// before this checkpoint is written replays the seed or the check in
	// its place (TestASessionBegunBeforeTheSeedsCheckpointSurvivesACrash).
	// This one keeps the next start from replaying it.
	// Checkpoints may overlap: the older cut is refused (ErrStaleCut).
	// Run waits for it before its final one.
	a.seedCheckpoint.Add(1)
	go func() {
		defer a.seedCheckpoint.Done()
		if a.opts.holdSeedCheckpoint != nil {
			<-a.opts.holdSeedCheckpoint
		}
		a.checkpointOrLog()
		// Start-up is the agent's peak: the kernel's BTF, the process
		// scan, the state load and this checkpoint's encoding are
		// garbage now. Give their pages back once rather than hold
		// them until the scavenger gets to them.
		debug.FreeOSMemory()
	}()

	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	cancel()
	// Enforcement stops where it is; pending endings resume at the next
	// start, and the kernel keeps killing doomed processes meanwhile.
	a.mu.Lock()
	a.stopping = true
	a.mu.Unlock()
	a.endCancel()
	a.ending.Wait()
	s.Close() // unblocks consume; the pinned programs stay attached
	wg.Wait()
	a.seedCheckpoint.Wait()
	if cerr := a.checkpoint(); cerr != nil {
		a.log.Error("final checkpoint failed; the next start replays the journal", "err", cerr)
	}
	// The last records of the sessions, after the last endings' reports.
	hcancel()
	<-hdone
	if err != nil && !errors.Is(err, sensor.ErrClosed) {
		return err
	}
	a.log.Info(stoppedMessage, "pending_endings", a.pendingCount())
	return nil
}

// reconcile brings the graph and the sessions up to date after the load:
// /proc is read and checked against the graph, the graph catches up with
// the kernel, then sessions whose roots died meanwhile end and the endings
// that were under way resume.
func (a *Agent) reconcile(ctx context.Context) error {
	start := time.Now()
	readAt := procfs.BootTimeNow()
	snaps, how, err := a.scanProcesses()
	if err != nil {
		return err
	}
	res := a.takeScan(state.Scan{ReadAt: readAt, Repair: a.boot.restored, Snapshots: snaps})
	if a.boot.restored {
		a.boot.procAdded, a.boot.procGone = res.Added, res.MarkedExited
		a.log.Info("checked the saved graph against "+processSource, "processes", len(snaps), "read_from", how,
			"started_meanwhile", res.Added, "gone_meanwhile", res.MarkedExited, "took", time.Since(start).Round(time.Millisecond))
	} else {
		a.log.Info("seeded from "+processSource, "processes", len(snaps), "read_from", how, "took", time.Since(start).Round(time.Millisecond))
	}
	// Every event of the previous agent's ring buffers and everything
	// reported up to now is applied once this returns.
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := a.Sync(sctx); err != nil {
		return fmt.Errorf("catch up with the kernel's events: %w", err)
	}
	a.mu.Lock()
	a.boot.drained = a.drainedEvents()
	a.mu.Unlock()
	if a.boot.restored {
		a.log.Info("caught up with the kernel", "events_from_previous_agent", a.boot.drained)
		// Events lost while no agent ran (a ring buffer that overflowed
		// during the outage) are counted now and repaired from /proc.
		if err := a.checkLost(); err != nil {
			a.log.Error("lost-event check at start failed; retrying", "err", err)
		}
	} else {
		// A process whose exit tracepoint fired just before the programs
		// were attached still looks alive in /proc until exit_notify, so
		// the seed can take it for alive and no exit event will ever
		// come: one repair after start-up even without a loss.
		a.mu.Lock()
		a.kernel.RepairPending = true
		a.mu.Unlock()
	}
	a.scan()
	a.resumePending()
	for _, s := range a.tracker.Sessions() {
		if s.State == sessions.Active {
			a.log.Info("session", "session", s.ID, "origin", s.Origin, "root", s.Root.PID, "generation", s.Generation)
		}
	}
	return nil
}

// scan runs the tracker's Scan (or, with sweep, its Sweep at now) under
// the agent's lock and ends what it finds ended.
func (a *Agent) scan() { a.settle(func() []sessions.Action { return a.tracker.Scan() }) }

// settle applies a tracker step that may end sessions (Scan, Sweep),
// which is not journaled: when it ends something, a checkpoint keeps it
// before the endings start.
func (a *Agent) settle(step func() []sessions.Action) {
	a.mu.Lock()
	acts := step()
	starts := a.markPending(acts)
	a.mu.Unlock()
	if len(acts) > 0 {
		a.checkpointOrLog()
	}
	a.startAll(starts)
}

// maintain checks the kernel's lost counters and repairs the graph after
// losses, retires dead branches and writes checkpoints.
func (a *Agent) maintain(ctx context.Context) {
	t := time.NewTicker(a.opts.RepairInterval)
	defer t.Stop()
	retire := time.NewTicker(max(a.opts.Retention/10, time.Second))
	defer retire.Stop()
	cp := time.NewTicker(a.opts.CheckpointInterval)
	defer cp.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			// An error once ctx is done is the sensor closing under the
			// check (the agent stops): not a failure to report.
			if err := a.checkLost(); err != nil && ctx.Err() == nil {
				a.log.Error("lost-event check or repair failed; retrying", "err", err)
			}
			if a.journalFull() {
				a.checkpointOrLog()
			}
		case <-retire.C:
			now := procfs.BootTimeNow()
			a.settle(func() []sessions.Action { return a.tracker.Sweep(now) })
			if n := a.graph.Retire(now); n > 0 {
				a.log.Debug("retired dead branches", "processes", n)
			}
		case <-cp.C:
			a.checkpointOrLog()
		}
	}
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
		snap, err := a.readProcess(p.ID.PID)
		if err != nil || !snap.ID.SameTick(p.ID) || snap.PPID == p.Parent.PID {
			continue
		}
		if a.graph.SetParent(p.ID, snap.PPID, now) {
			if q, ok := a.graph.Get(p.ID); ok {
				p.Parent = q.Parent
			}
		}
	}
}

// limitSessionLogs wraps log so that its per-session records go through
// the tracker's per-owner limit.
func (a *Agent) limitSessionLogs(log *slog.Logger) *slog.Logger {
	return slog.New(sessionLogLimit{Handler: log.Handler(), allow: func(id string, owner *uint32) bool {
		return a.tracker.AllowLog(id, owner) // a.tracker as it is now: restore replaces it
	}})
}
