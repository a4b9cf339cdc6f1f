package testenv

import (
	"bufio"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

// StartPiped starts cmd with a pipe to its stdin and a line scanner of
// its stdout (its stderr goes to the test's), and kills and reaps it when
// the test ends. Cleanups the caller registers afterwards run before it.
func StartPiped(t testing.TB, cmd *exec.Cmd) (io.WriteCloser, *bufio.Scanner) {
	t.Helper()
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if cmd.Stderr == nil {
		cmd.Stderr = os.Stderr
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %v: %v", cmd.Args, err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	return in, bufio.NewScanner(out)
}

// ReadPID reads the next line of sc as a pid: what a script said with
// `echo $!` or `echo $$`.
func ReadPID(t testing.TB, sc *bufio.Scanner) uint32 {
	t.Helper()
	if !sc.Scan() {
		t.Fatalf("the script printed no pid: %v", sc.Err())
	}
	pid, err := strconv.ParseUint(strings.TrimSpace(sc.Text()), 10, 32)
	if err != nil {
		t.Fatalf("the script printed %q, not a pid", sc.Text())
	}
	return uint32(pid)
}
