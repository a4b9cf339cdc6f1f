package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcptrace/mcptrace/api"
	"github.com/mcptrace/mcptrace/lineage"
	"github.com/mcptrace/mcptrace/procfs"
	"github.com/mcptrace/mcptrace/sensor"
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
	Logger         *slog.Logger
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
	opts   Options
	log    *slog.Logger
	graph  *lineage.Graph
	sensor *sensor.Sensor

	events    [4]atomic.Uint64 // applied, by lineage.EventKind
	decodeErr atomic.Uint64
	mu        sync.Mutex
	lost      map[lineage.EventKind]uint64 // last seen kernel counters
	ready     chan struct{}
}

// New returns an agent that has not started yet.
func New(opts Options) *Agent {
	opts.defaults()
	return &Agent{
		opts:  opts,
		log:   opts.Logger.With("component", "agent"),
		graph: lineage.New(lineage.Config{Retention: opts.Retention, TickNS: procfs.TickNS}),
		lost:  map[lineage.EventKind]uint64{},
		ready: make(chan struct{}),
	}
}

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

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
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

	l, err := api.Listen(a.opts.Socket, a.opts.SocketMode)
	if err != nil {
		return err
	}
	srv := &api.Server{Graph: a.graph, Status: a.Status, Now: procfs.BootTimeNow, Log: a.opts.Logger.With("component", "api")}
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
	os.Remove(a.opts.Socket)
	if err != nil && !errors.Is(err, sensor.ErrClosed) {
		return err
	}
	return nil
}

// consume applies kernel events to the graph until the sensor closes.
func (a *Agent) consume() error {
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
		a.graph.Apply(ev)
		a.events[ev.Kind&3].Add(1)
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
			if n := a.graph.Retire(procfs.BootTimeNow()); n > 0 {
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
	a.mu.Lock()
	var grew []any
	for k, n := range lost {
		if n > a.lost[k] {
			grew = append(grew, k.String(), n-a.lost[k])
		}
	}
	a.lost = lost
	a.mu.Unlock()
	if len(grew) == 0 {
		return nil
	}
	readAt := procfs.BootTimeNow()
	snaps, err := procfs.Scan(a.opts.ProcRoot)
	if err != nil {
		return fmt.Errorf("repair from %s: %w", a.opts.ProcRoot, err)
	}
	res := a.graph.Repair(snaps, readAt)
	a.log.Warn("kernel lost events; graph repaired from /proc",
		append(grew, "added", res.Added, "marked_exited", res.MarkedExited)...)
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
	}
	for _, k := range []lineage.EventKind{lineage.KindFork, lineage.KindExec, lineage.KindExit} {
		st.Events[k.String()] = a.events[k].Load()
	}
	a.mu.Lock()
	for k, n := range a.lost {
		st.Lost[k.String()] = n
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
