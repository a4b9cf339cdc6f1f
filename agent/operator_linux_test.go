package agent_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/mcptrace/mcptrace/api"
	"github.com/mcptrace/mcptrace/exporter"
	"github.com/mcptrace/mcptrace/internal/agenttest"
	"github.com/mcptrace/mcptrace/internal/version"
)

// The agent says who it is and how it does: its build, process and
// install in status, the warnings it logged (to root only), and
// /healthz and /readyz on its metrics listener.
func TestAgentSaysWhoItIsAndAnswersItsProbes(t *testing.T) {
	// No engine at this socket: the agent warns that attribution is off.
	ag := agenttest.StartProcess(t, "--containers.engine-socket="+t.TempDir()+"/no-docker.sock")
	st, err := ag.Client().Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st.Agent.Build != version.Get() || st.Agent.PID == 0 || st.Agent.Started.IsZero() || !st.Agent.Ready || st.Agent.Install.Kind == "" {
		t.Errorf("status' agent: %+v", st.Agent)
	}
	if !st.Kernel.Attached || st.Kernel.Release == "" || st.Kernel.PinDir != ag.PinDir || st.Kernel.DoomedMax == 0 {
		t.Errorf("status' kernel side: %+v", st.Kernel)
	}
	warned := false
	for _, p := range st.Problems {
		warned = warned || strings.Contains(p.What, "container attribution is off")
	}
	if !warned || st.Partial {
		t.Errorf("root's status lacks the warning the agent logged (partial %v): %+v", st.Partial, st.Problems)
	}
	code, out := agenttest.CLIAs(t, ag.Socket, 65534, "status", "--json")
	var theirs api.Status
	if code != 0 || json.Unmarshal([]byte(out), &theirs) != nil {
		t.Fatalf("status --json as nobody: exit %d\n%s", code, out)
	}
	if !theirs.Partial || len(theirs.Problems) != 0 {
		t.Errorf("nobody's status: partial %v, problems %+v; want partial and none", theirs.Partial, theirs.Problems)
	}
	code, out = agenttest.CLIAs(t, ag.Socket, 65534, "status")
	if code != 0 || !strings.Contains(out, "agent ") || !strings.Contains(out, "problems    (root only)") {
		t.Errorf("status as nobody: exit %d\n%s", code, out)
	}

	base := strings.TrimSuffix(ag.MetricsURL(), "/metrics")
	for _, path := range []string{exporter.LivePath, exporter.ReadyPath} {
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || strings.TrimSpace(string(b)) != "ok" {
			t.Errorf("GET %s: %d %q", path, resp.StatusCode, b)
		}
	}
}
