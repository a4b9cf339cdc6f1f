package procmatch

import (
	"slices"
	"testing"
)

func TestPortableReadsWindowsImagesAndLeavesOthersAlone(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   Image
		want Image
		win  bool
	}{
		{"a Linux image is not a Windows one", Image{Filename: "/usr/bin/node", Comm: "node", Argv: []string{"node", `C:\x`}},
			Image{Filename: "/usr/bin/node", Comm: "node", Argv: []string{"node", `C:\x`}}, false},
		{"a drive path: lower case, '/', no .exe; argv[0] its program", Image{Filename: `C:\Program Files\NodeJS\Node.EXE`, Comm: "Node.EXE", Argv: []string{`C:\Program Files\NodeJS\Node.EXE`, `C:\srv\index.js`, "--Flag"}},
			Image{Filename: "c:/program files/nodejs/node", Comm: "node", Argv: []string{"node", "C:/srv/index.js", "--Flag"}}, true},
		{"an NT path from ETW", Image{Filename: `\Device\HarddiskVolume3\Windows\System32\cmd.exe`, Comm: "cmd.exe"},
			Image{Filename: "/device/harddiskvolume3/windows/system32/cmd", Comm: "cmd"}, true},
		{"argv[0] alone says Windows; .cmd and .bat go too", Image{Argv: []string{`C:\nodejs\npx.cmd`, "-y", "pkg"}},
			Image{Argv: []string{"npx", "-y", "pkg"}}, true},
		{"a name that is only an extension stays", Image{Filename: `C:\x\.exe`, Comm: ".exe"}, Image{Filename: "c:/x/.exe", Comm: ".exe"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, win := portable(tc.in)
			if win != tc.win || got.Filename != tc.want.Filename || got.Comm != tc.want.Comm || !slices.Equal(got.Argv, tc.want.Argv) {
				t.Errorf("portable(%+v) = %+v, %v; want %+v, %v", tc.in, got, win, tc.want, tc.win)
			}
		})
	}
}

// A Windows image matches a pattern in either reading, and a Not pattern
// in either reading vetoes: a rule's exclusion written for the name as
// Windows gives it still excludes.
func TestWindowsImagesMatchEitherReadingAndAreVetoedByEither(t *testing.T) {
	keep := Image{Filename: `C:\Tools\Keeper.exe`, Comm: "Keeper.exe", Argv: []string{`C:\Tools\Keeper.exe`, "--serve"}}
	for _, tc := range []struct {
		name string
		rule Rule
		mode Mode
		want bool
	}{
		{"comm without .exe", Rule{Name: "k", Comm: Patterns{"keeper"}}, Any, true},
		{"exe glob on the basename", Rule{Name: "k", Exe: Patterns{"keeper"}}, Any, true},
		{"exe glob on trailing components", Rule{Name: "k", Exe: Patterns{"tools/keeper"}}, Any, true},
		{"argv anchored on the raw Windows path", Rule{Name: "k", Argv: Patterns{`^C:\\Tools\\Keeper\.exe --serve$`}}, Any, true},
		{"argv anchored on the program", Rule{Name: "k", Argv: Patterns{`^keeper --serve$`}}, Any, true},
		{"Not on the raw form vetoes", Rule{Name: "k", Comm: Patterns{"keeper"}, Not: Patterns{`Keeper\.exe --serve`}}, Any, false},
		{"Not on the portable form vetoes", Rule{Name: "k", Argv: Patterns{`Keeper\.exe`}, Not: Patterns{`^keeper `}}, Any, false},
		{"All: every field in some reading", Rule{Name: "k", Comm: Patterns{"keeper"}, Argv: Patterns{`--serve$`}}, All, true},
		{"All: a field no reading matches", Rule{Name: "k", Comm: Patterns{"keeper"}, Argv: Patterns{`--other`}}, All, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := Compile(tc.rule, tc.mode)
			if err != nil {
				t.Fatal(err)
			}
			if got := m.Match(keep); got != tc.want {
				t.Errorf("Match = %v, want %v", got, tc.want)
			}
			if got := First([]*Matcher{m}, keep) != nil; got != tc.want {
				t.Errorf("First matched %v, want %v", got, tc.want)
			}
		})
	}
}
