package owners

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const (
	alice = "S-1-5-21-1004336348-1177238915-682003330-1001"
	bob   = "S-1-5-21-1004336348-1177238915-682003330-1002"
)

func TestOwnerNumbersUsersAndMakesAdministratorsTokensRoot(t *testing.T) {
	tab, err := Load("")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		tok  Token
		want uint32
	}{
		{"SYSTEM is root", Token{SID: SystemSID}, Root},
		{"an elevated administrator is root", Token{SID: alice, Admin: true}, Root},
		{"the same user unelevated has a number of its own", Token{SID: alice}, FirstUID},
		{"another user the next", Token{SID: bob}, FirstUID + 1},
		{"the first user again keeps its number", Token{SID: alice}, FirstUID},
		{"LocalService is a user like any", Token{SID: "S-1-5-19"}, FirstUID + 2},
		{"the same user at high integrity, not an administrator, is another owner", Token{SID: alice, High: true}, FirstUID + 3},
		{"a per-service account is no owner", Token{SID: "S-1-5-80-956008885-3418522649-1831038044-1853292631-2271478464"}, Unknown},
		{"a font driver host account is no owner", Token{SID: "S-1-5-96-0-1"}, Unknown},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tab.Owner(tc.tok)
			if (err != nil) != (tc.want == Unknown) || got != tc.want {
				t.Errorf("Owner(%+v) = %d, %v; want %d", tc.tok, got, err, tc.want)
			}
		})
	}
	if s, high, ok := tab.SID(FirstUID + 1); !ok || s != bob || high {
		t.Errorf("SID(%d) = %q, %v, %v", FirstUID+1, s, high, ok)
	}
	if s, high, ok := tab.SID(FirstUID + 3); !ok || s != alice || !high {
		t.Errorf("SID(%d) = %q, %v, %v", FirstUID+3, s, high, ok)
	}
}

func TestOwnerRefusesWhatIsNotASID(t *testing.T) {
	tab, _ := Load("")
	for _, s := range []string{"", "alice", "S-1", "S-2-5-18", "S-1-5-21-x", "S-1-5-" + strings.Repeat("1-", 20) + "1", "S-1-5-18\n"} {
		if uid, err := tab.Owner(Token{SID: s, Admin: true}); err == nil || uid != Unknown {
			t.Errorf("Owner(%q) = %d, %v; want Unknown and an error", s, uid, err)
		}
	}
}

// A restart gives every user the number it had: the table is saved when
// a user is first seen.
func TestNumbersSurviveARestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "owners.json")
	tab, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := tab.Owner(Token{SID: alice})
	b, _ := tab.Owner(Token{SID: bob})
	ah, _ := tab.Owner(Token{SID: alice, High: true})
	again, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := again.Owner(Token{SID: bob}); got != b {
		t.Errorf("bob after a restart = %d, want %d", got, b)
	}
	if got, _ := again.Owner(Token{SID: alice}); got != a {
		t.Errorf("alice after a restart = %d, want %d", got, a)
	}
	if got, _ := again.Owner(Token{SID: alice, High: true}); got != ah {
		t.Errorf("alice at high integrity after a restart = %d, want %d", got, ah)
	}
	if got, _ := again.Owner(Token{SID: "S-1-5-21-1-2-3-1003"}); got != ah+1 {
		t.Errorf("a new user after a restart = %d, want %d", got, ah+1)
	}
}

// A file no Table could have written is refused whole: a table that
// named one owner wrongly would let a session end another user's
// processes.
func TestAFileNoTableCouldHaveWrittenIsRefused(t *testing.T) {
	for _, tc := range []struct{ name, body string }{
		{"not JSON", "{"},
		{"another version", `{"version":2,"owners":[]}`},
		{"a bad SID", `{"version":1,"owners":[{"sid":"alice","uid":1048576}]}`},
		{"SYSTEM numbered", `{"version":1,"owners":[{"sid":"S-1-5-18","uid":1048576}]}`},
		{"a number below the range", `{"version":1,"owners":[{"sid":"` + alice + `","uid":0}]}`},
		{"a number twice", `{"version":1,"owners":[{"sid":"` + alice + `","uid":1048576},{"sid":"` + bob + `","uid":1048576}]}`},
		{"a SID twice", `{"version":1,"owners":[{"sid":"` + alice + `","uid":1048576},{"sid":"` + alice + `","uid":1048577}]}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "owners.json")
			if err := os.WriteFile(path, []byte(tc.body), 0o600); err != nil {
				t.Fatal(err)
			}
			if _, err := Load(path); err == nil {
				t.Error("loaded")
			}
		})
	}
}

// A user who cannot be numbered (the table full, the file not written)
// is Unknown, which matches no owner, never another user's number.
func TestAUserWhoCannotBeNumberedIsUnknown(t *testing.T) {
	tab, _ := Load("")
	tab.next = FirstUID + MaxOwners
	if uid, err := tab.Owner(Token{SID: alice}); !errors.Is(err, ErrFull) || uid != Unknown {
		t.Errorf("a full table: %d, %v", uid, err)
	}
	dir := t.TempDir()
	tab, _ = Load(filepath.Join(dir, "missing", "owners.json"))
	if uid, err := tab.Owner(Token{SID: alice}); err == nil || uid != Unknown {
		t.Errorf("an unwritable table: %d, %v", uid, err)
	}
	if _, _, ok := tab.SID(FirstUID); ok {
		t.Error("a number that was not saved is kept")
	}
}
