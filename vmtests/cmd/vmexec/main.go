//go:build linux

// Command vmexec runs a Go test binary inside a QEMU guest booted with a
// given Debian kernel. It is meant to be used as go test's -exec program:
//
//	CGO_ENABLED=0 go test -exec "$PWD/bin/vmexec -kernel 6.1" ./lineage/
//
// go test runs it as "vmexec [flags] /tmp/go-build…/pkg.test -test.…"
// in the package's source directory. vmexec boots the kernel with an
// initramfs holding busybox, the test binary, the package's testdata/ and
// any -file, runs the binary there with the same arguments, streams its
// output to stdout byte for byte, and exits with its exit status.
//
// vmexec must be built with CGO_ENABLED=0: the same binary is the guest's
// /init.
//
// Other modes:
//
//	vmexec -kernel 6.12 -resolve   download if needed, print the kernel as JSON
//	vmexec -kernel 6.1 -- /bin/sh -c 'uname -a'  (any static program runs)
//
// Exit status: the program's own status; 128+N if a signal killed it in the
// guest; 125 if the guest did not report a status (kernel panic, timeout,
// QEMU failure, interrupt); 2 for usage errors.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/mcptrace/mcptrace/vmtests/internal/kernel"
	"github.com/mcptrace/mcptrace/vmtests/internal/vm"
)

// timeoutMargin is added to the test binary's own -test.timeout: boot time,
// plus room for the test's timeout panic (a goroutine dump) to reach us.
// go test itself kills the exec program one minute after -timeout, so the
// margin stays below that for our report to come first.
const timeoutMargin = 45 * time.Second

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

func main() {
	if vm.IsGuestInit() {
		vm.GuestMain() // never returns
	}
	if vm.IsGuestShim() {
		vm.GuestShim() // never returns
	}
	os.Exit(run())
}

func run() int {
	fs := flag.NewFlagSet("vmexec", flag.ContinueOnError)
	defKernel := os.Getenv("MCPTRACE_VM_KERNEL")
	if defKernel == "" {
		defKernel = "6.1"
	}
	var (
		kernelSpec = fs.String("kernel", defKernel, "kernel: series `5.10|6.1|6.12|7|sid`, a Debian codename, or the path of a vmlinuz ($MCPTRACE_VM_KERNEL)")
		timeout    = fs.Duration("timeout", 10*time.Minute, "kill the guest after this long (default: the larger of 10m and the test's -test.timeout + 45s)")
		mem        = fs.String("mem", "1G", "guest memory")
		cpuModel   = fs.String("cpu", envOr("MCPTRACE_VM_CPU", "max"), "QEMU CPU model ($MCPTRACE_VM_CPU)")
		cpus       = fs.Int("smp", 2, "guest CPUs")
		tcgThread  = fs.String("tcg-thread", envOr("MCPTRACE_VM_TCG_THREAD", "multi"), "QEMU TCG threading, `multi` or single: single keeps code the kernel patches coherent across vCPUs but delays every IPI up to 100 ms (vmtests/doc.go) ($MCPTRACE_VM_TCG_THREAD)")
		noHold     = fs.Bool("no-hold", os.Getenv("MCPTRACE_VM_NO_HOLD") != "", "do not hold the hot tracepoints with no-op programs in the guest; tests that attach to them then make the kernel patch code under running vCPUs, which multi-threaded TCG does not keep coherent (vmtests/doc.go) ($MCPTRACE_VM_NO_HOLD)")
		cacheDir   = fs.String("cache", kernel.DefaultCacheDir(), "kernel cache directory ($MCPTRACE_VM_CACHE)")
		refresh    = fs.Bool("refresh", false, "ask apt for the newest kernel of the series even if one was resolved recently")
		resolve    = fs.Bool("resolve", false, "only resolve (and download) the kernel and print it as JSON")
		consoleLog = fs.String("console-log", os.Getenv("MCPTRACE_VM_CONSOLE_LOG"), "write the guest console (kernel messages) to this file, or to <name>.console.log in this directory if it is one ($MCPTRACE_VM_CONSOLE_LOG)")
		verbose    = fs.Bool("v", os.Getenv("MCPTRACE_VM_VERBOSE") != "", "echo the guest console to stderr while it runs (mixes into go test output) ($MCPTRACE_VM_VERBOSE)")
		keep       = fs.Bool("keep", false, "keep the work directory with the initramfs")
		appendArgs = fs.String("append", os.Getenv("MCPTRACE_VM_APPEND"), "extra kernel command line ($MCPTRACE_VM_APPEND)")
		noPVH      = fs.Bool("no-pvh", os.Getenv("MCPTRACE_VM_NO_PVH") != "", "boot the compressed bzImage instead of the cached uncompressed vmlinux ($MCPTRACE_VM_NO_PVH)")
		guestDir   = fs.String("guest-dir", "", "working directory in the guest (default /src/<package path in its module>)")
		hostTools  = fs.String("host-tools", envOr("MCPTRACE_VM_HOST_TOOLS", strings.Join(vm.DefaultHostTools, " ")), "host commands copied into the guest's /bin with their libraries, replacing busybox's; \"none\" for busybox only ($MCPTRACE_VM_HOST_TOOLS)")
		bootTries  = fs.Int("boot-tries", 3, "boot again, up to this many boots in all, when the guest fails BEFORE the test binary started (TCG sometimes panics a kernel during early boot); a failure after the start is never retried")
		files      multiFlag
		envs       multiFlag
		needTools  multiFlag
	)
	fs.Var(&files, "file", "ship `host[:guest]` into the guest (repeatable; a relative guest path is relative to the guest working directory; default guest path: the host path)")
	fs.Var(&needTools, "host-tool", "also ship host command `NAME` (must exist on the host; repeatable)")
	fs.Var(&envs, "env", "forward environment variable `NAME` (or set NAME=VALUE) in the guest (repeatable); MCPTRACE_* is always forwarded")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: vmexec [flags] test-binary [args...]\n       vmexec [flags] -resolve\n\nflags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(os.Args[1:]); err != nil {
		return 2
	}
	timeoutSet := false
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "timeout" {
			timeoutSet = true
		}
	})

	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	sigs := make(chan os.Signal, 1)
	// SIGQUIT is what go test sends when its own -timeout (+1m) expires.
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM, syscall.SIGQUIT, syscall.SIGHUP)
	go func() {
		s := <-sigs
		cancel(fmt.Errorf("vmexec received %v", s))
	}()

	res := &kernel.Resolver{CacheDir: *cacheDir, Log: os.Stderr, Refresh: *refresh}
	k, err := res.Resolve(ctx, *kernelSpec)
	if err != nil {
		fmt.Fprintf(os.Stderr, "vmexec: FAIL: kernel %q: %v\n", *kernelSpec, err)
		return 125
	}
	if *resolve {
		out, _ := json.MarshalIndent(k, "", "  ")
		fmt.Println(string(out))
		return 0
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return 2
	}
	binary, err := filepath.Abs(fs.Arg(0))
	if err != nil {
		fmt.Fprintf(os.Stderr, "vmexec: %v\n", err)
		return 125
	}
	args := fs.Args()[1:]

	cwd, err := os.Getwd()
	if err != nil {
		fmt.Fprintf(os.Stderr, "vmexec: %v\n", err)
		return 125
	}
	gdir := *guestDir
	if gdir == "" {
		gdir = defaultGuestDir(cwd)
	}

	var fileMaps []vm.FileMap
	for _, f := range files {
		host, guest, _ := strings.Cut(f, ":")
		if host == "" {
			fmt.Fprintf(os.Stderr, "vmexec: bad -file %q: want host[:guest]\n", f)
			return 2
		}
		host, _ = filepath.Abs(host)
		if guest == "" {
			guest = host
		}
		fileMaps = append(fileMaps, vm.FileMap{Host: host, Guest: guest})
	}

	env, err := guestEnv(envs, k, *kernelSpec)
	if err != nil {
		fmt.Fprintf(os.Stderr, "vmexec: %v\n", err)
		return 2
	}

	if fi, err := os.Stat(*consoleLog); *consoleLog != "" && err == nil && fi.IsDir() {
		*consoleLog = filepath.Join(*consoleLog, strings.TrimSuffix(filepath.Base(binary), ".test")+".console.log")
	}

	limit := *timeout
	if !timeoutSet {
		if tt, ok := testTimeout(args); ok && tt > 0 && tt+timeoutMargin > limit {
			limit = tt + timeoutMargin
		}
	}

	opts := vm.Options{
		Kernel:            k,
		CPU:               *cpuModel,
		Memory:            *mem,
		CPUs:              *cpus,
		TCGThread:         *tcgThread,
		NoHold:            *noHold,
		Timeout:           limit,
		Binary:            binary,
		Args:              args,
		HostDir:           cwd,
		GuestDir:          gdir,
		Files:             fileMaps,
		Env:               env,
		HostTools:         toolList(*hostTools),
		RequiredHostTools: needTools,
		Stdout:            os.Stdout,
		Stderr:            os.Stderr,
		ConsoleLog:        *consoleLog,
		Verbose:           *verbose,
		Keep:              *keep,
		Append:            *appendArgs,
		NoPVH:             *noPVH,
	}
	r, err := vm.Run(ctx, opts)
	// A guest that died before the test binary started produced no test
	// output and no result: booting again swallows nothing. Each retry is
	// said on stderr with the reason and the console's last lines.
	for try := 2; err == nil && try <= *bootTries && r.Status == vm.NoStatus && !r.Started && ctx.Err() == nil; try++ {
		fmt.Fprintf(os.Stderr, "vmexec: warning: boot %d of %d failed before the test started (%s, kernel %s); booting again\n", try-1, *bootTries, r.Detail, k.Release)
		for _, l := range r.ConsoleTail[max(0, len(r.ConsoleTail)-5):] {
			fmt.Fprintf(os.Stderr, "vmexec: | %s\n", l)
		}
		r, err = vm.Run(ctx, opts)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "vmexec: FAIL: %v\n", err)
		return 125
	}
	if r.OK() {
		if r.Detail != "" {
			fmt.Fprintf(os.Stderr, "vmexec: warning: %s\n", r.Detail)
		}
		return 0
	}
	// Never swallow a failure: say what happened, on which kernel, and show
	// the end of the guest console.
	kdesc := k.Release
	if k.Package != "" {
		kdesc = fmt.Sprintf("%s, %s %s", k.Release, k.Package, k.Version)
	}
	if r.Status == vm.Exited {
		fmt.Fprintf(os.Stderr, "vmexec: test binary exited with status %d in the guest (kernel %s)\n", r.ExitCode, kdesc)
	} else {
		fmt.Fprintf(os.Stderr, "vmexec: FAIL: %s (kernel %s)\n", r.Detail, kdesc)
	}
	tail := r.ConsoleTail
	if r.Status == vm.Exited {
		// The test failed on its own; show the console only if the kernel
		// said something (a WARN, a BPF splat), not just our init's line.
		tail = nil
		for _, l := range r.ConsoleTail {
			if !strings.HasPrefix(l, "vmexec-init: ") {
				tail = r.ConsoleTail
				break
			}
		}
	}
	if len(tail) > 0 {
		fmt.Fprintf(os.Stderr, "vmexec: last %d guest console lines:\n", len(tail))
		for _, l := range tail {
			fmt.Fprintf(os.Stderr, "vmexec: | %s\n", l)
		}
	} else if r.Status != vm.Exited {
		fmt.Fprintf(os.Stderr, "vmexec: the guest console was empty\n")
	}
	return r.Code()
}

// guestEnv builds the test's environment in the guest: a small fixed base,
// MCPTRACE_* from the host, -env names, and markers describing the guest.
func guestEnv(names []string, k *kernel.Kernel, spec string) ([]string, error) {
	m := map[string]string{
		"PATH":   "/bin:/sbin:/usr/bin:/usr/sbin",
		"HOME":   "/root",
		"TMPDIR": "/tmp",
		"USER":   "root",
		"LANG":   "C",
	}
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "MCPTRACE_") {
			k, v, _ := strings.Cut(kv, "=")
			m[k] = v
		}
	}
	for _, n := range names {
		if k, v, ok := strings.Cut(n, "="); ok {
			if k == "" {
				return nil, fmt.Errorf("bad -env %q", n)
			}
			m[k] = v
			continue
		}
		if v, ok := os.LookupEnv(n); ok {
			m[n] = v
		}
	}
	m["MCPTRACE_VM_GUEST"] = "1"
	m["MCPTRACE_VM_KERNEL_RELEASE"] = k.Release
	m["MCPTRACE_VM_KERNEL_SPEC"] = spec
	if k.Version != "" {
		m["MCPTRACE_VM_KERNEL_PACKAGE"] = k.Package + "=" + k.Version
	}
	var env []string
	for k, v := range m {
		env = append(env, k+"="+v)
	}
	return vm.SortedEnv(env), nil
}

// testTimeout finds -test.timeout in the test binary's arguments.
func testTimeout(args []string) (time.Duration, bool) {
	for i, a := range args {
		if a == "--" {
			break
		}
		name := strings.TrimLeft(a, "-")
		if len(name) == len(a) {
			continue
		}
		var val string
		if n, v, ok := strings.Cut(name, "="); ok {
			if n != "test.timeout" {
				continue
			}
			val = v
		} else if name == "test.timeout" && i+1 < len(args) {
			val = args[i+1]
		} else {
			continue
		}
		d, err := time.ParseDuration(val)
		return d, err == nil
	}
	return 0, false
}

// defaultGuestDir is /src/<path of dir inside its Go module>, or /src/<base>
// outside a module.
func defaultGuestDir(dir string) string {
	for d := dir; ; {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			rel, err := filepath.Rel(d, dir)
			if err == nil {
				return path.Join("/src", filepath.ToSlash(rel))
			}
			break
		}
		parent := filepath.Dir(d)
		if parent == d {
			break
		}
		d = parent
	}
	return path.Join("/src", filepath.Base(dir))
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func toolList(s string) []string {
	if strings.TrimSpace(s) == "none" {
		return nil
	}
	return strings.Fields(s)
}
