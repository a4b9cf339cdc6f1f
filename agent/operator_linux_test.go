package agent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/mcptrace/mcptrace/api"
	"github.com/mcptrace/mcptrace/exporter"
	"github.com/mcptrace/mcptrace/internal/agenttest"
	"github.com/mcptrace/mcptrace/internal/testenv"
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
	// The agent's binary says its own build (a go test binary has no VCS
	// stamp, a go build in a clean clone does: compare with the binary).
	code, out := agenttest.CLIAs(t, ag.Socket, 0, "version", "--json")
	var vs struct {
		Client version.Info  `json:"client"`
		Agent  *version.Info `json:"agent"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &vs) != nil || vs.Agent == nil || vs.Client.Revision == "" {
		t.Fatalf("version --json: exit %d\n%s", code, out)
	}
	if *vs.Agent != vs.Client {
		t.Errorf("version --json: the agent says %+v, its own binary %+v", *vs.Agent, vs.Client)
	}
	if st.Agent.Build != vs.Client || st.Agent.PID == 0 || st.Agent.Started.IsZero() || !st.Agent.Ready || st.Agent.Install.Kind == "" {
		t.Errorf("status' agent: %+v", st.Agent)
	}
	if !st.Kernel.Attached || st.Kernel.Release == "" || st.Kernel.PinDir != ag.PinDir || st.Kernel.DoomedMax == 0 {
		t.Errorf("status' kernel side: %+v", st.Kernel)
	}
	// The warning comes once the container watcher has tried the
	// engine, which may be just after the agent serves.
	testenv.Eventually(t, "the warning the agent logged in root's status", func() (bool, string) {
		st, err := ag.Client().Status(context.Background())
		if err != nil {
			return false, err.Error()
		}
		warned := false
		for _, p := range st.Problems {
			warned = warned || strings.Contains(p.What, "container attribution is off")
		}
		return warned && !st.Partial, fmt.Sprintf("partial %v, problems %+v", st.Partial, st.Problems)
	})
	code, out = agenttest.CLIAs(t, ag.Socket, 65534, "status", "--json")
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
