package sessions

import "testing"

func TestProgramNameReadsPathsOfEitherSystem(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"mcptrace", "mcptrace"},
		{"/usr/bin/mcptrace", "mcptrace"},
		{`C:\Program Files\mcptrace\mcptrace.exe`, "mcptrace"},
		{`\Device\HarddiskVolume3\tools\MCPTRACE.EXE`, "MCPTRACE"},
		{"mcptrace.exe.bak", "mcptrace.exe.bak"},
		{"mcptrace-helper", "mcptrace-helper"},
		{".exe", ".exe"},
		{"", ""},
	} {
		if got := programName(tc.in); got != tc.want {
			t.Errorf("programName(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
