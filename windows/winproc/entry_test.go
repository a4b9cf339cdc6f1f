package winproc

import (
	"testing"

	"github.com/mcptrace/mcptrace/lineage"
	"github.com/mcptrace/mcptrace/windows/owners"
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
	}, clock, nil)
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

// A snapshot's process is owned by its token's owner, and by
// owners.Unknown, never root, when its token could not be read or no
// owner function is given.
func TestSnapshotsOwnEachProcessByItsToken(t *testing.T) {
	alice := owners.Token{SID: "S-1-5-21-1-2-3-1001"}
	entries := []Entry{
		{PID: 100, Create: 2000, Image: "codex.exe", Token: alice, TokenOK: true},
		{PID: 200, Create: 2000, Image: "protected.exe"},
	}
	owner := func(tok owners.Token) uint32 {
		if tok == alice {
			return owners.FirstUID
		}
		return owners.Root
	}
	for _, tc := range []struct {
		name  string
		owner func(owners.Token) uint32
		want  map[uint32]uint32
	}{
		{"with owners", owner, map[uint32]uint32{100: owners.FirstUID, 200: owners.Unknown}},
		{"without", nil, map[uint32]uint32{100: owners.Unknown, 200: owners.Unknown}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, s := range Snapshots(entries, Clock{Boot: 1000}, tc.owner) {
				if s.UID != tc.want[s.ID.PID] {
					t.Errorf("pid %d: uid %d, want %d", s.ID.PID, s.UID, tc.want[s.ID.PID])
				}
			}
		})
	}
}
