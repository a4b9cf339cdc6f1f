// Package smoke is a small real test package for the VM runner: it checks,
// inside the guest, the kernel facilities mcptrace depends on. It lives
// under testdata/ so that "go test ./..." does not pick it up; run it with
//
//	make vmtest PKGS=./vmtests/testdata/smoke
package smoke

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

const bpfFSMagic = 0xcafe4a11

func inGuest(t *testing.T) {
	t.Helper()
	if os.Getenv("MCPTRACE_VM_GUEST") != "1" {
		t.Skip("not running in a vmexec guest (run with go test -exec vmexec)")
	}
}

func release(t *testing.T) string {
	var u syscall.Utsname
	if err := syscall.Uname(&u); err != nil {
		t.Fatal(err)
	}
	var b []byte
	for _, c := range u.Release {
		if c == 0 {
			break
		}
		b = append(b, byte(c))
	}
	return string(b)
}

func TestKernelRelease(t *testing.T) {
	inGuest(t)
	got, want := release(t), os.Getenv("MCPTRACE_VM_KERNEL_RELEASE")
	t.Logf("uname -r: %s (asked for %s, %s)", got, os.Getenv("MCPTRACE_VM_KERNEL_SPEC"), os.Getenv("MCPTRACE_VM_KERNEL_PACKAGE"))
	if got != want {
		t.Fatalf("uname -r = %q, vmexec booted %q", got, want)
	}
}

func TestBPFFS(t *testing.T) {
	inGuest(t)
	var st syscall.Statfs_t
	if err := syscall.Statfs("/sys/fs/bpf", &st); err != nil {
		t.Fatal(err)
	}
	if uint32(st.Type) != bpfFSMagic {
		t.Fatalf("/sys/fs/bpf has fs magic %#x, want bpffs %#x", st.Type, bpfFSMagic)
	}
	dir := t.TempDir()
	if err := syscall.Mount("bpf", dir, "bpf", 0, "mode=0700"); err != nil {
		t.Fatalf("mount bpffs on %s: %v", dir, err)
	}
	defer syscall.Unmount(dir, 0)
	if err := syscall.Statfs(dir, &st); err != nil || uint32(st.Type) != bpfFSMagic {
		t.Fatalf("fresh bpffs mount: statfs type %#x, err %v", st.Type, err)
	}
}

func TestTracepoints(t *testing.T) {
	inGuest(t)
	for _, tp := range []string{"sched_process_fork", "sched_process_exec", "sched_process_exit"} {
		p := filepath.Join("/sys/kernel/tracing/events/sched", tp, "id")
		if _, err := os.Stat(p); err != nil {
			t.Errorf("tracepoint %s: %v", tp, err)
		}
	}
}

func TestCgroup2(t *testing.T) {
	inGuest(t)
	b, err := os.ReadFile("/sys/fs/cgroup/cgroup.controllers")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("cgroup2 controllers: %s", strings.TrimSpace(string(b)))
}

func kernelBTF(t *testing.T) []byte {
	b, err := os.ReadFile("/sys/kernel/btf/vmlinux")
	if err != nil {
		t.Fatalf("kernel BTF (needed for tp_btf): %v", err)
	}
	if len(b) < 2 || b[0] != 0x9f || b[1] != 0xeb {
		t.Fatalf("/sys/kernel/btf/vmlinux has no BTF magic")
	}
	return b
}

func TestBTF(t *testing.T) {
	inGuest(t)
	b := kernelBTF(t)
	t.Logf("kernel BTF: %d bytes", len(b))
}

// bpf_get_current_task_btf arrived in 5.11; mcptrace needs a fallback on
// 5.10. This skips there, with the reason, as a real test of a missing
// kernel feature would.
func TestCurrentTaskBTFHelper(t *testing.T) {
	inGuest(t)
	b := kernelBTF(t)
	if !bytes.Contains(b, []byte("\x00bpf_get_current_task_btf\x00")) {
		t.Skipf("kernel %s lacks bpf_get_current_task_btf (added in 5.11)", release(t))
	}
}

func TestTestdataShipped(t *testing.T) {
	inGuest(t)
	b, err := os.ReadFile("testdata/hello.txt")
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(string(b)) != "hello from the host" {
		t.Fatalf("testdata/hello.txt = %q", b)
	}
}
