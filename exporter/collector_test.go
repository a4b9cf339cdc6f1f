package exporter

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/mcptrace/mcptrace/lineage"
	"github.com/mcptrace/mcptrace/roles"
)

// leakyNode is a node where a codex host runs two instances of one server
// (one duplicate), a claude session ended and left a server behind, and
// an audit-mode generation left a wrapper.
func leakyNode() []SessionView {
	id := func(pid uint32) lineage.ID { return lineage.ID{PID: pid, Start: uint64(pid) * 1e9} }
	fs := "@modelcontextprotocol/server-filesystem"
	return []SessionView{
		{Active: true, HostKind: "codex", Members: []MemberView{
			{ID: id(10), Role: roles.Host, Alive: true, RSSBytes: 1 << 30},
			{ID: id(11), Role: roles.Wrapper, Server: fs, Alive: true, RSSBytes: 50 << 20},
			{ID: id(12), Role: roles.Server, Server: fs, Alive: true, RSSBytes: 80 << 20, CPUSeconds: 2},
			{ID: id(13), Role: roles.Server, Server: fs, Alive: true, RSSBytes: 70 << 20, CPUSeconds: 1, Idle: true},
			{ID: id(14), Role: roles.Other, Server: fs, Alive: true, RSSBytes: 10 << 20},
			{ID: id(15), Role: roles.Server, Server: "mcp-server-time", Alive: false},
			{ID: id(16), Role: roles.Wrapper, Server: "mcp-server-time", Alive: true, Orphaned: true, RSSBytes: 5 << 20},
		}},
		{Active: false, HostKind: "claude", Members: []MemberView{
			{ID: id(20), Role: roles.Host, Alive: false},
			{ID: id(21), Role: roles.Server, Server: fs, Alive: true, RSSBytes: 90 << 20},
		}},
	}
}

func TestBuildCountsServersLeaksAndDuplicates(t *testing.T) {
	p := Build(leakyNode())
	fs := "@modelcontextprotocol/server-filesystem"
	codex := p.Servers[ServerKey{"codex", fs}]
	if codex == nil || codex.Live != 2 || codex.Duplicates != 1 || codex.Idle != 1 || codex.RSSBytes != (50+80+70+10)<<20 || codex.CPUSeconds != 3 {
		t.Errorf("codex filesystem servers = %+v, want 2 live, 1 duplicate, 1 idle, 210 MiB (wrapper, servers, child), 3 s", codex)
	}
	if s := p.Servers[ServerKey{"codex", "mcp-server-time"}]; s == nil || s.Live != 0 || s.Orphaned != 1 || s.OrphanedRSS != 5<<20 {
		t.Errorf("codex time server = %+v, want its orphaned wrapper only", s)
	}
	if s := p.Servers[ServerKey{"claude", fs}]; s == nil || s.Live != 0 || s.Orphaned != 1 || s.OrphanedRSS != 90<<20 {
		t.Errorf("claude filesystem server = %+v, want 1 orphan of 90 MiB (its session ended)", s)
	}
	if p.Sessions[SessionKey{true, "codex"}] != 1 || p.Sessions[SessionKey{false, "claude"}] != 1 {
		t.Errorf("sessions = %v", p.Sessions)
	}
	if p.Members[MemberKey{"codex", roles.Host}] != 1 || p.Members[MemberKey{"codex", roles.Server}] != 2 || p.Members[MemberKey{"codex", roles.Wrapper}] != 1 {
		t.Errorf("members = %v, want live non-orphans by role", p.Members)
	}
}

func TestMetricsPassTheLinterAndShowTheLeaks(t *testing.T) {
	pic := Build(leakyNode())
	pic.At, pic.Took = time.Unix(1700000000, 0), 3*time.Millisecond
	pic.Unowned = map[UnownedKey]UnownedStats{
		{HostKind: "unknown", Kind: "host-gone", Confidence: "certain"}: {Servers: 2, Processes: 6, RSSBytes: 300 << 20},
		{HostKind: "codex", Kind: "superseded", Confidence: "likely"}:   {Servers: 1, Processes: 3, RSSBytes: 100 << 20},
	}
	reg := NewRegistry(func() (Picture, Health) { return pic, sampleHealth() })
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
	want := `
# HELP mcptrace_orphaned_processes Live processes of ended sessions and ended generations: what the enforcer could not, may not (audit mode, privilege boundary) or did not yet end. server is the server they are or run for, empty for none.
# TYPE mcptrace_orphaned_processes gauge
mcptrace_orphaned_processes{host_kind="claude",server="@modelcontextprotocol/server-filesystem"} 1
mcptrace_orphaned_processes{host_kind="codex",server="mcp-server-time"} 1
# HELP mcptrace_duplicate_servers Live MCP servers started again by a live host while an earlier instance of the same server lives: instances beyond the first per session, summed.
# TYPE mcptrace_duplicate_servers gauge
mcptrace_duplicate_servers{host_kind="codex",server="@modelcontextprotocol/server-filesystem"} 1
# HELP mcptrace_unowned_servers Leaked MCP servers that no session owns (mcptrace orphans): by the host kind that started them (unknown when it is gone or named by no host rule), the evidence (host-gone, superseded, client-gone: a docker run -i container whose client went) and how sure it is (certain, likely). Not the orphaned processes of ended sessions.
# TYPE mcptrace_unowned_servers gauge
mcptrace_unowned_servers{confidence="certain",host_kind="unknown",kind="host-gone"} 2
mcptrace_unowned_servers{confidence="likely",host_kind="codex",kind="superseded"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "mcptrace_orphaned_processes", "mcptrace_duplicate_servers", "mcptrace_unowned_servers"); err != nil {
		t.Error(err)
	}
}

func sampleHealth() Health {
	return Health{
		AliveProcesses: 10, ExitedProcesses: 3, Events: map[string]uint64{"fork": 5, "exec": 4, "exit": 3},
		Lost: map[string]uint64{"fork": 0}, Maps: []MapUsage{{"doomed", 1, 65536}},
		Requests: map[string]uint64{"GET /v1/sessions": 2}, Refused: map[string]uint64{"gone": 1},
		Kills:   map[KillKey]uint64{{"root-exit", "killed"}: 4},
		Endings: Histogram{Bounds: []float64{0.1, 1}, Counts: []uint64{2, 1, 1}, Count: 4, Sum: 2.5},
	}
}

func TestServerNamesAndHostKindsAreBounded(t *testing.T) {
	var views []SessionView
	for i := range MaxServerNames + 50 {
		views = append(views, SessionView{Active: true, HostKind: fmt.Sprintf("kind-%d", i%(MaxHostKinds+8)), Owner: uint32(1000 + i), Members: []MemberView{
			{Role: roles.Server, Server: fmt.Sprintf("server-%d", i), Alive: true},
		}})
	}
	pic := Build(views)
	reg := NewRegistry(func() (Picture, Health) { return pic, Health{} })
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	names, kinds := map[string]bool{}, map[string]bool{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "server":
					names[l.GetValue()] = true
				case "host_kind":
					kinds[l.GetValue()] = true
				case "pid", "argv", "cmdline", "comm", "session", "uid", "env":
					t.Errorf("%s has a label %s", mf.GetName(), l.GetName())
				}
			}
		}
	}
	if len(names) != MaxServerNames+1 || !names[OtherLabel] {
		t.Errorf("%d server names shown (other: %v), want %d and other", len(names), names[OtherLabel], MaxServerNames)
	}
	if len(kinds) != MaxHostKinds+1 || !kinds[OtherLabel] {
		t.Errorf("%d host kinds shown, want %d and other", len(kinds), MaxHostKinds)
	}
	var folded float64
	for _, mf := range mfs {
		if mf.GetName() != "mcptrace_servers" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "server" && l.GetValue() == OtherLabel {
					folded += m.GetGauge().GetValue()
				}
			}
		}
	}
	if folded != 50 {
		t.Errorf("servers under other = %v, want the 50 folded", folded)
	}
}

func TestOneOwnersManyNamesHideNoOtherOwnersServer(t *testing.T) {
	var views []SessionView
	for i := range 3 * MaxServerNames {
		views = append(views, SessionView{Active: true, HostKind: "codex", Owner: 1001, Members: []MemberView{
			{Role: roles.Server, Server: fmt.Sprintf("made-up-%d", i), Alive: true},
			{Role: roles.Server, Server: fmt.Sprintf("made-up-%d", i), Alive: true},
		}})
	}
	views = append(views,
		SessionView{Active: true, HostKind: "claude", Owner: 1002, Members: []MemberView{{Role: roles.Server, Server: "@modelcontextprotocol/server-github", Alive: true}}},
		SessionView{Active: false, HostKind: "claude", Owner: 1003, Members: []MemberView{{Role: roles.Server, Server: "mcp-server-fetch", Alive: true}}})
	pic := Build(views)
	keep, _ := keepServerNames(pic.Servers)
	for _, name := range []string{"@modelcontextprotocol/server-github", "mcp-server-fetch"} {
		if !keep[name] {
			t.Errorf("%s of another owner is folded under other", name)
		}
	}
	mine := 0
	for n := range keep {
		if strings.HasPrefix(n, "made-up-") {
			mine++
		}
	}
	if mine != MaxNamesPerOwner {
		t.Errorf("one owner shows %d names, want %d", mine, MaxNamesPerOwner)
	}
}

// With server names off, /metrics says "hidden" for every server and
// counts the same: no name of any user's server reaches the endpoint.
func TestWithoutServerNamesHidesEveryNameAndKeepsTheCounts(t *testing.T) {
	id := func(pid uint32) lineage.ID { return lineage.ID{PID: pid, Start: uint64(pid) * 1e9} }
	pic := Build([]SessionView{
		{Active: true, HostKind: "claude", Owner: 1000, Members: []MemberView{
			{ID: id(1), Role: roles.Host, Alive: true},
			{ID: id(2), Role: roles.Server, Server: "acme_merger_globex", Alive: true, RSSBytes: 100},
			{ID: id(3), Role: roles.Server, Server: "@modelcontextprotocol/server-memory", Alive: true, RSSBytes: 50},
		}},
		{Active: false, HostKind: "claude", Owner: 1001, Members: []MemberView{
			{ID: id(4), Role: roles.Server, Server: "secret-project", Alive: true, RSSBytes: 7},
		}},
	})
	hidden := WithoutServerNames(pic)
	var names []string
	var live, orphaned int
	var rss uint64
	for k, s := range hidden.Servers {
		names = append(names, k.Server)
		live, orphaned, rss = live+s.Live, orphaned+s.Orphaned, rss+s.RSSBytes+s.OrphanedRSS
	}
	if len(names) != 1 || names[0] != HiddenLabel || live != 2 || orphaned != 1 || rss != 157 {
		t.Errorf("hidden: names %v, live %d, orphaned %d, rss %d; want [hidden] 2 1 157", names, live, orphaned, rss)
	}
	if _, ok := pic.Servers[ServerKey{"claude", "acme_merger_globex"}]; !ok {
		t.Errorf("the picture itself was changed: %v", pic.Servers)
	}
}
