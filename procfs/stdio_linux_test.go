package procfs

import (
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"slices"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/mcptrace/mcptrace/internal/testenv"
	"github.com/mcptrace/mcptrace/lineage"
)

// startWithStdin starts sleep with a pipe on its standard input and
// returns it, the pipe's writing end held by this process, and its id.
func startWithStdin(t *testing.T, pipe bool) (*exec.Cmd, func() error) {
	t.Helper()
	c := exec.Command("sleep", "30")
	closeIn := func() error { return nil }
	if pipe {
		w, err := c.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		closeIn = w.Close
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Process.Kill(); _ = c.Wait() })
	return c, closeIn
}

// A server whose host still holds its stdin pipe has a writer; once the
// host's end closes, the scan finds none: the pipe can only read end of
// file. A process whose stdin is /dev/null has no pipe at all. A PID
// read for another start time is gone.
func TestFactsAndPipeWritersSeeWhetherAStdinPipeCanStillBeWritten(t *testing.T) {
	piped, closeIn := startWithStdin(t, true)
	detached, _ := startWithStdin(t, false)
	id := func(c *exec.Cmd) lineage.Snapshot {
		s, err := Read("", uint32(c.Process.Pid))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	ps := id(piped)
	f, err := ReadFacts("", ps.ID)
	if err != nil {
		t.Fatal(err)
	}
	if f.Stdin != StdinPipe || f.StdinPipe == 0 || f.Cgroup == "" {
		t.Fatalf("facts of a piped child: %+v", f)
	}
	if df, err := ReadFacts("", id(detached).ID); err != nil || df.Stdin != StdinDevNull {
		t.Errorf("facts of a child on /dev/null: %+v, %v", df, err)
	}
	w, _, err := PipeWriters("", map[uint64]bool{f.StdinPipe: true})
	if err != nil {
		t.Fatal(err)
	}
	self, _ := Read("", uint32(os.Getpid()))
	if !slices.Contains(w[f.StdinPipe], self.ID.PID) || slices.Contains(w[f.StdinPipe], ps.ID.PID) {
		t.Errorf("writers %v: want this process (%d) and not the reader (%d)", w[f.StdinPipe], self.ID.PID, ps.ID.PID)
	}
	if err := closeIn(); err != nil {
		t.Fatal(err)
	}
	w, _, err = PipeWriters("", map[uint64]bool{f.StdinPipe: true})
	if err != nil || len(w[f.StdinPipe]) != 0 {
		t.Errorf("after the writer closed: writers %v, %v", w[f.StdinPipe], err)
	}
	stale := ps.ID
	stale.Start += 1e9
	if _, err := ReadFacts("", stale); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("facts for another start time: %v, want gone", err)
	}
}

// A server a Node.js host started reads one end of a socketpair: while
// the host's end is open the peer can write; once it closes, the
// survivor can receive nothing more, and sock_diag says so.
func TestUnixPeerClosedSeesTheOtherEndOfASocketpairClose(t *testing.T) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fds[0])
	var st unix.Stat_t
	if err := unix.Fstat(fds[0], &st); err != nil {
		t.Fatal(err)
	}
	closed, err := UnixPeerClosed(st.Ino)
	if err != nil {
		testenv.Missing(t, "sock_diag for unix sockets (CONFIG_UNIX_DIAG)", err.Error())
	}
	if closed {
		t.Error("the peer is open, yet reported closed")
	}
	unix.Close(fds[1])
	if closed, err = UnixPeerClosed(st.Ino); err != nil || !closed {
		t.Errorf("after the peer closed: %v, %v; want closed", closed, err)
	}
	if _, err := UnixPeerClosed(1); !errors.Is(err, ErrNoSuchSocket) {
		t.Errorf("an inode that is no socket: %v, want ErrNoSuchSocket", err)
	}
}
