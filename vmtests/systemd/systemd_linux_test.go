package systemd_test

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mcptrace/mcptrace/internal/debian"
	"github.com/mcptrace/mcptrace/internal/testenv"
	"github.com/mcptrace/mcptrace/vmtests/internal/cpio"
	"github.com/mcptrace/mcptrace/vmtests/internal/kernel"
	"github.com/mcptrace/mcptrace/vmtests/internal/vm"
)

// bootKernel is the kernel the root boots with: Debian 12's own.
const bootKernel = "6.1"

// bootWait bounds the boot and the check: under TCG, systemd reaches
// multi-user.target in about a minute here; the check waits up to 2
// minutes for each agent start.
const bootWait = 8 * time.Minute

// trimmed are parts of the root the check never uses, left out of the
// initramfs to keep it small.
var trimmed = []string{"usr/share/doc", "usr/share/man", "usr/share/locale", "usr/share/info", "var/cache/apt", "var/lib/apt/lists"}

// TestSystemdRestartKeepsASessionEnforced boots a Debian 12 root with the
// package installed (scripts/deb.sh, dpkg -i) under systemd in QEMU. In
// it, testdata/mcptrace-vmcheck waits for mcptrace.service to serve,
// starts a session (`mcptrace run`: a daemon whose wrapper exited, a
// child, the root), restarts the unit with `systemctl restart mcptrace`,
// checks the new agent still lists the session's members, kills the root,
// and waits for the members to be ended. It also reports the agent's
// capabilities and `systemd-analyze security` as rated booted.
func TestSystemdRestartKeepsASessionEnforced(t *testing.T) {
	testenv.Root(t)
	for _, tool := range []string{"dpkg-deb", "debootstrap"} {
		if _, err := exec.LookPath(tool); err != nil {
			testenv.Missing(t, tool, "scripts/setup.sh test installs dpkg and debootstrap")
		}
	}
	qemu, err := vm.FindQEMU()
	if err != nil {
		testenv.Missing(t, "qemu-system-x86_64", err.Error())
	}
	if testenv.Emulated() {
		t.Fatal("vmtests/systemd runs QEMU itself; it is not to run inside a VM matrix guest (Makefile VMTEST_HOST_ONLY)")
	}
	if testing.Short() {
		t.Skip("builds the package and a Debian root and boots it: not with -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()

	res := &kernel.Resolver{CacheDir: kernel.DefaultCacheDir(), Log: testWriter{t}}
	k, err := res.Resolve(ctx, bootKernel)
	if err != nil {
		t.Fatalf("kernel %s: %v", bootKernel, err)
	}
	image := k.Vmlinux
	if image == "" {
		image = k.Vmlinuz
	}

	dir := t.TempDir()
	root := filepath.Join(dir, "root")
	start := time.Now()
	if err := debian.Bootstrap(ctx, "bookworm", root, debian.SystemdRoot...); err != nil {
		t.Fatal(err)
	}
	t.Logf("debootstrap bookworm: %v", time.Since(start).Round(time.Second))

	debs := filepath.Join(dir, "debs")
	if out, err := exec.CommandContext(ctx, "../../scripts/deb.sh", "0.1.0~booted", debs).CombinedOutput(); err != nil {
		t.Fatalf("scripts/deb.sh: %v\n%s", err, out)
	}
	m, _ := filepath.Glob(filepath.Join(debs, "mcptrace_0.1.0~booted_*.deb"))
	if len(m) != 1 {
		t.Fatalf("scripts/deb.sh wrote %v", m)
	}
	copyFile(t, m[0], filepath.Join(root, "tmp/mcptrace.deb"), 0o644)
	if out, err := exec.CommandContext(ctx, "chroot", root, "dpkg", "-i", "/tmp/mcptrace.deb").CombinedOutput(); err != nil {
		t.Fatalf("dpkg -i in the root: %v\n%s", err, out)
	}
	os.Remove(filepath.Join(root, "tmp/mcptrace.deb"))

	copyFile(t, "testdata/mcptrace-vmcheck", filepath.Join(root, "usr/local/sbin/mcptrace-vmcheck"), 0o755)
	copyFile(t, "testdata/mcptrace-vmcheck.service", filepath.Join(root, "etc/systemd/system/mcptrace-vmcheck.service"), 0o644)
	links := map[string]string{
		// enabled
		"etc/systemd/system/multi-user.target.wants/mcptrace-vmcheck.service": "/etc/systemd/system/mcptrace-vmcheck.service",
		// masked: no login prompt on the console the check writes to
		"etc/systemd/system/serial-getty@ttyS0.service": "/dev/null",
		"etc/systemd/system/getty@tty1.service":         "/dev/null",
	}
	for link, target := range links {
		if err := os.Symlink(target, filepath.Join(root, link)); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range trimmed {
		os.RemoveAll(filepath.Join(root, p))
	}

	initrd := filepath.Join(dir, "root.cpio")
	packRoot(t, root, initrd)

	console := bootRoot(ctx, t, qemu, image, initrd)
	if !strings.Contains(console, "VMCHECK: PASS") {
		t.Errorf("the check in the booted root did not pass")
	}
}

// packRoot writes root as an initramfs: every file, /dev/console for
// init's stdio.
func packRoot(t *testing.T, root, dst string) {
	t.Helper()
	f, err := os.Create(dst)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w := cpio.NewWriter(f)
	if err := w.HostTree(root, "/", false); err != nil {
		t.Fatalf("packing the root: %v", err)
	}
	if !w.Has("dev/console") {
		if err := w.CharDev("/dev/console", 0o600, 5, 1); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if st, err := f.Stat(); err == nil {
		t.Logf("initramfs: %d MB", st.Size()>>20)
	}
}

// bootRoot boots initrd with systemd as PID 1 and returns the console
// once the VM powered off (or bootWait passed: then it is killed and the
// test fails). Every VMCHECK line is logged as it comes.
func bootRoot(ctx context.Context, t *testing.T, qemu, image, initrd string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, bootWait)
	defer cancel()
	cmd := exec.CommandContext(ctx, qemu,
		"-accel", "tcg", "-cpu", "max", "-m", "2G", "-smp", "1",
		"-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
		"-kernel", image, "-initrd", initrd,
		"-append", "console=ttyS0 rdinit=/lib/systemd/systemd panic=-1 systemd.show_status=0",
		"-serial", "stdio",
	)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", qemu, err)
	}
	var console strings.Builder
	sc := bufio.NewScanner(out)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := strings.TrimRight(sc.Text(), "\r")
		console.WriteString(line + "\n")
		if i := strings.Index(line, "VMCHECK"); i >= 0 {
			t.Logf("%6.1fs %s", time.Since(start).Seconds(), line[i:])
		}
	}
	err = cmd.Wait()
	if ctx.Err() != nil {
		t.Errorf("the VM did not power off within %v", bootWait)
	} else if err != nil {
		t.Errorf("qemu: %v", err)
	}
	if t.Failed() || !strings.Contains(console.String(), "VMCHECK: PASS") {
		lines := strings.Split(console.String(), "\n")
		t.Logf("the console's last lines:\n%s", strings.Join(lines[max(0, len(lines)-80):], "\n"))
	}
	return console.String()
}

func copyFile(t *testing.T, src, dst string, perm os.FileMode) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, perm); err != nil {
		t.Fatal(err)
	}
}

// testWriter logs what the kernel resolver prints.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Logf("%s", strings.TrimRight(string(b), "\n"))
	return len(b), nil
}
