package sensor

import (
	"errors"
	"fmt"
	"log/slog"
	"os"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/features"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"
	"github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"

	"github.com/mcptrace/mcptrace/bpf"
	"github.com/mcptrace/mcptrace/lineage"
)

// Options configure Open. Zero values take the documented defaults.
type Options struct {
	// RingBufferSize in bytes: a power of two and a multiple of the page
	// size. Default 8 MiB.
	RingBufferSize int
	// TraceFS and BPFFS are mounted when missing. Defaults
	// /sys/kernel/tracing and /sys/fs/bpf.
	TraceFS, BPFFS string
	Logger         *slog.Logger

	// skipBackups attaches the primary programs only; the benchmark
	// uses it to price the backups.
	skipBackups bool
}

// Sensor holds the loaded programs, their links and the ring buffer reader.
type Sensor struct {
	objs   bpf.McptraceObjects
	links  []link.Link
	reader *ringbuf.Reader
	rec    ringbuf.Record
	log    *slog.Logger
	// sendSignalTask: the kernel has the kfunc bpf_send_signal_task (6.13+).
	sendSignalTask bool
}

// FeatureError says which kernel feature or privilege Open needs and lacks.
type FeatureError struct {
	Feature string // e.g. "BPF ring buffer"
	Needs   string // e.g. "Linux 5.8 or newer"
	Err     error
}

func (e *FeatureError) Error() string {
	return fmt.Sprintf("%s is not available (needs %s): %v", e.Feature, e.Needs, e.Err)
}

func (e *FeatureError) Unwrap() error { return e.Err }

// MinRingBufferSize is the smallest buffer that holds one exec record.
var MinRingBufferSize = func() int {
	n := os.Getpagesize()
	for n < 2*execSize {
		n *= 2
	}
	return n
}()

// Open checks the kernel, loads the programs and attaches them. Events are
// buffered in the kernel from the moment Open returns.
func Open(opts Options) (*Sensor, error) {
	if opts.RingBufferSize == 0 {
		opts.RingBufferSize = 8 << 20
	}
	if opts.TraceFS == "" {
		opts.TraceFS = "/sys/kernel/tracing"
	}
	if opts.BPFFS == "" {
		opts.BPFFS = "/sys/fs/bpf"
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	log := opts.Logger.With("component", "sensor")
	size := opts.RingBufferSize
	if size < MinRingBufferSize || size&(size-1) != 0 || size%os.Getpagesize() != 0 {
		return nil, fmt.Errorf("ring buffer size %d: must be a power of two, a multiple of the page size and at least %d", size, MinRingBufferSize)
	}
	if err := ensureMounts(opts.TraceFS, opts.BPFFS, log); err != nil {
		return nil, err
	}
	if err := checkKernel(); err != nil {
		return nil, err
	}
	if err := rlimit.RemoveMemlock(); err != nil {
		return nil, fmt.Errorf("remove memlock rlimit (needs CAP_SYS_RESOURCE or root on kernels before 5.11): %w", err)
	}

	spec, err := bpf.LoadMcptrace()
	if err != nil {
		return nil, fmt.Errorf("load bpf spec: %w", err)
	}
	spec.Maps[bpf.McptraceMapEvents].MaxEntries = uint32(size)

	s := &Sensor{log: log}
	if err := spec.LoadAndAssign(&s.objs, nil); err != nil {
		var verr *ebpf.VerifierError
		if errors.As(err, &verr) {
			log.Error("verifier rejected program", "log", fmt.Sprintf("%+v", verr))
		}
		return nil, loadError(err)
	}
	for _, h := range s.hooks() {
		progs := []*ebpf.Program{h.primary, h.backup}
		if opts.skipBackups {
			progs = progs[:1]
		}
		for _, p := range progs {
			l, err := link.AttachTracing(link.TracingOptions{Program: p, AttachType: ebpf.AttachTraceRawTp})
			if err != nil {
				s.Close()
				return nil, fmt.Errorf("attach %s tracepoint: %w", h.name, err)
			}
			s.links = append(s.links, l)
		}
	}
	s.reader, err = ringbuf.NewReader(s.objs.Events)
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("open ring buffer reader: %w", err)
	}
	s.sendSignalTask = haveKfunc("bpf_send_signal_task")
	log.Info("attached", "programs", len(s.links), "ring_buffer_bytes", size,
		"kill_doomed_children_at_fork", s.sendSignalTask)
	return s, nil
}

// haveKfunc reports whether the kernel's BTF has the function name. The
// programs reference kfuncs weakly: where one is missing the loader turns
// its call into dead code, and this says which path runs.
func haveKfunc(name string) bool {
	spec, err := btf.LoadKernelSpec()
	if err != nil {
		return false
	}
	var fn *btf.Func
	return spec.TypeByName(name, &fn) == nil
}

// checkKernel names the first missing feature the programs need.
func checkKernel() error {
	if _, err := os.Stat("/sys/kernel/btf/vmlinux"); err != nil {
		return &FeatureError{Feature: "kernel BTF (/sys/kernel/btf/vmlinux)", Needs: "a kernel built with CONFIG_DEBUG_INFO_BTF=y, Linux 5.5 or newer", Err: err}
	}
	// features.HaveProgramType(ebpf.Tracing) probes with fentry, which some
	// kernels refuse while tp_btf works, so tp_btf is judged by loading the
	// programs themselves (see loadError).
	if !hasBPFCaps() {
		return errNoPrivilege(os.ErrPermission)
	}
	if err := features.HaveMapType(ebpf.RingBuf); err != nil {
		return &FeatureError{Feature: "BPF ring buffer", Needs: "Linux 5.8 or newer", Err: err}
	}
	return nil
}

func errNoPrivilege(err error) error {
	return &FeatureError{Feature: "loading BPF programs", Needs: "root, or CAP_BPF, CAP_PERFMON and CAP_SYS_RESOURCE", Err: err}
}

// loadError names the feature behind a failed load where it can tell.
func loadError(err error) error {
	var uname unix.Utsname
	if unix.Uname(&uname) == nil {
		release := unix.ByteSliceToString(uname.Release[:])
		var major, minor int
		fmt.Sscanf(release, "%d.%d", &major, &minor)
		if major < 5 || major == 5 && minor < 5 {
			return &FeatureError{Feature: "BTF-enabled tracepoints (tp_btf)", Needs: "Linux 5.5 or newer, this is " + release, Err: err}
		}
	}
	if errors.Is(err, os.ErrPermission) {
		return &FeatureError{Feature: "loading tp_btf programs", Needs: "root with CAP_BPF and CAP_PERFMON, and a kernel that allows tracing programs (lockdown=confidentiality refuses them)", Err: err}
	}
	return fmt.Errorf("load bpf objects: %w", err)
}

// hasBPFCaps reports whether the effective capabilities allow loading
// tracing programs: CAP_SYS_ADMIN, or CAP_BPF with CAP_PERFMON.
func hasBPFCaps() bool {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return os.Geteuid() == 0
	}
	has := func(c uint) bool { return data[c/32].Effective&(1<<(c%32)) != 0 }
	return has(unix.CAP_SYS_ADMIN) || has(unix.CAP_BPF) && has(unix.CAP_PERFMON)
}

// ErrClosed is returned by Read after Close.
var ErrClosed = errors.New("sensor closed")

// Read blocks until the next event. A record that cannot be decoded is
// returned as an error; the caller may go on reading.
func (s *Sensor) Read() (lineage.Event, error) {
	if err := s.reader.ReadInto(&s.rec); err != nil {
		if errors.Is(err, os.ErrClosed) {
			return lineage.Event{}, ErrClosed
		}
		return lineage.Event{}, fmt.Errorf("read ring buffer: %w", err)
	}
	return Decode(s.rec.RawSample)
}

// hooks are the tracepoints with their primary and backup programs, in
// attach order: a primary must run before its backup.
func (s *Sensor) hooks() []hook {
	return []hook{
		{"sched_process_fork", lineage.KindFork, s.objs.SchedProcessFork, s.objs.SchedProcessForkBackup},
		{"sched_process_exec", lineage.KindExec, s.objs.SchedProcessExec, s.objs.SchedProcessExecBackup},
		{"sched_process_exit", lineage.KindExit, s.objs.SchedProcessExit, s.objs.SchedProcessExitBackup},
	}
}

type hook struct {
	name            string
	kind            lineage.EventKind
	primary, backup *ebpf.Program
}

// Lost returns, per event kind, how many records the kernel could not send
// since Open: records no ring buffer space was left for (lost_events),
// plus events both programs of a hook were skipped for. The kernel skips a
// tracing program invoked on a CPU where it is already running
// (recursion_misses, Linux 5.12+), which happens when tracepoints are
// preemptible; the backup program runs the events its primary was skipped
// for and counts them (recovered), so the events nobody ran are the
// primary's misses minus those.
func (s *Sensor) Lost() (map[lineage.EventKind]uint64, error) {
	recovered, err := s.Recovered()
	if err != nil {
		return nil, err
	}
	out := make(map[lineage.EventKind]uint64, 3)
	for _, h := range s.hooks() {
		full, err := sumPerCPU(s.objs.LostEvents, "lost_events", uint32(h.kind))
		if err != nil {
			return nil, err
		}
		stats, err := h.primary.Stats()
		if err != nil {
			return nil, fmt.Errorf("read %s program stats: %w", h.name, err)
		}
		rec := recovered[h.kind]
		// A primary can also run after its backup stood in (an evicted
		// claim): never let that hide a loss of another event.
		var skipped uint64
		if stats.RecursionMisses > rec {
			skipped = stats.RecursionMisses - rec
		}
		out[h.kind] = full + skipped
	}
	return out, nil
}

// Recovered returns, per event kind, how many events the backup programs
// ran because the kernel skipped the primary (see Lost).
func (s *Sensor) Recovered() (map[lineage.EventKind]uint64, error) {
	out := make(map[lineage.EventKind]uint64, 3)
	for _, h := range s.hooks() {
		n, err := sumPerCPU(s.objs.Recovered, "recovered", uint32(h.kind))
		if err != nil {
			return nil, err
		}
		out[h.kind] = n
	}
	return out, nil
}

// sumPerCPU adds up the per-CPU values of key in a per-CPU array.
func sumPerCPU(m *ebpf.Map, name string, key uint32) (uint64, error) {
	var perCPU []uint64
	if err := m.Lookup(key, &perCPU); err != nil {
		return 0, fmt.Errorf("read %s[%d]: %w", name, key, err)
	}
	var n uint64
	for _, v := range perCPU {
		n += v
	}
	return n, nil
}

// Close detaches the programs and releases the ring buffer. A Read blocked
// in another goroutine returns ErrClosed.
func (s *Sensor) Close() error {
	var errs []error
	if s.reader != nil {
		errs = append(errs, s.reader.Close())
	}
	for _, l := range s.links {
		errs = append(errs, l.Close())
	}
	s.links = nil
	errs = append(errs, s.objs.Close())
	return errors.Join(errs...)
}
