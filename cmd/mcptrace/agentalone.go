//go:build linux || windows

package main

import (
	"context"
	"fmt"
	"time"
)

// checkAlone fails when an agent already serves on socket. The agent's
// start would refuse too, at the socket and before it touches anything
// (api.ErrServing, agentExit); this says which agent runs, since when and
// the command that stops it. One that holds the socket's lock but does
// not answer yet (starting) is left to the start's own refusal.
func checkAlone(ctx context.Context, socket string) error {
	st, err := agentStatus(ctx, socket, time.Second)
	if err != nil {
		return nil // none answers (or not in time): the start finds out
	}
	who := fmt.Sprintf("pid %d", st.Agent.PID)
	if !st.Agent.Started.IsZero() {
		who += ", since " + st.Agent.Started.Local().Format(timeLayout)
	}
	if st.Agent.Install.Kind != "" {
		who += ", " + st.Agent.Install.String()
	}
	return fmt.Errorf("another mcptrace agent already serves on %s (%s). Stop it first: %s; or give this one its own api.socket, bpf.pin-dir, state.dir and history.dir",
		socket, who, st.Agent.Install.Stop())
}
