package enforcer

import (
	"fmt"
	"io"
	"log/slog"
	"regexp"
	"testing"
	"time"

	"github.com/mcptrace/mcptrace/lineage"
)

func TestSpareRuleMatching(t *testing.T) {
	argv := []string{"node", "/opt/mcp/server.js", "--port", "3000"}
	cases := []struct {
		name string
		rule SpareRule
		comm string
		exe  string
		want bool
	}{
		{"comm", SpareRule{Comm: "node"}, "node", "/usr/bin/node", true},
		{"comm differs", SpareRule{Comm: "nod"}, "node", "/usr/bin/node", false},
		{"long comm compared by 15 bytes", SpareRule{Comm: "mcp-server-github"}, "mcp-server-gith", "", true},
		{"exe base-name glob", SpareRule{Exe: "no*"}, "x", "/usr/bin/node", true},
		{"exe path glob", SpareRule{Exe: "/usr/*/node"}, "x", "/usr/bin/node", true},
		{"exe path glob does not cross /", SpareRule{Exe: "/usr/*"}, "x", "/usr/bin/node", false},
		{"unknown exe never matches", SpareRule{Exe: "*"}, "x", "", false},
		{"argv regexp", SpareRule{Argv: regexp.MustCompile(`server\.js --port`)}, "x", "", true},
		{"all fields must match", SpareRule{Comm: "node", Argv: regexp.MustCompile(`other`)}, "node", "", false},
	}
	for _, c := range cases {
		if got := c.rule.match(c.comm, c.exe, argv); got != c.want {
			t.Errorf("%s: got %v", c.name, got)
		}
	}
}

func TestInvalidConfigFallsBackToAudit(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, cfg := range []Config{
		{Mode: "enforcing"},
		{Policy: "gentle"},
		{Spare: []SpareRule{{Name: "empty"}}},
		{Spare: []SpareRule{{Exe: "[unclosed"}}},
		{Grace: -time.Second},
		{Grace: MaxGrace + time.Second},
		{Grace: 45 * time.Second, SweepTimeout: 30 * time.Second}, // SIGKILL would never be sent
		{SweepTimeout: DefaultGrace},
	} {
		if cfg.Validate() == nil {
			t.Errorf("%+v validated", cfg)
		}
		if got := New(cfg, nil, quiet).Config().Mode; got != ModeAudit {
			t.Errorf("%+v runs in mode %q, want audit", cfg, got)
		}
	}
	got := New(Config{}, nil, quiet).Config()
	want := Config{Mode: ModeEnforce, Policy: PolicyGraceful, Grace: DefaultGrace,
		SweepInterval: DefaultSweepInterval, SweepTimeout: DefaultGrace + DefaultSweepTimeout}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("defaults %+v, want %+v", got, want)
	}
}

func TestRecordsRingIsBounded(t *testing.T) {
	e := New(Config{}, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	for s := range 3 {
		r := Report{Session: fmt.Sprint(s)}
		for i := range RecordLimit / 2 {
			r.Records = append(r.Records, KillRecord{Session: r.Session, Process: lineage.ID{PID: uint32(i)}, Result: ResultKilled})
		}
		e.finish(&r, 0, 0)
	}
	recs := e.Records()
	if len(recs) != RecordLimit {
		t.Fatalf("%d records", len(recs))
	}
	if recs[0].Session != "1" || recs[len(recs)-1].Session != "2" || recs[len(recs)-1].Process.PID != RecordLimit/2-1 {
		t.Errorf("ring order: first %+v last %+v", recs[0], recs[len(recs)-1])
	}
	if st := e.Stats(); st.Killed != 3*RecordLimit/2 || st.Sessions != 3 {
		t.Errorf("stats %+v", st)
	}
}
