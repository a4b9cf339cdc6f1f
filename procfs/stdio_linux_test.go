package procfs

import (
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/mcptrace/mcptrace/lineage"
)

// startReading starts sleep reading stdin from r and returns its id.
func startReading(t *testing.T, r *os.File) lineage.ID {
	t.Helper()
	c := exec.Command("sleep", "30")
	if r != nil {
		c.Stdin = r
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Process.Kill(); _ = c.Wait() })
	s, err := Read("", uint32(c.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	return s.ID
}

// A server whose host still holds its stdin can be written; once the
// host's end closes it never can: for a pipe (its writer closed) and for
// a socketpair (its peer closed), as the kernel counts them. Facts say
// what stdin is; a process on /dev/null has none; a PID read for another
// start time is gone.
func TestStdinCutOffAsksTheKernelWhetherStdinCanStillBeWritten(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	piped := startReading(t, r)
	r.Close()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	sock := os.NewFile(uintptr(fds[0]), "socket")
	socketed := startReading(t, sock)
	sock.Close()
	detached := startReading(t, nil)

	f, err := ReadFacts("", piped)
	if err != nil || f.Stdin != StdinPipe || f.StdinInode == 0 || f.Cgroup == "" {
		t.Fatalf("facts of a piped child: %+v, %v", f, err)
	}
	if f, err := ReadFacts("", socketed); err != nil || f.Stdin != StdinSocket || f.StdinInode == 0 {
		t.Errorf("facts of a child on a socket: %+v, %v", f, err)
	}
	if f, err := ReadFacts("", detached); err != nil || f.Stdin != StdinDevNull {
		t.Errorf("facts of a child on /dev/null: %+v, %v", f, err)
	}
	for _, id := range []lineage.ID{piped, socketed} {
		if cut, err := StdinCutOff("", id); err != nil || cut {
			t.Errorf("process %d while its writer is open: cut off %v, %v", id.PID, cut, err)
		}
	}
	w.Close()
	unix.Close(fds[1])
	for _, id := range []lineage.ID{piped, socketed} {
		if cut, err := StdinCutOff("", id); err != nil || !cut {
			t.Errorf("process %d after its writer closed: cut off %v, %v", id.PID, cut, err)
		}
	}
	// A stdin that is neither a pipe nor a socket is never duplicated (a
	// file its owner's FUSE server holds would make the poll wait): not
	// cut off, and no error.
	file, err := os.Open("/proc/self/stat")
	if err != nil {
		t.Fatal(err)
	}
	onFile := startReading(t, file)
	file.Close()
	if cut, err := StdinCutOff("", onFile); err != nil || cut {
		t.Errorf("a process reading a file: cut off %v, %v", cut, err)
	}
	if cut, err := StdinCutOff("", detached); err != nil || cut {
		t.Errorf("a process on /dev/null: cut off %v, %v", cut, err)
	}
	stale := piped
	stale.Start += 1e9
	if _, err := ReadFacts("", stale); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("facts for another start time: %v, want gone", err)
	}
	if _, err := StdinCutOff("", stale); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("cut off for another start time: %v, want gone", err)
	}
}

// Both ends of a stdio MCP server's channel, as the kernel counts them:
// its stdout pipe is cut once no reader holds it, its stdin and stdout
// socketpairs once their peers close, and each socketpair names the
// process that made it (the host); a network socket (an inetd-style
// service's) is not local. HoldsPipes finds the pipes the other end
// holds.
func TestReadStdioSeesBothEndsOfAServersChannel(t *testing.T) {
	inR, inW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	c := exec.Command("sleep", "30")
	c.Stdin, c.Stdout = inR, outW
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Process.Kill(); _ = c.Wait() })
	inR.Close()
	outW.Close()
	s, err := Read("", uint32(c.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	piped := s.ID
	f, err := ReadFacts("", piped)
	if err != nil || f.Stdout != StdinPipe || f.StdoutInode == 0 || f.UIDs.Real != uint32(os.Getuid()) || f.Exe == "" {
		t.Fatalf("facts: %+v, %v", f, err)
	}
	self, err := Read("", uint32(os.Getpid()))
	if err != nil {
		t.Fatal(err)
	}
	if held, err := HoldsPipes("", self.ID, f.StdinInode, f.StdoutInode); err != nil || !held {
		t.Errorf("this test holds both pipes' other ends: %v, %v", held, err)
	}
	if st, err := ReadStdio("", piped); err != nil || st.InCut || st.OutCut || !st.InLocal || !st.OutLocal {
		t.Errorf("while both ends are held: %+v, %v", st, err)
	}
	outR.Close()
	if st, err := ReadStdio("", piped); err != nil || st.InCut || !st.OutCut {
		t.Errorf("after the reader of its stdout closed: %+v, %v", st, err)
	}
	inW.Close()
	if st, err := ReadStdio("", piped); err != nil || !st.InCut || !st.OutCut {
		t.Errorf("after both closed: %+v, %v", st, err)
	}
	if held, err := HoldsPipes("", self.ID, f.StdinInode); err != nil || held {
		t.Errorf("after closing them this test still holds: %v, %v", held, err)
	}

	in, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	out, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	sc := exec.Command("sleep", "30")
	// Closed through their *os.File: a unix.Close of the numbers would
	// leave the Files' finalizers to close them again, whatever they
	// number by then (another test's file: "bad file descriptor").
	inF, outF := os.NewFile(uintptr(in[0]), "in"), os.NewFile(uintptr(out[0]), "out")
	sc.Stdin, sc.Stdout = inF, outF
	if err := sc.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sc.Process.Kill(); _ = sc.Wait() })
	inF.Close()
	outF.Close()
	ss, err := Read("", uint32(sc.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	st, err := ReadStdio("", ss.ID)
	if err != nil || st.InCut || st.OutCut || st.InPeer != uint32(os.Getpid()) || st.OutPeer != uint32(os.Getpid()) || !st.InLocal {
		t.Errorf("socketpairs this test made: %+v, %v", st, err)
	}
	unix.Close(in[1])
	unix.Close(out[1])
	if st, err := ReadStdio("", ss.ID); err != nil || !st.InCut || !st.OutCut {
		t.Errorf("after their peers closed: %+v, %v", st, err)
	}

	// A network socket (no network needed: an unbound UDP one).
	udp, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	uf := os.NewFile(uintptr(udp), "udp")
	tcp := startReading(t, uf)
	uf.Close()
	if st, err := ReadStdio("", tcp); err != nil || st.InLocal || st.InPeer != 0 {
		t.Errorf("a network socket: %+v, %v", st, err)
	}
}
