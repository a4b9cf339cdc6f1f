package sensor

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/features"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"

	"github.com/mcptrace/mcptrace/bpf"
	"github.com/mcptrace/mcptrace/lineage"
)

// Sensor holds the loaded programs, their links and the ring buffers it
// reads: the ones of the pin sets it took over, then its own.
type Sensor struct {
	objs  bpf.McptraceObjects
	links []link.Link
	log   *slog.Logger
	// own is the set this sensor created (its name is "" when unpinned).
	own *set
	// rd reads the rings in order; only the reading goroutine uses it.
	rd reader

	mu sync.Mutex
	// old are the sets taken over at Open, oldest first; a set leaves
	// once its ring is drained, its final counters kept in retired.
	old     []*set
	retired []Counters
	closed  bool
	// reading: a ReadBatch runs. It may hold records that alias a ring's
	// mapping, so Close only wakes it, and the reader unmaps the rings
	// when it returns (closeRings).
	reading   bool
	ringsOnce sync.Once
	// pinLock holds the pin directory's lock (flock) while the sensor
	// lives: one agent per pin directory.
	pinLock *os.File

	// sendSignalTask: the kernel has the kfunc bpf_send_signal_task (6.13+).
	sendSignalTask bool
	// requestsErr is why engine requests are not read; nil when they are.
	requestsErr error
	// requestsDropped counts engine requests read that start no container.
	requestsDropped atomic.Uint64
	engines         engineSockets
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

// Open checks the kernel, loads the programs and attaches them. Events are
// buffered in the kernel from the moment Open returns.
//
// With Options.PinDir, Open first attaches its own programs, then takes
// over every set a previous agent left pinned there (see the package
// documentation): it detaches their programs, copies their doomed
// processes into its own map, and Read returns what their ring buffers
// still hold before anything of its own. Between the attach and the detach
// both run, so an event may be read twice, never not at all.
func Open(opts Options) (*Sensor, error) {
	if opts.RingBufferSize == 0 {
		opts.RingBufferSize = DefaultRingBufferSize
	}
	if opts.TraceFS == "" {
		opts.TraceFS = DefaultTraceFS
	}
	if opts.BPFFS == "" {
		opts.BPFFS = DefaultBPFFS
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	log := opts.Logger.With("component", "sensor")
	size := opts.RingBufferSize
	if err := CheckRingBufferSize(size); err != nil {
		return nil, fmt.Errorf("ring buffer size: %w", err)
	}
	if err := ensureMounts(opts.TraceFS, opts.BPFFS, log); err != nil {
		return nil, err
	}
	if err := checkKernel(); err != nil {
		return nil, err
	}
	spec, err := bpf.LoadMcptrace()
	if err != nil {
		return nil, fmt.Errorf("load bpf spec: %w", err)
	}
	spec.Maps[bpf.McptraceMapEvents].MaxEntries = uint32(size)
	if opts.variant != 0 {
		differ(spec, opts.variant)
	}
	if opts.refuseRequests {
		if p := spec.Programs[requestsProgram]; p != nil {
			// r2 is never written: "R2 !read_ok".
			p.Instructions = asm.Instructions{asm.Mov.Reg(asm.R0, asm.R2), asm.Return()}
		}
	}
	kernelTypes := opts.KernelTypes
	if kernelTypes == nil {
		kernelTypes = btf.NewCache()
	}
	s := &Sensor{log: log}
	if err := s.load(spec, kernelTypes); err != nil {
		var verr *ebpf.VerifierError
		if errors.As(err, &verr) {
			log.Error("verifier rejected program", "log", fmt.Sprintf("%+v", verr))
		}
		return nil, loadError(err)
	}
	s.own = &set{maps: s.ownMaps(), readable: true, primaries: map[string]*ebpf.Program{}}
	for _, h := range s.hooks() {
		s.own.primaries[h.name] = h.primary
	}

	var prev []string
	if opts.PinDir != "" {
		if prev, err = s.pinOwn(opts.PinDir, spec); err != nil {
			s.abandon()
			return nil, err
		}
	}
	for _, h := range s.hooks() {
		progs := []struct {
			name string
			p    *ebpf.Program
		}{{h.name, h.primary}, {h.name + "_backup", h.backup}}
		if opts.skipBackups {
			progs = progs[:1]
		}
		for _, p := range progs {
			l, err := link.AttachTracing(link.TracingOptions{Program: p.p, AttachType: ebpf.AttachTraceRawTp})
			if err != nil {
				s.abandon()
				return nil, fmt.Errorf("attach %s tracepoint: %w", h.name, err)
			}
			s.links = append(s.links, l)
			if s.own.dir != "" {
				if err := l.Pin(s.own.linkPath(p.name)); err != nil {
					s.abandon()
					return nil, fmt.Errorf("pin %s link: %w", h.name, err)
				}
			}
		}
	}
	// Not fatal: the agent reports it once (RequestsErr).
	if s.requestsErr == nil {
		s.requestsErr = s.prepareRequests(opts)
	}
	// Before the takeover below detaches the previous set's reader.
	if s.requestsErr == nil && len(opts.EngineSockets) > 0 {
		if err := s.SetEngineSockets(opts.EngineSockets); err != nil {
			log.Debug("engine sockets not watched yet", "err", err)
		}
	}
	ownRing, err := newRing(s.objs.Events)
	if err != nil {
		s.abandon()
		return nil, fmt.Errorf("open ring buffer reader: %w", err)
	}
	ownRing.coalesce, ownRing.storm, ownRing.holdBack = ringCoalesce, ringStormCoalesce, true
	s.own.ring = ownRing
	// The barrier (Barrier) needs BPF_PROG_TEST_RUN of raw_tp programs,
	// Linux 5.10: find out now, not when a session ends. Barrier 0 is
	// read like any other and waited for by nobody.
	if err := s.Barrier(0); err != nil {
		s.abandon()
		return nil, &FeatureError{Feature: "running BPF programs on demand (BPF_PROG_TEST_RUN of raw_tp programs, for the ring buffer barrier)", Needs: "Linux 5.10 or newer", Err: err}
	}
	// Attached: from here on the kernel reports into this sensor's
	// ring, so the previous sets can go.
	for _, dir := range prev {
		old, err := openSet(dir, s.own.layout)
		if err != nil {
			log.Error("could not take over a previous agent's programs; they stay attached", "set", dir, "err", err)
			continue
		}
		// Doom first: a doomed process that forks between the detach and
		// the copy would have a child nobody dooms.
		s.copyDoomFrom(old)
		if err := old.detach(log); err != nil {
			log.Error("could not detach a previous agent's programs; they stay attached", "set", dir, "err", err)
		}
		s.old = append(s.old, old)
	}
	var rings []*set
	rings = append(rings, s.old...)
	s.rd = reader{rings: append(rings, s.own), log: log, onRetire: s.retire}

	s.sendSignalTask = haveKfunc(kernelTypes, "bpf_send_signal_task")
	log.Info("attached", "programs", len(s.links), "ring_buffer_bytes", size,
		"kill_doomed_children_at_fork", s.sendSignalTask, "pinned", s.own.dir != "", "took_over", len(s.old))
	return s, nil
}

// load creates the maps of spec and loads its programs into s.objs. The
// request reader is verified beside the others: its line check is
// unrolled, and it alone took as long to verify as the six fork, exec
// and exit programs together (36 ms of 80 on a 2-CPU test machine,
// docs/benchmarks.md). The kernel refusing it is not fatal: a program
// that does nothing stands in its place, never attached, and
// s.requestsErr says why (container attribution is off, process
// tracking is not).
func (s *Sensor) load(spec *ebpf.CollectionSpec, kernelTypes *btf.Cache) error {
	mapsOnly := spec.Copy()
	mapsOnly.Programs = nil
	maps, err := ebpf.NewCollectionWithOptions(mapsOnly, ebpf.CollectionOptions{Cache: kernelTypes})
	if err != nil {
		return err
	}
	defer maps.Close() // what Assign took is no longer its to close
	load := &ebpf.CollectionOptions{Cache: kernelTypes, MapReplacements: maps.Maps}
	reader := spec.Copy()
	var requests struct {
		Program *ebpf.Program `ebpf:"request_recv"`
	}
	var requestsErr error
	done := make(chan struct{})
	if reader.Programs[requestsProgram] != nil {
		go func() {
			defer close(done)
			requestsErr = reader.LoadAndAssign(&requests, load)
		}()
	} else {
		close(done)
	}
	rest := spec.Copy()
	stubRequests(rest)
	err = rest.LoadAndAssign(&s.objs.McptracePrograms, load)
	<-done
	switch {
	case err != nil:
	case requestsErr == nil && requests.Program != nil:
		s.objs.RequestRecv.Close() // the stand-in
		s.objs.RequestRecv = requests.Program
	case isRequestsLoadError(requestsErr):
		s.requestsErr = &FeatureError{Feature: "the container request reader (tp_btf/skb_copy_datagram_iovec)", Needs: "a kernel whose BTF has the fields it reads", Err: requestsErr}
	default:
		err = requestsErr
	}
	if err == nil {
		err = maps.Assign(&s.objs.McptraceMaps)
	}
	if err != nil {
		s.objs.McptracePrograms.Close()
		if requests.Program != nil && requests.Program != s.objs.RequestRecv {
			requests.Program.Close()
		}
	}
	return err
}

// abandon undoes a failed Open: the programs are detached, the pins
// removed, the previous sets untouched.
func (s *Sensor) abandon() {
	for _, l := range s.links {
		l.Unpin()
		l.Close()
	}
	s.links = nil
	if s.own != nil {
		if s.own.ring != nil {
			s.own.ring.Close()
		}
		if s.own.dir != "" {
			os.RemoveAll(s.own.dir)
		}
	}
	s.objs.Close()
	if s.pinLock != nil {
		s.pinLock.Close()
	}
}

// Withdraw undoes this sensor's start for an agent that fails before it
// serves: when it took over no previous agent's set, its own programs
// are unpinned (they detach at Close) and its set removed, so the failed
// start leaves nothing attached that it attached. When it took one over,
// its own set stays: it replaced that set (whose programs it detached,
// and whose doomed processes it holds), and the next agent takes it over
// in turn. It reports whether it withdrew. Call it before Close.
func (s *Sensor) Withdraw() (bool, error) {
	s.mu.Lock()
	took := len(s.old) + len(s.retired)
	s.mu.Unlock()
	if took > 0 {
		return false, nil
	}
	var errs []error
	for _, l := range s.links {
		if err := l.Unpin(); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	if s.own != nil && s.own.dir != "" {
		errs = append(errs, os.RemoveAll(s.own.dir))
	}
	return true, errors.Join(errs...)
}

// haveKfunc reports whether the kernel's BTF has the function name. The
// programs reference kfuncs weakly: where one is missing the loader turns
// its call into dead code, and this says which path runs.
func haveKfunc(kernelTypes *btf.Cache, name string) bool {
	spec, err := kernelTypes.Kernel()
	if err != nil {
		return false
	}
	var fn *btf.Func
	return spec.TypeByName(name, &fn) == nil
}

// Preflight reports the first kernel feature or privilege Open would find
// missing (a FeatureError), without loading anything, so that a caller can
// say what it needs before it does anything else.
func Preflight() error { return checkKernel() }

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
	// Before 5.11 maps are charged to the user's RLIMIT_MEMLOCK, shared by
	// every process of root: the pinned maps of earlier agents can exhaust
	// it, and the probe below would fail with EPERM.
	if err := rlimit.RemoveMemlock(); err != nil {
		return fmt.Errorf("remove memlock rlimit (needs CAP_SYS_RESOURCE or root on kernels before 5.11): %w", err)
	}
	if err := features.HaveMapType(ebpf.RingBuf); err != nil {
		return &FeatureError{Feature: "BPF ring buffer", Needs: "Linux 5.8 or newer", Err: err}
	}
	return nil
}

func errNoPrivilege(err error) error {
	return &FeatureError{Feature: "loading BPF programs", Needs: "root, or CAP_BPF, CAP_PERFMON and CAP_SYS_RESOURCE", Err: fmt.Errorf("%w: %w", ErrNoPrivilege, err)}
}

// loadError names the feature behind a failed load where it can tell.
func loadError(err error) error {
	if release, major, minor, ok := kernelRelease(); ok && (major < 5 || major == 5 && minor < 5) {
		return &FeatureError{Feature: "BTF-enabled tracepoints (tp_btf)", Needs: "Linux 5.5 or newer, this is " + release, Err: err}
	}
	if errors.Is(err, os.ErrPermission) {
		return &FeatureError{Feature: "loading tp_btf programs", Needs: "root with CAP_BPF and CAP_PERFMON, and a kernel that allows tracing programs (lockdown=confidentiality refuses them)", Err: err}
	}
	return fmt.Errorf("load bpf objects: %w", err)
}

// kernelRelease returns the running kernel's release and its version;
// false when uname cannot say.
func kernelRelease() (release string, major, minor int, ok bool) {
	var uname unix.Utsname
	if unix.Uname(&uname) != nil {
		return "", 0, 0, false
	}
	release = unix.ByteSliceToString(uname.Release[:])
	_, err := fmt.Sscanf(release, "%d.%d", &major, &minor)
	return release, major, minor, err == nil
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

// Close releases the sensor. Pinned (Options.PinDir), the programs stay
// attached and the maps pinned for the next agent; otherwise the programs
// are detached. A ReadBatch blocked in another goroutine returns
// ErrClosed, and releases the ring buffers itself.
func (s *Sensor) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	reading := s.reading
	if reading && s.own.ring != nil {
		s.own.ring.wake() // the reader only ever blocks on its own ring
	}
	s.mu.Unlock()
	var errs []error
	if !reading {
		errs = append(errs, s.closeRings())
	}
	for _, l := range s.links {
		// A pinned link stays attached when its descriptor closes.
		errs = append(errs, l.Close())
	}
	s.links = nil
	errs = append(errs, s.objs.Close())
	if s.pinLock != nil {
		errs = append(errs, s.pinLock.Close())
	}
	return errors.Join(errs...)
}

// closeRings unmaps every ring and releases the taken-over sets; once.
func (s *Sensor) closeRings() error {
	var err error
	s.ringsOnce.Do(func() {
		s.mu.Lock()
		old := s.old
		s.old = nil
		s.mu.Unlock()
		var errs []error
		for _, o := range old {
			errs = append(errs, o.close())
		}
		if s.own.ring != nil {
			errs = append(errs, s.own.ring.Close())
		}
		err = errors.Join(errs...)
	})
	return err
}
