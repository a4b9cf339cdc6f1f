package agent

import (
	"bytes"
	"reflect"
	"testing"

	"github.com/mcptrace/mcptrace/lineage"
	"github.com/mcptrace/mcptrace/state"
)

// TestScanRecordRedactsEachCommandLine: the journal is on disk, so a
// process read's record holds every command line redacted as an event's
// is (stateArgv), each its own even when many processes share one (the
// record redacts each distinct command line once), and the graph's
// snapshots are left as read.
func TestScanRecordRedactsEachCommandLine(t *testing.T) {
	secret := []string{"docker", "run", "-i", "--rm", "-e", "GITHUB_PERSONAL_ACCESS_TOKEN=ghp_SCANRECORDSECRET1", "ghcr.io/github/github-mcp-server"}
	other := []string{"node", "server.js", "--api-key", "SCANRECORDSECRET2"}
	tag := []string{"mcptrace", "run", "--session", "sk-looks-like-a-token", "--", "sh", "-c", "curl -u me:SCANRECORDSECRET3 x"}
	snaps := []lineage.Snapshot{
		{ID: lineage.ID{PID: 10, Start: 1}, Argv: secret},
		{ID: lineage.ID{PID: 11, Start: 2}, PPID: 10, Argv: other},
		{ID: lineage.ID{PID: 12, Start: 3}, PPID: 10, Argv: secret},
		{ID: lineage.ID{PID: 13, Start: 4}, PPID: 1, Argv: tag},
		{ID: lineage.ID{PID: 14, Start: 5}, Argv: []string{}},
		{ID: lineage.ID{PID: 2, Start: 0}, Comm: "kthreadd", Kernel: true},
	}
	keep := make([]lineage.Snapshot, len(snaps))
	for i, s := range snaps {
		s.Argv = append([]string(nil), s.Argv...)
		if snaps[i].Argv != nil && len(snaps[i].Argv) == 0 {
			s.Argv = []string{}
		}
		keep[i] = s
	}
	rec := scanRecord(state.Scan{ReadAt: 7, Snapshots: snaps})
	if rec.Kind != recScan {
		t.Fatalf("kind %d, want %d", rec.Kind, recScan)
	}
	for _, s := range []string{"SCANRECORDSECRET1", "SCANRECORDSECRET2", "SCANRECORDSECRET3"} {
		if bytes.Contains(rec.Data, []byte(s)) {
			t.Errorf("the record holds %q", s)
		}
	}
	got, err := state.DecodeScan(rec.Data)
	if err != nil {
		t.Fatal(err)
	}
	if got.ReadAt != 7 || got.Repair || len(got.Snapshots) != len(snaps) {
		t.Fatalf("decoded %+v", got)
	}
	for i, s := range got.Snapshots {
		want := keep[i]
		want.Argv = stateArgv(keep[i].Argv)
		if !reflect.DeepEqual(s, want) {
			t.Errorf("snapshot %d:\n got %#v\nwant %#v", i, s, want)
		}
	}
	// The session's ID is kept as the tracker must read it again.
	if a := got.Snapshots[3].Argv; len(a) < 4 || a[3] != "sk-looks-like-a-token" {
		t.Errorf("the tag's argv in the record: %q", a)
	}
	if !reflect.DeepEqual(snaps, keep) {
		t.Errorf("scanRecord changed the snapshots it was given:\n got %#v\nwant %#v", snaps, keep)
	}
}
