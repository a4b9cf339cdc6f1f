//go:build linux

package vm

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/mcptrace/mcptrace/vmtests/internal/cpio"
	"github.com/mcptrace/mcptrace/vmtests/internal/kernel"
)

// FileMap ships a host file or directory to a guest path.
type FileMap struct {
	Host, Guest string
}

// Options describe one guest run.
type Options struct {
	Kernel  *kernel.Kernel
	QEMU    string // "" → qemu-system-x86_64 from PATH
	Busybox string // "" → FindBusybox()
	Init    string // static binary used as /init; "" → this executable
	CPU     string // QEMU -cpu model; "" → "max"
	Memory  string // e.g. "1G"
	CPUs    int
	// TCGThread is QEMU's TCG threading: "multi" (a host thread per
	// vCPU) or "single" (one host thread runs every vCPU in turn); "" →
	// "multi". Multi-threaded TCG does not keep code coherent that the
	// kernel patches while another vCPU runs it, which the guest's init
	// works around (NoHold); single-threaded TCG is coherent but makes a
	// vCPU wait up to 100 ms for the other's answer to an IPI.
	TCGThread string
	// NoHold leaves the hot tracepoints to the test: the guest's init
	// does not hold them with programs of its own (hotpatch_linux.go).
	NoHold  bool
	Timeout time.Duration // whole run: boot, test, power-off

	Binary   string   // host path of the program to run in the guest
	Args     []string // its arguments
	HostDir  string   // its package directory on the host: testdata/ is copied from here
	GuestDir string   // its working directory in the guest
	Files    []FileMap
	Env      []string // complete environment of the program in the guest

	// HostTools are host commands copied into the guest's /bin (with their
	// shared libraries) in place of busybox applets; missing ones are
	// skipped. RequiredHostTools are the same but must exist.
	HostTools         []string
	RequiredHostTools []string

	Stdout     io.Writer // the program's output, streamed
	Stderr     io.Writer // vmexec's own diagnostics (only with Verbose, during the run)
	ConsoleLog string    // if set, the whole guest console is written to this file
	Verbose    bool      // echo the guest console to Stderr while running
	Keep       bool      // keep the work directory (initramfs) and report it
	Append     string    // extra kernel command line
	NoPVH      bool      // boot the bzImage even if an uncompressed vmlinux is available
	TailLines  int       // console lines kept for failure reports (default 30)
}

// Status says how a run ended.
type Status int

const (
	Exited      Status = iota // the program exited; ExitCode is its status
	Signaled                  // the program was killed by a signal in the guest
	GuestError                // the guest init could not run the program
	NoStatus                  // the guest stopped without reporting (kernel panic, crash)
	TimedOut                  // the host killed the guest at the timeout
	Interrupted               // the host run was cancelled (signal to vmexec)
)

func (s Status) String() string {
	return [...]string{"exited", "signaled", "guest-error", "no-status", "timed-out", "interrupted"}[s]
}

// Result of a run.
type Result struct {
	Status      Status
	ExitCode    int    // for Exited
	Signal      string // for Signaled: "9 killed"
	Detail      string // human-readable explanation for anything but Exited
	Started     bool   // the guest init reported that the program started
	Release     string // uname -r reported by the guest
	BootTime    time.Duration
	Total       time.Duration
	OutputBytes int64
	ConsoleTail []string
	WorkDir     string // kept work directory, if Options.Keep
}

// Code is the exit code vmexec should exit with: the program's own exit
// status, 128+signal if it was killed, and 125 for anything that prevented
// learning its status (no status, timeout, guest error).
func (r *Result) Code() int {
	switch r.Status {
	case Exited:
		return r.ExitCode
	case Signaled:
		n, _ := strconv.Atoi(strings.Fields(r.Signal + " 0")[0])
		return 128 + n
	}
	return 125
}

// OK reports whether the program ran and exited 0.
func (r *Result) OK() bool { return r.Status == Exited && r.ExitCode == 0 }

// FindBusybox returns $MCPTRACE_VM_BUSYBOX, /bin/busybox or busybox from PATH.
func FindBusybox() (string, error) {
	if p := os.Getenv("MCPTRACE_VM_BUSYBOX"); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("busybox: MCPTRACE_VM_BUSYBOX=%s: %v", p, err)
		}
		return p, nil
	}
	for _, p := range []string{"/bin/busybox", "/usr/bin/busybox"} {
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	p, err := exec.LookPath("busybox")
	if err != nil {
		return "", errors.New("busybox not found (install busybox-static, or set MCPTRACE_VM_BUSYBOX)")
	}
	return p, nil
}

// FindQEMU returns $MCPTRACE_VM_QEMU or qemu-system-x86_64 from PATH.
func FindQEMU() (string, error) {
	if p := os.Getenv("MCPTRACE_VM_QEMU"); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("qemu-system-x86_64: MCPTRACE_VM_QEMU=%s: %v", p, err)
		}
		return p, nil
	}
	p, err := exec.LookPath("qemu-system-x86_64")
	if err != nil {
		return "", errors.New("qemu-system-x86_64 not found (install qemu-system-x86, or set MCPTRACE_VM_QEMU)")
	}
	return p, nil
}

// CheckStatic returns an error unless path is a statically linked x86-64 ELF
// executable (the guest has no dynamic loader or libc).
func CheckStatic(path, what, hint string) error {
	f, err := elf.Open(path)
	if err != nil {
		return fmt.Errorf("%s %s: %w", what, path, err)
	}
	defer f.Close()
	if f.Machine != elf.EM_X86_64 {
		return fmt.Errorf("%s %s is for %v, not x86-64", what, path, f.Machine)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("%s %s is dynamically linked; the guest has no libc: %s", what, path, hint)
		}
	}
	return nil
}

// Run boots a guest and runs opts.Binary in it. The error is for problems
// on the host before the guest could start (missing tools, unreadable
// files); everything that happens once QEMU runs is in the Result.
func Run(ctx context.Context, o Options) (*Result, error) {
	if o.CPU == "" {
		o.CPU = "max"
	}
	if o.Memory == "" {
		o.Memory = "1G"
	}
	if o.CPUs == 0 {
		o.CPUs = 2
	}
	if o.TCGThread == "" {
		o.TCGThread = "multi"
	}
	if o.TCGThread != "single" && o.TCGThread != "multi" {
		return nil, fmt.Errorf("TCG threading %q: want single or multi", o.TCGThread)
	}
	if o.TailLines == 0 {
		o.TailLines = 30
	}
	if o.Stderr == nil {
		o.Stderr = io.Discard
	}
	var err error
	if o.QEMU == "" {
		if o.QEMU, err = FindQEMU(); err != nil {
			return nil, err
		}
	}
	if o.Busybox == "" {
		if o.Busybox, err = FindBusybox(); err != nil {
			return nil, err
		}
	}
	if o.Init == "" {
		if o.Init, err = os.Executable(); err != nil {
			return nil, err
		}
	}
	if err := CheckStatic(o.Init, "guest init (vmexec itself)", "build vmexec with CGO_ENABLED=0"); err != nil {
		return nil, err
	}
	if err := CheckStatic(o.Busybox, "busybox", "install busybox-static"); err != nil {
		return nil, err
	}
	if _, err := os.Stat(o.Binary); err != nil {
		return nil, err
	}

	work, err := os.MkdirTemp("", "vmexec-")
	if err != nil {
		return nil, err
	}
	if o.Keep {
		fmt.Fprintf(o.Stderr, "vmexec: keeping work directory %s\n", work)
	} else {
		defer os.RemoveAll(work)
	}

	nonceBytes := make([]byte, 8)
	rand.Read(nonceBytes)
	cfg := &GuestConfig{
		Nonce:   hex.EncodeToString(nonceBytes),
		Binary:  path.Join(GuestBinDir, filepath.Base(o.Binary)),
		Args:    o.Args,
		Env:     o.Env,
		Dir:     o.GuestDir,
		Verbose: o.Verbose,
		NoHold:  o.NoHold,
	}
	initrd := filepath.Join(work, "initramfs.cpio")
	if err := buildInitramfs(initrd, &o, cfg); err != nil {
		return nil, fmt.Errorf("building initramfs: %w", err)
	}
	res, err := boot(ctx, &o, cfg, initrd)
	if res != nil && o.Keep {
		res.WorkDir = work
	}
	return res, err
}

func buildInitramfs(dst string, o *Options, cfg *GuestConfig) error {
	f, err := os.Create(dst)
	if err != nil {
		return err
	}
	defer f.Close()
	w := cpio.NewWriter(f)
	for _, d := range []string{"/proc", "/sys", "/dev", "/tmp", "/run", "/root", "/etc", "/mnt", "/boot"} {
		if err := w.Dir(d, 0o755); err != nil {
			return err
		}
	}
	w.CharDev("/dev/console", 0o600, 5, 1)
	w.CharDev("/dev/null", 0o666, 1, 3)
	if err := w.HostFile(o.Init, "/init", 0o755); err != nil {
		return err
	}
	// Debian 12's merged-/usr layout, so that paths (and /proc/PID/exe)
	// are the same as on the host: /bin -> usr/bin, /lib -> usr/lib, ...
	for _, d := range []string{"/usr/bin", "/usr/lib", "/usr/lib64"} {
		w.Dir(d, 0o755)
	}
	for link, target := range map[string]string{
		"/bin": "usr/bin", "/sbin": "usr/bin", "/lib": "usr/lib", "/lib64": "usr/lib64", "/usr/sbin": "bin",
	} {
		if err := w.Symlink(link, target); err != nil {
			return err
		}
	}
	if err := w.HostFile(o.Busybox, "/usr/bin/busybox", 0o755); err != nil {
		return err
	}
	libs := newLibCloser(w)
	if err := addHostTools(w, libs, o.HostTools, o.RequiredHostTools); err != nil {
		return err
	}
	list, err := exec.Command(o.Busybox, "--list").Output()
	if err != nil {
		return fmt.Errorf("%s --list: %w", o.Busybox, err)
	}
	for _, name := range strings.Fields(string(list)) {
		if name == "busybox" || strings.ContainsRune(name, '/') || w.Has("/usr/bin/"+name) {
			continue
		}
		if err := w.Symlink("/usr/bin/"+name, "busybox"); err != nil {
			return err
		}
	}
	w.Bytes("/etc/passwd", 0o644, []byte("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n"))
	w.Bytes("/etc/group", 0o644, []byte("root:x:0:\nnogroup:x:65534:\n"))
	w.Bytes("/etc/hosts", 0o644, []byte("127.0.0.1\tlocalhost vmexec\n::1\tlocalhost ip6-localhost\n"))
	w.Bytes("/etc/hostname", 0o644, []byte("vmexec\n"))
	if k := o.Kernel; k != nil && k.Config != "" && k.Release != "" {
		if err := w.HostFile(k.Config, "/boot/config-"+k.Release, 0o644); err != nil {
			return err
		}
	}

	if err := w.HostFile(o.Binary, cfg.Binary, 0o755); err != nil {
		return err
	}
	// A dynamically linked test binary (cgo) gets its libraries.
	if err := libs.add(o.Binary); err != nil {
		return fmt.Errorf("test binary: %w", err)
	}
	if err := w.Dir(o.GuestDir, 0o755); err != nil {
		return err
	}
	if o.HostDir != "" {
		td := filepath.Join(o.HostDir, "testdata")
		if fi, err := os.Stat(td); err == nil && fi.IsDir() {
			if err := w.HostTree(td, path.Join(o.GuestDir, "testdata"), false); err != nil {
				return fmt.Errorf("copying testdata: %w", err)
			}
		}
	}
	for _, fm := range o.Files {
		g := fm.Guest
		if !path.IsAbs(g) {
			g = path.Join(o.GuestDir, g)
		}
		fi, err := os.Stat(fm.Host)
		if err != nil {
			return fmt.Errorf("-file %s: %w", fm.Host, err)
		}
		if fi.IsDir() {
			err = w.HostTree(fm.Host, g, true)
		} else if err = w.HostFile(fm.Host, g, uint32(fi.Mode().Perm())); err == nil {
			err = libs.add(fm.Host)
		}
		if err != nil {
			return fmt.Errorf("-file %s:%s: %w", fm.Host, fm.Guest, err)
		}
	}
	cfgJSON, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return err
	}
	if err := w.Bytes(GuestConfigPath, 0o644, cfgJSON); err != nil {
		return err
	}
	if err := w.Close(); err != nil {
		return err
	}
	return f.Close()
}

// lineRing keeps the last n lines written to it.
type lineRing struct {
	mu      sync.Mutex
	n       int
	lines   []string
	partial []byte
	panic   string // the first "Kernel panic" line, wherever it was
}

func (r *lineRing) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	data := append(r.partial, p...)
	for {
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			break
		}
		r.add(string(bytes.TrimRight(data[:i], "\r")))
		data = data[i+1:]
	}
	r.partial = append([]byte(nil), data...)
	return len(p), nil
}

func (r *lineRing) add(l string) {
	if r.panic == "" && strings.Contains(l, "Kernel panic") {
		r.panic = strings.TrimSpace(l)
	}
	r.lines = append(r.lines, l)
	if len(r.lines) > r.n {
		r.lines = r.lines[len(r.lines)-r.n:]
	}
}

func (r *lineRing) Lines() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := append([]string(nil), r.lines...)
	if len(r.partial) > 0 {
		out = append(out, string(bytes.TrimRight(r.partial, "\r")))
		if len(out) > r.n {
			out = out[len(out)-r.n:]
		}
	}
	return out
}

func (r *lineRing) panicLine() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.panic == "" && strings.Contains(string(r.partial), "Kernel panic") {
		return strings.TrimSpace(string(r.partial))
	}
	return r.panic
}

// prefixWriter writes complete lines with a prefix.
type prefixWriter struct {
	w      io.Writer
	prefix string
	buf    []byte
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	p.buf = append(p.buf, b...)
	for {
		i := bytes.IndexByte(p.buf, '\n')
		if i < 0 {
			break
		}
		fmt.Fprintf(p.w, "%s%s\n", p.prefix, bytes.TrimRight(p.buf[:i], "\r"))
		p.buf = p.buf[i+1:]
	}
	return len(b), nil
}

func boot(ctx context.Context, o *Options, cfg *GuestConfig, initrd string) (*Result, error) {
	appendLine := "console=ttyS0 quiet panic=-1 " + o.Append
	if !o.NoHold && o.CPUs > 1 {
		// The guest boots on one CPU and onlines the others once it
		// holds the hot tracepoints: attaching the holds patches the
		// same code, which must not run on another vCPU meanwhile
		// (hotpatch_linux.go).
		appendLine += " maxcpus=1"
	}
	// Three pipes: console, test output, control. QEMU's "file" chardev
	// opens /proc/self/fd/N, i.e. the write ends we hand it as fds 3..5.
	type chanPipe struct{ r, w *os.File }
	var pipes [3]chanPipe
	for i := range pipes {
		r, w, err := os.Pipe()
		if err != nil {
			return nil, err
		}
		pipes[i] = chanPipe{r, w}
	}
	args := []string{
		"-accel", "tcg,thread=" + o.TCGThread, "-cpu", o.CPU,
		"-m", o.Memory, "-smp", strconv.Itoa(o.CPUs),
		"-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
		"-kernel", kernelImage(o), "-initrd", initrd,
		"-append", strings.TrimSpace(appendLine),
		"-chardev", "file,id=con,path=/proc/self/fd/3", "-serial", "chardev:con",
		"-chardev", "file,id=out,path=/proc/self/fd/4", "-serial", "chardev:out",
		"-chardev", "file,id=ctl,path=/proc/self/fd/5", "-serial", "chardev:ctl",
	}
	cmd := exec.Command(o.QEMU, args...)
	cmd.ExtraFiles = []*os.File{pipes[0].w, pipes[1].w, pipes[2].w}
	var qemuOut bytes.Buffer
	cmd.Stdout = &qemuOut
	cmd.Stderr = &qemuOut
	cmd.Stdin = nil
	// Own process group, so that a ^C to go test reaches us, not QEMU directly.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}

	start := time.Now()
	if err := cmd.Start(); err != nil {
		for _, p := range pipes {
			p.r.Close()
			p.w.Close()
		}
		return nil, fmt.Errorf("starting %s: %w", o.QEMU, err)
	}
	for _, p := range pipes {
		p.w.Close()
	}

	res := &Result{}
	ring := &lineRing{n: o.TailLines}
	var consoleSinks []io.Writer
	consoleSinks = append(consoleSinks, ring)
	if o.ConsoleLog != "" {
		if lf, err := os.Create(o.ConsoleLog); err == nil {
			defer lf.Close()
			consoleSinks = append(consoleSinks, lf)
		} else {
			fmt.Fprintf(o.Stderr, "vmexec: console log: %v\n", err)
		}
	}
	if o.Verbose {
		consoleSinks = append(consoleSinks, &prefixWriter{w: o.Stderr, prefix: "vmexec: console: "})
	}

	var wg sync.WaitGroup
	var mu sync.Mutex
	var final *record
	wg.Add(3)
	go func() {
		defer wg.Done()
		io.Copy(io.MultiWriter(consoleSinks...), pipes[0].r)
	}()
	go func() {
		defer wg.Done()
		n, _ := io.Copy(o.Stdout, pipes[1].r)
		mu.Lock()
		res.OutputBytes = n
		mu.Unlock()
	}()
	go func() {
		defer wg.Done()
		sc := bufio.NewScanner(pipes[2].r)
		for sc.Scan() {
			rec, ok := parseRecord(cfg.Nonce, sc.Text())
			if !ok {
				continue
			}
			mu.Lock()
			switch rec.Kind {
			case recStart:
				res.Started = true
				res.Release = rec.Rest
				res.BootTime = time.Since(start)
			case recExit, recSignal, recError:
				if final == nil {
					r := rec
					final = &r
				}
			}
			mu.Unlock()
		}
	}()

	waitErr := make(chan error, 1)
	go func() { waitErr <- cmd.Wait() }()
	timer := time.NewTimer(o.Timeout)
	defer timer.Stop()
	var killedFor Status = -1
	var qerr error
	select {
	case qerr = <-waitErr:
	case <-timer.C:
		killedFor = TimedOut
	case <-ctx.Done():
		killedFor = Interrupted
	}
	if killedFor >= 0 {
		cmd.Process.Kill()
		qerr = <-waitErr
	}
	res.Total = time.Since(start)

	// QEMU is gone, so the pipes reach EOF once drained.
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		for _, p := range pipes {
			p.r.Close()
		}
		<-done
	}
	for _, p := range pipes {
		p.r.Close()
	}
	for _, l := range ring.Lines() {
		// The last line of every clean run; not worth reporting.
		if strings.HasSuffix(l, "] reboot: Power down") {
			continue
		}
		res.ConsoleTail = append(res.ConsoleTail, l)
	}

	mu.Lock()
	defer mu.Unlock()
	qemuMsg := strings.TrimSpace(qemuOut.String())
	switch {
	case final != nil && final.Kind == recExit:
		code, ok := final.exitCode()
		if !ok {
			res.Status = GuestError
			res.Detail = "malformed exit record " + strconv.Quote(final.Rest)
			break
		}
		res.Status, res.ExitCode = Exited, code
		if killedFor == TimedOut {
			// The status arrived, but the guest did not power off.
			res.Detail = fmt.Sprintf("the guest reported exit status %d but did not power off within %s", code, o.Timeout)
		}
	case final != nil && final.Kind == recSignal:
		res.Status, res.Signal = Signaled, final.Rest
		res.Detail = "the test binary was killed by signal " + final.Rest + " in the guest"
	case final != nil:
		res.Status = GuestError
		res.Detail = "the guest could not run the test binary: " + final.Rest
	case killedFor == TimedOut:
		res.Status = TimedOut
		what := "before the guest finished booting"
		if res.Started {
			what = fmt.Sprintf("the test binary was still running (started %s after boot began)", res.BootTime.Round(100*time.Millisecond))
		}
		res.Detail = fmt.Sprintf("timed out after %s and killed the guest: %s", o.Timeout, what)
	case killedFor == Interrupted:
		res.Status = Interrupted
		res.Detail = fmt.Sprintf("interrupted (%v) after %s; killed the guest", context.Cause(ctx), res.Total.Round(100*time.Millisecond))
	default:
		res.Status = NoStatus
		switch {
		case ring.panicLine() != "":
			res.Detail = "the guest kernel panicked before the test's exit status was reported (" + ring.panicLine() + ")"
		case qerr != nil:
			res.Detail = fmt.Sprintf("QEMU failed (%v) before the test's exit status was reported", qerr)
		default:
			res.Detail = "the guest stopped without reporting the test's exit status"
		}
		if !res.Started {
			res.Detail += "; the test binary never started"
		}
	}
	if qemuMsg != "" && (res.Status != Exited || qerr != nil) {
		res.Detail += "\nQEMU said: " + qemuMsg
	}
	return res, nil
}

// kernelImage picks the image QEMU boots: the uncompressed vmlinux (PVH
// entry, no SeaBIOS and no in-guest decompression, about 4 s faster under
// TCG) when there is one, else the bzImage.
func kernelImage(o *Options) string {
	if o.Kernel.Vmlinux != "" && !o.NoPVH {
		return o.Kernel.Vmlinux
	}
	return o.Kernel.Vmlinuz
}

// SortedEnv returns env sorted by name, for stable output.
func SortedEnv(env []string) []string {
	out := append([]string(nil), env...)
	sort.Strings(out)
	return out
}
