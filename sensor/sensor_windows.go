package sensor

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/windows"

	"github.com/mcptrace/mcptrace/lineage"
	"github.com/mcptrace/mcptrace/windows/etw"
	"github.com/mcptrace/mcptrace/windows/owners"
	"github.com/mcptrace/mcptrace/windows/winproc"
)

// The Windows sensor: an ETW real-time session of the Kernel-Process
// provider (package etw), whose starts and stops become lineage events in
// a bounded queue that ReadBatch reads. See the package doc, "Windows".

// Bounds and delays of the Windows sensor.
const (
	// queueSize bounds the events queued for ReadBatch: what does not fit
	// is dropped and counted (Counters.Lost).
	queueSize = 1 << 16
	// barrierDelay is how long after Barrier its marker is placed: ETW
	// hands a buffer that does not fill to the consumer every FlushTimer,
	// and half of that again is left for the delivery.
	barrierDelay = etw.FlushTimer + etw.FlushTimer/2
	// closeWait bounds how long Close waits for the consumer to return.
	closeWait = 5 * time.Second
)

var (
	errNoDoom       = errors.New("not supported on Windows: the enforcer ends processes through handles")
	errNoContainers = errors.New("container attribution is not available on Windows")
	errNotElevated  = errors.New("the agent must run elevated (as an administrator or as a service): the ETW Kernel-Process provider needs it, and so does reading and ending other users' processes")
)

// ETWSource is what the sensor uses of an ETW session (*etw.Session):
// Options.ETW. Tests stand in for it, since wine's ETW delivers no events,
// and call the Handler the sensor gives Consume as ProcessTrace would.
type ETWSource = session

// session is ETWSource.
type session interface {
	Consume(*etw.Handler) error
	Losses() (etw.Losses, error)
	Stop() error
}

// Sensor is the ETW sensor. ReadBatch and Read belong to one goroutine;
// the other methods may be called from any.
type Sensor struct {
	log  *slog.Logger
	sess session
	q    *eventQueue
	// tr and read are used with the queue's event in hand only (the
	// consumer's callbacks, one at a time).
	tr   *etw.Translator
	read func(pid uint32, create uint64) winproc.Entry
	// set names this sensor's counters (Counters.Set).
	set          string
	barrierDelay time.Duration

	// lost is the session's loss total as last polled.
	lost atomic.Uint64

	// Read's events not returned yet; the reading goroutine's.
	pending []lineage.Event
	pendErr error

	stop      chan struct{} // closed by Close
	consumed  chan struct{} // closed when Consume returned
	polled    chan struct{} // closed when the loss poller returned
	closeOnce sync.Once
	closeErr  error
}

// etwConfig is what Open finds on this machine, and tests choose.
type etwConfig struct {
	clock winproc.Clock
	// seed is the process snapshot taken once the session was enabled.
	seed []winproc.Entry
	// read reads a started process (etw.ReadStarted).
	read                   func(pid uint32, create uint64) winproc.Entry
	queueSize              int
	barrierDelay, lossPoll time.Duration
}

// Open starts the ETW session (Options.SessionName), seeds the sensor
// with a snapshot of the processes running once it is enabled, so that
// the creators of later starts are known, and consumes its events in the
// background. It needs elevation (Preflight) and Options.Owner.
func Open(opts Options) (*Sensor, error) {
	if opts.Owner == nil {
		return nil, errors.New("open the ETW sensor: Options.Owner is required on Windows (it numbers each process's owner from its token)")
	}
	if err := Preflight(); err != nil {
		return nil, err
	}
	if opts.SessionName == "" {
		opts.SessionName = DefaultSessionName
	}
	clock, err := winproc.SystemClock()
	if err != nil {
		return nil, fmt.Errorf("open the ETW sensor: %w", err)
	}
	var sess session = opts.ETW
	if sess == nil {
		started, err := etw.StartSession(opts.SessionName)
		if err != nil {
			return nil, fmt.Errorf("open the ETW sensor: %w", err)
		}
		sess = started
	}
	// After the session is enabled: a process that starts in between is
	// both in the snapshot and in the stream, never in neither.
	seed, err := winproc.Snapshot()
	if err != nil {
		sess.Stop()
		return nil, fmt.Errorf("open the ETW sensor: seed: %w", err)
	}
	return newSensor(opts, sess, etwConfig{
		clock:        clock,
		seed:         seed,
		read:         etw.ReadStarted,
		queueSize:    queueSize,
		barrierDelay: barrierDelay,
		lossPoll:     etw.LossPoll,
	}), nil
}

// newSensor runs a sensor on sess: the consumer and the loss poller start
// now.
func newSensor(opts Options, sess session, cfg etwConfig) *Sensor {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	tr := etw.NewTranslator(cfg.clock)
	tr.Owner = opts.Owner
	tr.Seed(cfg.seed)
	s := &Sensor{
		log:          opts.Logger.With("component", "sensor"),
		sess:         sess,
		q:            newEventQueue(cfg.queueSize),
		tr:           tr,
		read:         cfg.read,
		set:          fmt.Sprintf("etw-%d", time.Now().UnixNano()),
		barrierDelay: cfg.barrierDelay,
		stop:         make(chan struct{}),
		consumed:     make(chan struct{}),
		polled:       make(chan struct{}),
	}
	go s.consume()
	go s.pollLosses(cfg.lossPoll)
	s.log.Info("consuming the ETW session's process events", "session", opts.SessionName, "seeded_processes", len(cfg.seed))
	return s
}

// consume runs the session's consumer until it stops. Stopped by anything
// but Close, it fails the queue: ReadBatch returns why once what is
// queued is read, and the agent stops.
func (s *Sensor) consume() {
	defer close(s.consumed)
	err := s.sess.Consume(&etw.Handler{Start: s.onStart, Stop: s.onStop, Bad: s.onBad})
	select {
	case <-s.stop:
		return
	default:
	}
	if err == nil {
		err = errors.New("the session was stopped")
	}
	s.log.Error("the ETW consumer stopped", "err", err)
	s.q.fail(fmt.Errorf("consume ETW events: %w", err))
}

// onStart turns a ProcessStart into a fork and an exec with the started
// process's command line and owner, read from it now through a handle
// checked against its create time (etw.ReadStarted, etw.FillStart, as
// etw.Feed does).
func (s *Sensor) onStart(ps etw.ProcessStart) {
	s.q.handle(func() []lineage.Event {
		e := s.read(ps.ProcessID, ps.CreateTime)
		evs := s.tr.Start(ps)
		etw.FillStart(evs, e, s.tr.Owner)
		return evs
	})
}

// onStop turns a ProcessStop into an exit.
func (s *Sensor) onStop(ps etw.ProcessStop) {
	s.q.handle(func() []lineage.Event { return s.tr.Stop(ps) })
}

// onBad counts the events of a payload that did not decode as lost, so
// that the agent repairs, and reports it in the stream (Batch.Undecodable).
func (s *Sensor) onBad(id uint16, version uint8, err error) {
	var kinds []lineage.EventKind
	switch id {
	case etw.EventProcessStart:
		kinds = []lineage.EventKind{lineage.KindFork, lineage.KindExec}
	case etw.EventProcessStop:
		kinds = []lineage.EventKind{lineage.KindExit}
	}
	s.q.undecodable(fmt.Errorf("ETW event %d version %d: %w", id, version, err), kinds...)
}

// pollLosses reads the session's loss counters every period until Close.
func (s *Sensor) pollLosses(period time.Duration) {
	defer close(s.polled)
	t := time.NewTicker(period)
	defer t.Stop()
	var lastErr string
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		l, err := s.sess.Losses()
		if err != nil {
			if err.Error() != lastErr {
				s.log.Warn("cannot read the ETW session's losses", "err", err)
			}
			lastErr = err.Error()
			continue
		}
		lastErr = ""
		if total := l.Total(); total > s.lost.Load() {
			s.lost.Store(total)
			s.log.Warn("the ETW session lost events", "events", l.Events, "real_time_buffers", l.RealTimeBuffers, "log_buffers", l.LogBuffers)
		}
	}
}

// ReadBatch blocks until events are queued, then returns up to max of
// them in the order the consumer received them, with the highest barrier
// placed among them. It returns ErrClosed after Close, and the
// consumer's error once it stopped and what it queued was read.
func (s *Sensor) ReadBatch(max int) (Batch, error) {
	return s.q.pop(max)
}

// Commit does nothing: what ReadBatch returned is gone from the queue.
// Nothing outlives the agent on Windows for a next agent to read (the
// session is stopped at Close, and a next Open replaces it).
func (s *Sensor) Commit() {}

// Read returns the next event: for callers that keep nothing durable
// (tests). An undecodable payload is returned as an error; the caller
// may go on reading.
func (s *Sensor) Read() (lineage.Event, error) {
	for len(s.pending) == 0 {
		if err := s.pendErr; err != nil {
			s.pendErr = nil
			return lineage.Event{}, fmt.Errorf("decode: %w", err)
		}
		b, err := s.ReadBatch(64)
		if err != nil {
			return lineage.Event{}, err
		}
		s.pending, s.pendErr = b.Events, b.Err
	}
	ev := s.pending[0]
	s.pending = s.pending[1:]
	return ev, nil
}

// Barrier asks for barrier seq: ReadBatch reports it (Batch.Barrier) after
// the events of every process that had started or stopped when Barrier
// was called, as far as ETW delivers them within its flush period. The
// marker is placed barrierDelay (1.5 s) later, behind whatever was queued
// by then and behind the event the consumer has in hand; see the package
// doc. It never fails but after Close (ErrClosed): there is no ring to be
// full.
func (s *Sensor) Barrier(seq uint64) error {
	select {
	case <-s.stop:
		return ErrClosed
	default:
	}
	s.q.barrierAfter(seq, s.barrierDelay)
	return nil
}

// Counters returns the sensor's one set of counters: per kind, the events
// dropped on a full queue and those whose payload did not decode (Lost);
// the session's own losses, events and buffers of unknown kinds
// (Discarded); and the events read. The set is named after the Open
// ("etw-<ns>"): a restarted agent's counters start again from zero, and
// must not be read as the previous agent's.
func (s *Sensor) Counters() ([]Counters, error) {
	dropped, bad, read := s.q.counts()
	lost := map[lineage.EventKind]uint64{lineage.KindFork: 0, lineage.KindExec: 0, lineage.KindExit: 0}
	for k, n := range dropped {
		lost[k] += n
	}
	for k, n := range bad {
		lost[k] += n
	}
	return []Counters{{Set: s.set, Lost: lost, Recovered: map[lineage.EventKind]uint64{}, Discarded: s.lost.Load(), Read: read}}, nil
}

// Lost returns the events lost per kind (Counters.Lost).
func (s *Sensor) Lost() (map[lineage.EventKind]uint64, error) {
	cs, err := s.Counters()
	if err != nil {
		return nil, err
	}
	return cs[0].Lost, nil
}

// Recovered is empty: there is no backup program on Windows.
func (s *Sensor) Recovered() (map[lineage.EventKind]uint64, error) {
	return map[lineage.EventKind]uint64{}, nil
}

// Doom is not supported: the enforcer ends processes through handles.
func (s *Sensor) Doom(lineage.ID) error { return errNoDoom }

// Undoom is not supported: the enforcer ends processes through handles.
func (s *Sensor) Undoom(lineage.ID) error { return errNoDoom }

// SpareExecs is not supported: nothing is doomed on Windows.
func (s *Sensor) SpareExecs([]string, bool) error { return errNoDoom }

// DoomKills are zero: nothing is doomed on Windows.
func (s *Sensor) DoomKills() (DoomKills, error) { return DoomKills{}, nil }

// KillsChildrenAtFork is false: nothing is killed at fork on Windows.
func (s *Sensor) KillsChildrenAtFork() bool { return false }

// MapUsage is nil: the Windows sensor has no kernel maps (its queue is
// bounded, and overflows count in Counters.Lost).
func (s *Sensor) MapUsage() ([]MapUsage, error) { return nil, nil }

// SetEngineSockets fails: container attribution is not available on
// Windows.
func (s *Sensor) SetEngineSockets([]string) error { return errNoContainers }

// RequestsDropped is 0: no container requests are read on Windows.
func (s *Sensor) RequestsDropped() uint64 { return 0 }

// RequestsErr says container attribution is not available on Windows.
func (s *Sensor) RequestsErr() error { return errNoContainers }

// RequestDrops fails: no container requests are read on Windows.
func (s *Sensor) RequestDrops() (node, overUID uint64, err error) { return 0, 0, errNoContainers }

// Withdraw: the ETW session ends at Close, and nothing outlives it;
// there is nothing to withdraw.
func (s *Sensor) Withdraw() (bool, error) { return true, nil }

// Close stops the session (ControlTrace stop), waits up to closeWait for
// the consumer and the loss poller to return, and makes ReadBatch return
// ErrClosed, a blocked one too. What was queued and not read is dropped:
// nothing survives the agent on Windows.
func (s *Sensor) Close() error {
	s.closeOnce.Do(func() {
		close(s.stop)
		s.q.close()
		s.closeErr = s.sess.Stop()
		t := time.NewTimer(closeWait)
		defer t.Stop()
		for _, done := range []chan struct{}{s.consumed, s.polled} {
			select {
			case <-done:
			case <-t.C:
				s.log.Warn("the ETW consumer did not return after the session was stopped; leaving it", "waited", closeWait)
				return
			}
		}
	})
	return s.closeErr
}

// Uninstall has nothing to remove: nothing is pinned on Windows.
func Uninstall(pinDir string) (int, error) { return 0, nil }

// Preflight checks that this process runs elevated, as the ETW
// Kernel-Process provider requires.
func Preflight() error {
	tok, err := windows.OpenCurrentProcessToken()
	if err != nil {
		return fmt.Errorf("read this process's token: %w", err)
	}
	defer tok.Close()
	t, err := winproc.TokenOf(tok)
	if err != nil {
		return fmt.Errorf("read this process's token: %w", err)
	}
	if !t.Admin && t.SID != owners.SystemSID {
		return errNotElevated
	}
	return nil
}
