package winproc

import (
	"testing"

	"github.com/mcptrace/mcptrace/lineage"
)

// A Windows process keeps its parent's PID after the parent exits, and
// the PID may be reused: only a parent in the snapshot created no later
// than the child is kept. Entries whose create time is unknown cannot be
// named and are left out.
func TestSnapshotsKeepOnlyParentsCreatedBeforeTheChild(t *testing.T) {
	clock := Clock{Boot: 1000}
	snaps := Snapshots([]Entry{
		{PID: 4, Create: 1001, Image: "System"},
		{PID: 100, PPID: 4, Create: 2000, Image: "cmd.exe", Path: `C:\Windows\System32\cmd.exe`, Argv: []string{"cmd", "/c", "npx"}},
		{PID: 200, PPID: 100, Create: 3000, Image: "node.exe"},
		{PID: 300, PPID: 400, Create: 3000, Image: "orphan.exe"},     // parent exited
		{PID: 400, PPID: 4, Create: 5000, Image: "reuser.exe"},       // reused the orphan's parent PID
		{PID: 500, PPID: 4, Create: 0, Image: "protected.exe"},       // create time unreadable
		{PID: 600, PPID: 600, Create: 7000, Image: "selfparent.exe"}, // Windows reports this for some
	}, clock)
	want := map[uint32]uint32{4: 0, 100: 4, 200: 100, 300: 0, 400: 4, 600: 0}
	if len(snaps) != len(want) {
		t.Fatalf("got %d snapshots, want %d: %+v", len(snaps), len(want), snaps)
	}
	for _, s := range snaps {
		if w, ok := want[s.ID.PID]; !ok || s.PPID != w {
			t.Errorf("pid %d: ppid %d, want %d (listed %v)", s.ID.PID, s.PPID, w, ok)
		}
	}
	cmd := snaps[1]
	if cmd.ID != (lineage.ID{PID: 100, Start: 100_000}) || cmd.Comm != "cmd.exe" || cmd.Filename != `C:\Windows\System32\cmd.exe` || len(cmd.Argv) != 3 {
		t.Errorf("cmd.exe: %+v", cmd)
	}
}

func TestClockPlacesFiletimesOnTheBootClock(t *testing.T) {
	c := Clock{Boot: 500}
	for _, tc := range []struct{ ft, want uint64 }{{400, 0}, {500, 0}, {501, 100}, {10_500, 1_000_000}} {
		if got := c.Since(tc.ft); got != tc.want {
			t.Errorf("Since(%d) = %d, want %d", tc.ft, got, tc.want)
		}
	}
}
