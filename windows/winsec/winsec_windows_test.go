package winsec

import (
	"strings"
	"testing"

	"golang.org/x/sys/windows"

	"github.com/mcptrace/mcptrace/internal/testenv"
)

// These tests run under wine in CI (scripts/wine-test.sh) and on Windows.

// The rule on security descriptors as Windows writes them: ProgramData
// may be above the agent's directory (users may add to it, not remove or
// rename), never be the directory itself; a directory users own, or may
// delete in, or change, is refused; deny and inherit-only ACEs do not
// count; administrators' and SYSTEM's own are trusted.
func TestUntrustedReadsWhoCanChangeAPath(t *testing.T) {
	const programData = "O:SYG:SYD:P(A;OICI;FA;;;SY)(A;OICI;FA;;;BA)(A;OICIIO;GA;;;CO)(A;OICI;0x1200a9;;;BU)(A;CI;0x100116;;;BU)"
	trusted := func(sid *windows.SID) bool {
		return sid.IsWellKnown(windows.WinLocalSystemSid) || sid.IsWellKnown(windows.WinBuiltinAdministratorsSid)
	}
	for _, tc := range []struct {
		name, sddl string
		target     bool
		want       string // a part of the reason; "" trusted
	}{
		{"ProgramData above the agent's directory", programData, false, ""},
		{"ProgramData as the directory itself", programData, true, "lets S-1-5-32-545 change it"},
		{"the agent's directory", "O:BAD:P(A;OICI;FA;;;SY)(A;OICI;FA;;;BA)", true, ""},
		{"a directory a user made", "O:S-1-5-21-1-2-3-1001D:(A;OICI;FA;;;SY)(A;OICI;FA;;;BA)", true, "is owned by S-1-5-21-1-2-3-1001"},
		{"users may delete in it", "O:BAD:(A;;0x40;;;BU)", false, "lets S-1-5-32-545 change it (access 0x40)"},
		{"users may change its access list", "O:BAD:(A;;WD;;;AU)", false, "lets S-1-5-11 change it"},
		{"users may write the file", "O:BAD:(A;;FW;;;BU)", true, "lets S-1-5-32-545"},
		{"users may only read it", "O:BAD:(A;;FR;;;BU)(A;;FA;;;BA)", true, ""},
		{"a deny changes nothing counted", "O:BAD:(D;;FA;;;BU)(A;;FA;;;BA)", true, ""},
		{"an inherit-only grant is for what is below", "O:BAD:(A;OICIIO;FA;;;BU)(A;;FA;;;BA)", true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sd, err := windows.SecurityDescriptorFromString(tc.sddl)
			if err != nil {
				t.Fatal(err)
			}
			got := Untrusted(sd, tc.target, trusted)
			if tc.want == "" && got != "" || tc.want != "" && !strings.Contains(got, tc.want) {
				t.Errorf("Untrusted(%s) = %q, want %q", tc.sddl, got, tc.want)
			}
		})
	}
}

// A descriptor with no access list at all grants everyone everything.
func TestUntrustedRefusesADescriptorWithNoAccessList(t *testing.T) {
	sd, err := windows.NewSecurityDescriptor()
	if err != nil {
		t.Fatal(err)
	}
	admins, err := windows.CreateWellKnownSid(windows.WinBuiltinAdministratorsSid)
	if err != nil {
		t.Fatal(err)
	}
	if err := sd.SetOwner(admins, false); err != nil {
		t.Fatal(err)
	}
	if got := Untrusted(sd, true, func(s *windows.SID) bool { return s.Equals(admins) }); !strings.Contains(got, "no access list") {
		t.Errorf("Untrusted of a descriptor without a DACL = %q", got)
	}
}

// A directory this process made, under its temporary directory, is
// trusted as wine keeps it (owned by this process's user), and a path
// that does not exist is an error, never trusted.
func TestCheckPathWalksEveryComponent(t *testing.T) {
	dir := testenv.TempDir(t)
	if err := CheckPath(dir); err != nil {
		t.Errorf("this test's own directory: %v", err)
	}
	if err := CheckPath(dir + `\missing\x`); err == nil {
		t.Error("a missing path is trusted")
	}
}
