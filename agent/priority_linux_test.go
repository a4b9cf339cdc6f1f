package agent_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/mcptrace/mcptrace/enforcer"
	"github.com/mcptrace/mcptrace/internal/agenttest"
	"github.com/mcptrace/mcptrace/procfs"
)

// threadNices reads the nice value of every thread of process pid.
func threadNices(t *testing.T, pid int) map[uint32]int {
	t.Helper()
	tids, err := procfs.Threads("", uint32(pid))
	if err != nil {
		t.Fatal(err)
	}
	out := map[uint32]int{}
	for _, tid := range tids {
		st, err := procfs.ReadStat(fmt.Sprintf("/proc/%d/task", pid), tid)
		if err != nil {
			continue // the thread ended
		}
		out[tid] = st.Nice
	}
	return out
}

// The agent binary runs every thread at enforcer.nice (enforcer.DefaultNice
// by default): a user's CPU flood must not starve it. Threads the runtime
// starts after it serves, under requests, take the same value.
func TestTheAgentRunsEveryThreadAtItsNice(t *testing.T) {
	for _, c := range []struct {
		flags []string
		want  int
	}{
		{nil, enforcer.DefaultNice},
		{[]string{"--enforcer.nice=5"}, 5},
	} {
		t.Run(fmt.Sprint(c.want), func(t *testing.T) {
			ag := agenttest.StartProcess(t, c.flags...)
			// Requests from 16 connections at once: the runtime starts
			// threads for them if it needs more.
			done := make(chan error, 16)
			for range 16 {
				go func() {
					var err error
					for range 20 {
						if _, err = ag.Client().Status(context.Background()); err != nil {
							break
						}
					}
					done <- err
				}()
			}
			for range 16 {
				if err := <-done; err != nil {
					t.Fatal(err)
				}
			}
			nices := threadNices(t, ag.PID())
			if len(nices) < 2 {
				t.Fatalf("the agent has %d threads", len(nices))
			}
			for tid, n := range nices {
				if n != c.want {
					t.Errorf("thread %d runs at nice %d, want %d (all: %v)", tid, n, c.want, nices)
				}
			}
			if logs := ag.Logs(); !strings.Contains(logs, "scheduling priority set") {
				t.Errorf("the agent did not say its priority:\n%s", logs)
			}
			t.Logf("%d threads at nice %d", len(nices), c.want)
		})
	}
}
