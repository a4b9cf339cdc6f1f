package enforcer

import (
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mcptrace/mcptrace/lineage"
	"github.com/mcptrace/mcptrace/procmatch"
)

func TestInvalidConfigFallsBackToAudit(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, cfg := range []Config{
		{Mode: "enforcing"},
		{Policy: "gentle"},
		{Spare: []procmatch.Rule{{Name: "empty"}}},
		{Spare: []procmatch.Rule{{Exe: procmatch.Patterns{"[unclosed"}}}},
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

func TestRecordsAreBoundedPerOwner(t *testing.T) {
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
		t.Errorf("order: first %+v last %+v", recs[0], recs[len(recs)-1])
	}
	if got := e.SessionRecords(0, "0"); len(got) != 0 {
		t.Errorf("session 0 kept %d records after two sessions' worth came later", len(got))
	}
	if got := e.SessionRecords(0, "2"); len(got) != RecordLimit/2 {
		t.Errorf("session 2 has %d records, want %d", len(got), RecordLimit/2)
	}
	if st := e.Stats(); st.Killed != 3*RecordLimit/2 || st.Sessions != 3 {
		t.Errorf("stats %+v", st)
	}
}

// One user who ends sessions in a loop (mcptrace run -- true, over and
// over) evicts only its own oldest records; another user's stay, and the
// total stays bounded whatever the number of owners.
func TestOneOwnersChurnNeverEvictsAnothersRecords(t *testing.T) {
	e := New(Config{}, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	rec := func(owner uint32, session string, pid uint32) KillRecord {
		return KillRecord{Session: session, Owner: owner, Process: lineage.ID{PID: pid}, UID: owner, Result: ResultKilled}
	}
	e.AddRecords([]KillRecord{rec(1000, "work", 1), rec(1000, "work", 2)})
	for i := range 3 * RecordLimit {
		e.AddRecords([]KillRecord{rec(2000, fmt.Sprint("run-", i), uint32(i))})
	}
	if got := e.SessionRecords(1000, "work"); len(got) != 2 {
		t.Errorf("uid 1000's session kept %d of its 2 records after uid 2000's churn", len(got))
	}
	if got := len(e.Records()); got != RecordLimit+2 {
		t.Errorf("%d records kept, want uid 2000's quota %d plus uid 1000's 2", got, RecordLimit)
	}
	if got := e.SessionRecords(2000, "work"); len(got) != 0 {
		t.Errorf("another owner's session of the same name shows %d records of uid 1000's", len(got))
	}
	// Many owners: the total bound evicts from the largest owner first.
	for uid := range uint32(TotalRecordLimit/RecordLimit + 2) {
		for i := range RecordLimit {
			e.AddRecords([]KillRecord{rec(10000+uid, "s", uint32(i))})
		}
	}
	if got := len(e.Records()); got > TotalRecordLimit {
		t.Errorf("%d records kept, want at most %d", got, TotalRecordLimit)
	}
	if got := e.SessionRecords(1000, "work"); len(got) != 2 {
		t.Errorf("the smallest owner lost records to the total bound: %d of 2 left", len(got))
	}
}

// TestRecordLogsCarryNoArgv: a kill record's log line names the process
// (pid, start, comm, uid) and never its command line, even redacted:
// redaction knows only the secrets it knows, and logs go where the API's
// authorization does not.
func TestRecordLogsCarryNoArgv(t *testing.T) {
	var buf strings.Builder
	e := New(Config{}, nil, slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})))
	rec := KillRecord{
		Session: "s", Owner: 1000, Process: lineage.ID{PID: 42, Start: 7}, UID: 1000, Comm: "node",
		Argv:   []string{"node", "server.js", "--apikey", "hunter2-is-not-redacted-here", "plainword-secret"},
		Result: ResultSpared + ": rule x",
	}
	e.logRecord(rec)
	out := buf.String()
	for _, bad := range []string{"argv", "server.js", "hunter2", "plainword-secret"} {
		if strings.Contains(out, bad) {
			t.Errorf("log line carries %q: %s", bad, out)
		}
	}
	if !strings.Contains(out, "pid=42") || !strings.Contains(out, "comm=node") {
		t.Errorf("log line does not name the process: %s", out)
	}
}

func TestStatsCountKillsByReasonAndClassAndTimeToTheLastDeath(t *testing.T) {
	var s Stats
	s.Add(Report{Reason: "root-exit", Killed: 2, Spared: 3, SparedPrivilege: 1, Survivors: 1, Records: []KillRecord{
		{Result: ResultKilled, Latency: 30 * time.Millisecond},
		{Result: ResultKilled, Latency: 700 * time.Millisecond},
		{Result: ResultSpared, Latency: time.Hour}, // not a death
	}})
	s.Add(Report{Reason: "marker", WouldKill: 4})
	want := map[string]uint64{
		KillKey("root-exit", ClassKilled): 2, KillKey("root-exit", ClassSpared): 2,
		KillKey("root-exit", ClassSparedPrivilege): 1, KillKey("root-exit", ClassSurvivor): 1,
		KillKey("marker", ClassWouldKill): 4,
	}
	if !maps.Equal(s.Kills, want) {
		t.Fatalf("Kills = %v, want %v", s.Kills, want)
	}
	// One ending killed something: its last death came 700ms after its start.
	if s.Endings.Count != 1 || s.Endings.Sum != 0.7 || s.Endings.Counts[slices.Index(EndingBuckets, 1)] != 1 {
		t.Fatalf("Endings = %+v, want one observation of 0.7s in the 1s bucket", s.Endings)
	}
	c := s.Clone()
	c.Kills["x"] = 1
	c.Endings.Counts[0] = 9
	if _, ok := s.Kills["x"]; ok || s.Endings.Counts[0] == 9 {
		t.Fatal("Clone shares its maps or slices with the original")
	}
}
