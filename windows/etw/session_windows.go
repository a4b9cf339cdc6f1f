package etw

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/windows"

	"github.com/mcptrace/mcptrace/lineage"
	"github.com/mcptrace/mcptrace/windows/owners"
	"github.com/mcptrace/mcptrace/windows/winproc"
)

// The ETW calls x/sys/windows lacks, loaded lazily from advapi32. No
// maintained pure-Go consumer library is served by the module proxy here
// (tekert/golang-etw and 0xrawsec/golang-etw are not), and the five calls
// with their three structures are small enough to own.
var (
	advapi32            = windows.NewLazySystemDLL("advapi32.dll")
	procStartTraceW     = advapi32.NewProc("StartTraceW")
	procControlTraceW   = advapi32.NewProc("ControlTraceW")
	procEnableTraceEx2  = advapi32.NewProc("EnableTraceEx2")
	procOpenTraceW      = advapi32.NewProc("OpenTraceW")
	procProcessTrace    = advapi32.NewProc("ProcessTrace")
	procCloseTrace      = advapi32.NewProc("CloseTrace")
	kernelProcessGUID   = windows.GUID{Data1: 0x22FB2CD6, Data2: 0x0E7B, Data3: 0x422B, Data4: [8]byte{0xA0, 0xC7, 0x2F, 0xAD, 0x1F, 0xD0, 0xE7, 0x16}}
	invalidTraceHandle  = ^uint64(0)
	errNoEventCallbacks = errors.New("the event callback is already in use by another consumer in this process")
)

// Constants of evntrace.h and evntprov.h.
const (
	wnodeFlagTracedGUID         = 0x00020000
	eventTraceRealTimeMode      = 0x00000100
	processTraceModeRealTime    = 0x00000100
	processTraceModeEventRecord = 0x10000000
	controlQuery                = 0
	controlStop                 = 1
	enableProvider              = 1
	levelInformation            = 4
	clientContextSystemTime     = 2
	maxLoggerName               = 1024 // characters, with the NUL
)

// wnodeHeader is WNODE_HEADER.
type wnodeHeader struct {
	BufferSize        uint32
	ProviderID        uint32
	HistoricalContext uint64
	TimeStamp         int64
	GUID              windows.GUID
	ClientContext     uint32
	Flags             uint32
}

// traceProperties is EVENT_TRACE_PROPERTIES followed by room for the
// session's name, as StartTrace and ControlTrace want it.
type traceProperties struct {
	Wnode               wnodeHeader
	BufferSize          uint32
	MinimumBuffers      uint32
	MaximumBuffers      uint32
	MaximumFileSize     uint32
	LogFileMode         uint32
	FlushTimer          uint32
	EnableFlags         uint32
	AgeLimit            int32
	NumberOfBuffers     uint32
	FreeBuffers         uint32
	EventsLost          uint32
	BuffersWritten      uint32
	LogBuffersLost      uint32
	RealTimeBuffersLost uint32
	LoggerThreadID      windows.Handle
	LogFileNameOffset   uint32
	LoggerNameOffset    uint32
	name                [maxLoggerName]uint16
}

func newProperties() *traceProperties {
	p := &traceProperties{}
	p.Wnode.BufferSize = uint32(unsafe.Sizeof(*p))
	p.Wnode.Flags = wnodeFlagTracedGUID
	p.Wnode.ClientContext = clientContextSystemTime
	p.LogFileMode = eventTraceRealTimeMode
	p.LoggerNameOffset = uint32(unsafe.Offsetof(p.name))
	// 64 KiB buffers, 16 to 256 of them: bursts of thousands of process
	// starts a second fit, and a slow consumer loses buffers, counted.
	p.BufferSize = 64
	p.MinimumBuffers = 16
	p.MaximumBuffers = 256
	p.FlushTimer = uint32(FlushTimer / time.Second)
	return p
}

// FlushTimer is how often the session hands its non-empty buffers to the
// real-time consumer (EVENT_TRACE_PROPERTIES.FlushTimer, whole seconds):
// a buffer that does not fill waits up to this long, so an event reaches
// Consume's handler up to about this long after it was logged.
const FlushTimer = time.Second

// eventTraceHeader is EVENT_TRACE_HEADER; eventTrace is EVENT_TRACE.
type eventTraceHeader struct {
	Size, FieldTypeFlags uint16
	Version              uint32
	ThreadID, ProcessID  uint32
	TimeStamp            int64
	GUID                 windows.GUID
	ProcessorTime        uint64
}

type eventTrace struct {
	Header           eventTraceHeader
	InstanceID       uint32
	ParentInstanceID uint32
	ParentGUID       windows.GUID
	MofData          uintptr
	MofLength        uint32
	ClientContext    uint32
}

// traceLogfileHeader is TRACE_LOGFILE_HEADER.
type traceLogfileHeader struct {
	BufferSize         uint32
	Version            uint32
	ProviderVersion    uint32
	NumberOfProcessors uint32
	EndTime            int64
	TimerResolution    uint32
	MaximumFileSize    uint32
	LogFileMode        uint32
	BuffersWritten     uint32
	LogInstanceGUID    windows.GUID
	LoggerName         *uint16
	LogFileName        *uint16
	TimeZone           windows.Timezoneinformation
	BootTime           int64
	PerfFreq           int64
	StartTime          int64
	ReservedFlags      uint32
	BuffersLost        uint32
}

// traceLogfile is EVENT_TRACE_LOGFILEW.
type traceLogfile struct {
	LogFileName         *uint16
	LoggerName          *uint16
	CurrentTime         int64
	BuffersRead         uint32
	ProcessTraceMode    uint32
	CurrentEvent        eventTrace
	LogfileHeader       traceLogfileHeader
	BufferCallback      uintptr
	BufferSize          uint32
	Filled              uint32
	EventsLost          uint32
	EventRecordCallback uintptr
	IsKernelTrace       uint32
	Context             uintptr
}

// eventRecord is EVENT_RECORD, as the event callback receives it.
type eventRecord struct {
	Size, HeaderType, Flags, EventProperty uint16
	ThreadID, ProcessID                    uint32
	TimeStamp                              int64
	ProviderID                             windows.GUID
	ID                                     uint16
	Version, Channel, Level, Opcode        uint8
	Task                                   uint16
	Keyword                                uint64
	ProcessorTime                          uint64
	ActivityID                             windows.GUID
	BufferContext                          uint32
	ExtendedDataCount                      uint16
	UserDataLength                         uint16
	ExtendedData                           unsafe.Pointer
	UserData                               *byte // the payload, UserDataLength bytes
	UserContext                            unsafe.Pointer
}

// Session is a real-time ETW session with the Kernel-Process provider
// enabled for process starts and stops (KeywordProcess).
type Session struct {
	name   string
	handle uint64
}

// StartSession starts the real-time session name and enables the
// provider in it. A session of that name left by an earlier agent is
// stopped first: its consumer is gone.
func StartSession(name string) (*Session, error) {
	if len(name) == 0 || len(name) >= maxLoggerName {
		return nil, fmt.Errorf("ETW session name %q: want 1 to %d characters", name, maxLoggerName-1)
	}
	uname, err := windows.UTF16PtrFromString(name)
	if err != nil {
		return nil, fmt.Errorf("ETW session name %q: %w", name, err)
	}
	var handle uint64
	start := func() error {
		p := newProperties()
		if r, _, _ := procStartTraceW.Call(uintptr(unsafe.Pointer(&handle)), uintptr(unsafe.Pointer(uname)), uintptr(unsafe.Pointer(p))); r != 0 {
			return syscall.Errno(r)
		}
		return nil
	}
	if err := procStartTraceW.Find(); err != nil {
		return nil, fmt.Errorf("start ETW session %q: %w", name, err)
	}
	err = start()
	if errors.Is(err, windows.ERROR_ALREADY_EXISTS) {
		if err := control(0, name, controlStop, newProperties()); err != nil {
			return nil, fmt.Errorf("stop the stale ETW session %q: %w", name, err)
		}
		err = start()
	}
	if err != nil {
		return nil, fmt.Errorf("start ETW session %q: %w (needs an administrator or the Performance Log Users group)", name, err)
	}
	s := &Session{name: name, handle: handle}
	if err := procEnableTraceEx2.Find(); err != nil {
		s.Stop()
		return nil, fmt.Errorf("enable %s in ETW session %q: %w", ProviderGUID, name, err)
	}
	r, _, _ := procEnableTraceEx2.Call(uintptr(handle), uintptr(unsafe.Pointer(&kernelProcessGUID)), enableProvider,
		levelInformation, KeywordProcess, 0, 0, 0)
	if r != 0 {
		s.Stop()
		return nil, fmt.Errorf("enable %s in ETW session %q: %w", ProviderGUID, name, syscall.Errno(r))
	}
	return s, nil
}

// control runs ControlTrace on the session name (handle 0) or handle.
func control(handle uint64, name string, code uint32, p *traceProperties) error {
	if err := procControlTraceW.Find(); err != nil {
		return err
	}
	uname, err := windows.UTF16PtrFromString(name)
	if err != nil {
		return err
	}
	if r, _, _ := procControlTraceW.Call(uintptr(handle), uintptr(unsafe.Pointer(uname)), uintptr(unsafe.Pointer(p)), uintptr(code)); r != 0 {
		return syscall.Errno(r)
	}
	return nil
}

// Losses queries what the session has lost so far.
func (s *Session) Losses() (Losses, error) {
	p := newProperties()
	if err := control(s.handle, s.name, controlQuery, p); err != nil {
		return Losses{}, fmt.Errorf("query ETW session %q: %w", s.name, err)
	}
	return Losses{Events: p.EventsLost, RealTimeBuffers: p.RealTimeBuffersLost, LogBuffers: p.LogBuffersLost}, nil
}

// Stop stops the session; a Consume running on it returns.
func (s *Session) Stop() error {
	if err := control(s.handle, s.name, controlStop, newProperties()); err != nil && !errors.Is(err, windows.ERROR_WMI_INSTANCE_NOT_FOUND) {
		return fmt.Errorf("stop ETW session %q: %w", s.name, err)
	}
	return nil
}

// Handler receives the decoded events of a Consume, on the thread that
// runs ProcessTrace, one at a time. Undecodable payloads reach bad with
// the reason; they are counted by the caller, never dropped silently.
type Handler struct {
	Start func(ProcessStart)
	Stop  func(ProcessStop)
	Bad   func(id uint16, version uint8, err error)
}

// One consumer at a time per process: the callback, made once (Go never
// frees callbacks), dispatches to it.
var (
	consumer     atomic.Pointer[Handler]
	callbackOnce sync.Once
	eventCB      uintptr
)

func onEvent(rec *eventRecord) uintptr {
	h := consumer.Load()
	if h == nil || rec.ProviderID != kernelProcessGUID {
		return 0
	}
	var data []byte
	if rec.UserData != nil {
		data = unsafe.Slice(rec.UserData, rec.UserDataLength)
	}
	switch rec.ID {
	case EventProcessStart:
		ev, err := DecodeProcessStart(rec.Version, data)
		if err != nil {
			h.Bad(rec.ID, rec.Version, err)
			return 0
		}
		ev.CreatorProcessID = rec.ProcessID
		h.Start(ev)
	case EventProcessStop:
		ev, err := DecodeProcessStop(rec.Version, data)
		if err != nil {
			h.Bad(rec.ID, rec.Version, err)
			return 0
		}
		h.Stop(ev)
	}
	return 0
}

// Consume delivers the session's events to h until the session stops
// (Stop) or CloseTrace fails it. It blocks; run it in a goroutine.
func (s *Session) Consume(h *Handler) error {
	if h == nil || h.Start == nil || h.Stop == nil || h.Bad == nil {
		return errors.New("consume ETW events: a handler with Start, Stop and Bad is required")
	}
	if !consumer.CompareAndSwap(nil, h) {
		return errNoEventCallbacks
	}
	defer consumer.Store(nil)
	callbackOnce.Do(func() { eventCB = syscall.NewCallback(onEvent) })
	uname, err := windows.UTF16PtrFromString(s.name)
	if err != nil {
		return err
	}
	lf := traceLogfile{LoggerName: uname, ProcessTraceMode: processTraceModeRealTime | processTraceModeEventRecord, EventRecordCallback: eventCB}
	if err := procOpenTraceW.Find(); err != nil {
		return fmt.Errorf("open ETW session %q: %w", s.name, err)
	}
	r, _, callErr := procOpenTraceW.Call(uintptr(unsafe.Pointer(&lf)))
	trace := uint64(r)
	if trace == invalidTraceHandle {
		return fmt.Errorf("open ETW session %q: %w", s.name, callErr)
	}
	defer procCloseTrace.Call(uintptr(trace))
	if r, _, _ := procProcessTrace.Call(uintptr(unsafe.Pointer(&trace)), 1, 0, 0); r != 0 && syscall.Errno(r) != windows.ERROR_CANCELLED {
		return fmt.Errorf("process ETW session %q: %w", s.name, syscall.Errno(r))
	}
	return nil
}

// LossPoll is how often Run asks the session for its losses.
const LossPoll = time.Second

// Run starts the real-time session name, seeds f from a snapshot, and
// feeds it the session's events until ctx ends; every LossPoll it hands
// f the session's losses (a growth repairs the graph). It stops the
// session when it returns.
func Run(ctx context.Context, name string, f *Feed, log *slog.Logger) error {
	s, err := StartSession(name)
	if err != nil {
		return err
	}
	defer s.Stop()
	if err := f.Seed(); err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() {
		done <- s.Consume(&Handler{
			Start: f.Start,
			Stop:  f.Stop,
			Bad: func(id uint16, version uint8, err error) {
				log.Warn("an ETW event did not decode; repairing from a snapshot", "id", id, "version", version, "err", err)
				if err := f.Bad(); err != nil {
					log.Error("repair", "err", err)
				}
			},
		})
	}()
	tick := time.NewTicker(LossPoll)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			s.Stop()
			<-done
			return nil
		case err := <-done:
			return fmt.Errorf("the ETW consumer stopped: %w", err)
		case <-tick.C:
			l, err := s.Losses()
			if err != nil {
				log.Error("query the ETW session's losses", "err", err)
				continue
			}
			if err := f.Losses(l); err != nil {
				log.Error("repair after lost ETW events", "err", err)
			}
		}
	}
}

// NewFeed is a Feed of g on this machine: the boot clock, process
// snapshots, and command lines read from each new process's PEB through
// a handle checked against the event's create time (a PID reused
// already reads as unreadable, not as another process's command line).
// Every process's owner is its token's in owners (package owners).
func NewFeed(g *lineage.Graph, owners *owners.Table) (*Feed, error) {
	clock, err := winproc.SystemClock()
	if err != nil {
		return nil, err
	}
	tr := NewTranslator(clock)
	tr.Owner = ownerIn(owners)
	return &Feed{Graph: g, Translator: tr, Snapshot: winproc.Snapshot, Read: ReadStarted, Now: clock.Now}, nil
}

// ownerIn maps tokens to owners in t; one that cannot be numbered is
// owners.Unknown.
func ownerIn(t *owners.Table) func(owners.Token) uint32 {
	return func(tok owners.Token) uint32 {
		uid, _ := t.Owner(tok)
		return uid
	}
}

// notStartedWait bounds how long argvOf waits for a new process to set
// up its PEB; notStartedPerSecond bounds those waits together, in 1 ms
// steps each second.
const (
	notStartedWait      = 50 * time.Millisecond
	notStartedPerSecond = 100
)

// notStarted is the waits' budget of the current second.
var notStarted waitBudget

// waitBudget counts 1 ms waits in the current second.
type waitBudget struct {
	mu     sync.Mutex
	second int64
	used   int
}

// take reports whether one more wait fits this second's budget.
func (b *waitBudget) take() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if now := time.Now().Unix(); now != b.second {
		b.second, b.used = now, 0
	}
	if b.used >= notStartedPerSecond {
		return false
	}
	b.used++
	return true
}

// ReadStarted reads a process as its ProcessStart names it (PID and
// create time), through a handle checked against the create time: its
// command line and its token (Feed.Read). A PID reused already reads as
// unreadable (ArgvTruncated, TokenOK false), not as another process.
// Call it as soon as the start is delivered: what exits first is gone.
func ReadStarted(pid uint32, create uint64) winproc.Entry {
	e := winproc.Entry{PID: pid, Create: create, ArgvTruncated: true}
	h, err := winproc.OpenForRead(pid, create)
	if err != nil {
		return e
	}
	defer h.Close()
	if argv, truncated := argvOf(h); argv != nil {
		e.Argv, e.ArgvTruncated = argv, truncated
	}
	if tok, err := h.Token(); err == nil {
		e.Token, e.TokenOK = tok, true
	}
	return e
}

// argvOf reads and splits h's command line; nil when it cannot. A
// process that has not set up its PEB yet (winproc.ErrNotStarted) is
// asked again for up to notStartedWait: TestFeedReadsARealCommandLine…
// read no argv once under wine on a loaded machine. Any user can make
// processes that never set one up (NtCreateProcessEx), so the waits
// share one budget a second (notStarted): they cannot hold the feed.
func argvOf(h *winproc.Handle) ([]string, bool) {
	line, truncated, err := h.CommandLine()
	for end := time.Now().Add(notStartedWait); errors.Is(err, winproc.ErrNotStarted) && time.Now().Before(end) && notStarted.take(); {
		time.Sleep(time.Millisecond)
		line, truncated, err = h.CommandLine()
	}
	if err != nil {
		return nil, true
	}
	argv, err := winproc.SplitCommandLine(line)
	if err != nil {
		return nil, true
	}
	return argv, truncated
}
