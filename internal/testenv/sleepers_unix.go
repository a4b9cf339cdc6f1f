//go:build !windows

package testenv

import (
	"bufio"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
)

// Sleepers starts n `sleep 3600` processes and kills them, by the
// PIDs bash reported, when b ends.
func Sleepers(b *testing.B, n int) {
	b.Helper()
	if n <= 0 {
		return
	}
	cmd := exec.Command("/bin/bash", "-c", `for ((i = 0; i < $0; i++)); do sleep 3600 >/dev/null & echo $!; done`, strconv.Itoa(n))
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	var pids []int
	b.Cleanup(func() {
		for _, pid := range pids {
			syscall.Kill(pid, syscall.SIGKILL) // orphans of bash: init reaps them
		}
	})
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		pid, err := strconv.Atoi(sc.Text())
		if err != nil {
			b.Fatalf("sleeper pid %q: %v", sc.Text(), err)
		}
		pids = append(pids, pid)
	}
	if err := cmd.Wait(); err != nil || len(pids) != n {
		b.Fatalf("started %d of %d sleepers: %v", len(pids), n, err)
	}
}
