//go:build linux

package vm

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"
)

// shimArg0 is argv[0] of the guest init's helper process (see GuestShim).
const shimArg0 = "vmexec-shim"

// IsGuestInit reports whether this process is the guest's PID 1, started by
// the kernel from the initramfs vmexec built.
func IsGuestInit() bool {
	return os.Getpid() == 1 && fileExistsGuest(GuestConfigPath)
}

// IsGuestShim reports whether this process is the guest init's shim.
func IsGuestShim() bool {
	return len(os.Args) > 0 && os.Args[0] == shimArg0 && os.Getppid() == 1 && fileExistsGuest(GuestConfigPath)
}

// GuestShim runs the test binary as its child and exits the way it did:
// with its exit code, or killed by the same signal. It exists so that the
// test's parent is an ordinary process, as go test is on a host, not PID 1
// (tests of process lineage and of what may be signalled look at it).
func GuestShim() {
	var cfg GuestConfig
	data, err := os.ReadFile(GuestConfigPath)
	if err == nil {
		err = json.Unmarshal(data, &cfg)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "vmexec-shim: %v\n", err)
		os.Exit(127)
	}
	cmd := exec.Command(cfg.Binary, cfg.Args...)
	cmd.Dir = cfg.Dir
	cmd.Env = cfg.Env
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	err = cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		os.Exit(0)
	case errors.As(err, &ee):
		ws, _ := ee.Sys().(syscall.WaitStatus)
		if ws.Signaled() {
			sig := ws.Signal()
			signal.Reset(sig)
			syscall.Kill(os.Getpid(), sig)
			time.Sleep(time.Second)
			os.Exit(128 + int(sig))
		}
		os.Exit(ws.ExitStatus())
	default:
		if c, err := os.OpenFile("/dev/console", os.O_WRONLY, 0); err == nil {
			fmt.Fprintf(c, "vmexec-shim: running %s: %v\n", cfg.Binary, err)
		}
		fmt.Fprintf(os.Stderr, "vmexec-shim: running %s: %v\n", cfg.Binary, err)
		os.Exit(127)
	}
}

func fileExistsGuest(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// Linux constants the syscall package lacks (asm-generic/termbits.h, ioctls.h; x86).
const (
	termCBAUD   = 0o010017
	termCRTSCTS = 0o20000000000
	ioctlTCSBRK = 0x5409
)

type mountSpec struct {
	source, target, fstype string
	flags                  uintptr
	data                   string
	required               bool
}

var guestMounts = []mountSpec{
	{"proc", "/proc", "proc", syscall.MS_NOSUID | syscall.MS_NODEV | syscall.MS_NOEXEC, "", true},
	{"sysfs", "/sys", "sysfs", syscall.MS_NOSUID | syscall.MS_NODEV | syscall.MS_NOEXEC, "", true},
	{"devtmpfs", "/dev", "devtmpfs", syscall.MS_NOSUID, "mode=0755", true},
	{"devpts", "/dev/pts", "devpts", syscall.MS_NOSUID | syscall.MS_NOEXEC, "mode=0620,ptmxmode=0666", false},
	{"tmpfs", "/dev/shm", "tmpfs", syscall.MS_NOSUID | syscall.MS_NODEV, "mode=1777", false},
	{"tmpfs", "/tmp", "tmpfs", syscall.MS_NOSUID | syscall.MS_NODEV, "mode=1777", true},
	{"tmpfs", "/run", "tmpfs", syscall.MS_NOSUID | syscall.MS_NODEV, "mode=0755", false},
	{"tracefs", "/sys/kernel/tracing", "tracefs", syscall.MS_NOSUID | syscall.MS_NODEV | syscall.MS_NOEXEC, "", true},
	{"debugfs", "/sys/kernel/debug", "debugfs", syscall.MS_NOSUID | syscall.MS_NODEV | syscall.MS_NOEXEC, "", false},
	{"bpf", "/sys/fs/bpf", "bpf", syscall.MS_NOSUID | syscall.MS_NODEV | syscall.MS_NOEXEC, "mode=0700", true},
	{"cgroup2", "/sys/fs/cgroup", "cgroup2", syscall.MS_NOSUID | syscall.MS_NODEV | syscall.MS_NOEXEC, "", true},
}

// GuestMain is the guest's init: it mounts the usual file systems, runs the
// test binary as a child with its output on the test-output port, reports
// its exit status on the control port and powers the machine off. It never
// returns. If it panics, the kernel panics ("Attempted to kill init"),
// reboots (panic=-1), QEMU exits (-no-reboot), and the host sees no EXIT
// record: a failure, never a silent pass.
func GuestMain() {
	start := time.Now()
	console := os.Stderr
	logf := func(format string, args ...any) {
		fmt.Fprintf(console, "vmexec-init: "+format+"\n", args...)
	}

	var cfg GuestConfig
	data, err := os.ReadFile(GuestConfigPath)
	if err == nil {
		err = json.Unmarshal(data, &cfg)
	}
	if err != nil {
		logf("FATAL: reading %s: %v", GuestConfigPath, err)
		powerOff()
	}

	var setupErrs []string
	os.Chmod("/", 0o755) // rootfs starts as 1777; a host's / is 0755
	for _, m := range guestMounts {
		if err := os.MkdirAll(m.target, 0o755); err != nil && m.required {
			setupErrs = append(setupErrs, fmt.Sprintf("mkdir %s: %v", m.target, err))
			continue
		}
		// Files shipped into /tmp (-file host paths often are there) must
		// survive the tmpfs mounted over it: move them aside, copy back.
		var saved string
		if m.fstype == "tmpfs" && !isEmptyDir(m.target) {
			saved = m.target + ".vmexec-initramfs"
			if err := os.Rename(m.target, saved); err != nil {
				setupErrs = append(setupErrs, err.Error())
				continue
			}
			os.Mkdir(m.target, 0o755)
		}
		err := syscall.Mount(m.source, m.target, m.fstype, m.flags, m.data)
		if saved != "" {
			if cerr := copyTree(saved, m.target); cerr != nil {
				setupErrs = append(setupErrs, fmt.Sprintf("restoring %s: %v", m.target, cerr))
			}
			os.RemoveAll(saved)
		}
		if err != nil {
			msg := fmt.Sprintf("mount %s on %s: %v", m.fstype, m.target, err)
			if m.required {
				setupErrs = append(setupErrs, msg)
			} else if cfg.Verbose {
				logf("warning: %s", msg)
			}
		}
	}
	for name, target := range map[string]string{"/dev/fd": "/proc/self/fd", "/dev/stdin": "/proc/self/fd/0", "/dev/stdout": "/proc/self/fd/1", "/dev/stderr": "/proc/self/fd/2"} {
		os.Symlink(target, name)
	}
	syscall.Sethostname([]byte("vmexec"))
	if err := loopbackUp(); err != nil && cfg.Verbose {
		logf("warning: lo up: %v", err)
	}

	ctl, err := openPort(guestCtlPort)
	if err != nil {
		logf("FATAL: control port: %v", err)
		powerOff()
	}
	report := func(kind, rest string) {
		ctl.WriteString(formatRecord(cfg.Nonce, kind, rest))
		tcdrain(ctl)
	}
	fail := func(format string, args ...any) {
		msg := fmt.Sprintf(format, args...)
		logf("ERROR: %s", msg)
		report(recError, msg)
		powerOff()
	}
	if len(setupErrs) > 0 {
		fail("guest setup: %s", strings.Join(setupErrs, "; "))
	}
	var hold func()
	if !cfg.NoHold {
		if hold, err = holdHotTracepoints(); err != nil {
			fail("guest setup: %v (vmexec -no-hold runs without)", err)
		}
		if err := onlineCPUs(); err != nil {
			fail("guest setup: %v", err)
		}
	}
	out, err := openPort(guestOutPort)
	if err != nil {
		fail("test output port: %v", err)
	}
	var uts syscall.Utsname
	syscall.Uname(&uts)
	release := utsString(uts.Release[:])
	// Always one line on the console, so that a hang report shows how far
	// the guest got.
	logf("kernel %s, init ready after %s; running %s %q in %s", release, time.Since(start).Round(time.Millisecond), cfg.Binary, cfg.Args, cfg.Dir)

	devnull, err := os.Open("/dev/null")
	if err != nil {
		fail("open /dev/null: %v", err)
	}
	if fi, err := os.Stat(cfg.Binary); err != nil || fi.Mode()&0o111 == 0 {
		fail("test binary %s is missing or not executable (%v)", cfg.Binary, err)
	}
	if fi, err := os.Stat(cfg.Dir); err != nil || !fi.IsDir() {
		fail("working directory %s: %v", cfg.Dir, err)
	}
	// The test runs under a shim (this binary again), not as our child.
	cmd := &exec.Cmd{Path: "/init", Args: []string{shimArg0}}
	cmd.Dir = cfg.Dir
	cmd.Env = cfg.Env
	cmd.Stdin = devnull
	cmd.Stdout = out
	cmd.Stderr = out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	report(recStart, release)
	err = cmd.Run()
	// The holding programs and links close when collected (cilium/ebpf
	// attaches a cleanup to every descriptor): reachable until the test
	// is done, or a GC in this process (forced every 2 minutes) would
	// detach them under the running test.
	runtime.KeepAlive(hold)
	tcdrain(out) // every byte of test output is on the host before the status
	var ee *exec.ExitError
	switch {
	case err == nil:
		report(recExit, "0")
	case errors.As(err, &ee):
		ws, _ := ee.Sys().(syscall.WaitStatus)
		if ws.Signaled() {
			logf("test binary killed by signal %d (%v)", int(ws.Signal()), ws.Signal())
			report(recSignal, strconv.Itoa(int(ws.Signal()))+" "+ws.Signal().String())
		} else {
			report(recExit, strconv.Itoa(ws.ExitStatus()))
		}
	default:
		fail("running %s: %v", cfg.Binary, err)
	}
	if cfg.Verbose {
		logf("test binary done after %s; powering off", time.Since(start).Round(time.Millisecond))
	}
	powerOff()
}

func isEmptyDir(p string) bool {
	ents, err := os.ReadDir(p)
	return err != nil || len(ents) == 0
}

// copyTree copies the contents of dir src into dir dst, keeping modes and
// symlinks.
func copyTree(src, dst string) error {
	ents, err := os.ReadDir(src)
	if err != nil {
		return err
	}
	for _, e := range ents {
		s, d := src+"/"+e.Name(), dst+"/"+e.Name()
		fi, err := os.Lstat(s)
		if err != nil {
			return err
		}
		switch {
		case fi.Mode()&os.ModeSymlink != 0:
			target, err := os.Readlink(s)
			if err != nil {
				return err
			}
			if err := os.Symlink(target, d); err != nil {
				return err
			}
		case fi.IsDir():
			if err := os.Mkdir(d, fi.Mode().Perm()); err != nil && !os.IsExist(err) {
				return err
			}
			if err := copyTree(s, d); err != nil {
				return err
			}
			os.Chmod(d, fi.Mode().Perm()|fi.Mode()&(os.ModeSticky|os.ModeSetuid|os.ModeSetgid))
		case fi.Mode().IsRegular():
			data, err := os.ReadFile(s)
			if err != nil {
				return err
			}
			if err := os.WriteFile(d, data, fi.Mode().Perm()); err != nil {
				return err
			}
		}
	}
	return nil
}

func utsString(b []int8) string {
	var s []byte
	for _, c := range b {
		if c == 0 {
			break
		}
		s = append(s, byte(c))
	}
	return string(s)
}

func powerOff() {
	syscall.Sync()
	for {
		syscall.Reboot(syscall.LINUX_REBOOT_CMD_POWER_OFF)
		time.Sleep(time.Second)
	}
}

// openPort opens a serial port and makes it raw: no CR/LF translation, no
// echo, 8 bits, so that bytes pass unchanged.
func openPort(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, err
	}
	var t syscall.Termios
	if err := ioctl(f, syscall.TCGETS, uintptr(unsafe.Pointer(&t))); err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: TCGETS: %w", path, err)
	}
	t.Iflag &^= syscall.IGNBRK | syscall.BRKINT | syscall.PARMRK | syscall.ISTRIP | syscall.INLCR | syscall.IGNCR | syscall.ICRNL | syscall.IXON | syscall.IXOFF
	t.Oflag &^= syscall.OPOST
	t.Lflag &^= syscall.ECHO | syscall.ECHONL | syscall.ICANON | syscall.ISIG | syscall.IEXTEN
	t.Cflag &^= syscall.CSIZE | syscall.PARENB | termCBAUD | termCRTSCTS
	t.Cflag |= syscall.CS8 | syscall.B115200 | syscall.CLOCAL | syscall.CREAD
	t.Ispeed, t.Ospeed = syscall.B115200, syscall.B115200
	if err := ioctl(f, syscall.TCSETS, uintptr(unsafe.Pointer(&t))); err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: TCSETS: %w", path, err)
	}
	return f, nil
}

func ioctl(f *os.File, req, arg uintptr) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var errno syscall.Errno
	rc.Control(func(fd uintptr) {
		_, _, errno = syscall.Syscall(syscall.SYS_IOCTL, fd, req, arg)
	})
	if errno != 0 {
		return errno
	}
	return nil
}

// tcdrain waits until everything written to the port has been transmitted.
func tcdrain(f *os.File) {
	ioctl(f, ioctlTCSBRK, 1)
}

func loopbackUp() error {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_DGRAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer syscall.Close(fd)
	var ifr [40]byte
	copy(ifr[:], "lo")
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, uintptr(fd), syscall.SIOCGIFFLAGS, uintptr(unsafe.Pointer(&ifr[0]))); e != 0 {
		return e
	}
	flags := *(*uint16)(unsafe.Pointer(&ifr[16]))
	flags |= syscall.IFF_UP | syscall.IFF_RUNNING
	*(*uint16)(unsafe.Pointer(&ifr[16])) = flags
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, uintptr(fd), syscall.SIOCSIFFLAGS, uintptr(unsafe.Pointer(&ifr[0]))); e != 0 {
		return e
	}
	return nil
}
