package agenttest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"testing"

	"github.com/mcptrace/mcptrace/api"
	"github.com/mcptrace/mcptrace/internal/testenv"
)

// ExecFlood starts n exec loops of uid, each running /bin/true with a
// 4,000-byte argv as fast as it can (issue 31: two such loops filled a
// 256 MiB history in a minute). stop ends them, and whatever they had
// started; the test's end does too.
func ExecFlood(t testing.TB, uid uint32, n int) (stop func()) {
	t.Helper()
	env := fmt.Sprintf("MCPTRACE_EXEC_FLOOD=%d-%d", os.Getpid(), uid)
	var loops []*exec.Cmd
	stop = func() {
		for _, c := range loops {
			c.Process.Kill()
			c.Wait()
		}
		loops = nil
		for _, p := range WithEnv(env) {
			p.Kill()
		}
	}
	t.Cleanup(stop)
	for range n {
		c := exec.Command("sh", "-c", `a=$(head -c 4000 /dev/zero | tr '\0' x); while :; do /bin/true "$a"; done`)
		c.Env = append(os.Environ(), env)
		c.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		loops = append(loops, c)
	}
	return stop
}

// Recorded waits until the agent answers for session id from its
// history (it no longer holds it) and returns that answer.
func Recorded(t testing.TB, ag *Process, id string) api.SessionDetail {
	t.Helper()
	var d api.SessionDetail
	testenv.Eventually(t, "session "+id+" answered from the history", func() (bool, string) {
		var err error
		d, err = ag.Client().Session(context.Background(), id, nil)
		if err != nil {
			return false, err.Error()
		}
		return !d.Recorded.IsZero(), fmt.Sprintf("answered from memory: %s %v", d.Session.State, d.Session.EndReason)
	})
	return d
}
