package version

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/mcptrace/mcptrace/internal/testenv"
)

func TestVersionFromStampAndBuildInfo(t *testing.T) {
	vcs := &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "v0.0.0-20261128080454-0123456789ab+dirty"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "0123456789abcdef0123456789abcdef01234567"}, {Key: "vcs.time", Value: "2026-11-28T08:04:54Z"}, {Key: "vcs.modified", Value: "true"}}}
	for _, tc := range []struct {
		name             string
		stamped, rev     string
		bi               *debug.BuildInfo
		version, revsion string
		modified         bool
	}{
		{"stamped by make build", "0.1.0~git20261128080454.0123456789ab", "0123456789abcdef0123456789abcdef01234567", vcs, "0.1.0~git20261128080454.0123456789ab", "0123456789abcdef0123456789abcdef01234567", true},
		{"stamped, another commit than Go saw", "0.1.0~x", "fedcba", vcs, "0.1.0~x", "fedcba", false},
		{"a plain go build in a clone", "", "", vcs, "v0.0.0-20261128080454-0123456789ab+dirty", "0123456789abcdef0123456789abcdef01234567", true},
		{"a go build without VCS", "", "", &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "(devel)"}}, "devel", "unknown", false},
		{"no build information", "", "", nil, "devel", "unknown", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := from(tc.stamped, tc.rev, tc.bi)
			if in.Version != tc.version || in.Revision != tc.revsion || in.Modified != tc.modified {
				t.Errorf("from(%q, %q) = %+v, want version %q revision %q modified %v", tc.stamped, tc.rev, in, tc.version, tc.revsion, tc.modified)
			}
			if s := in.String(); !strings.HasPrefix(s, tc.version+" (revision ") {
				t.Errorf("String() = %q", s)
			}
		})
	}
}

// buildMcptrace builds cmd/mcptrace from dir with extra go build flags
// and returns what its version command, --version and version --json
// print.
func buildMcptrace(t *testing.T, dir string, flags ...string) (string, string) {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		testenv.Missing(t, "go", "the test builds mcptrace as a user would: "+err.Error())
	}
	bin := filepath.Join(t.TempDir(), "mcptrace")
	// -trimpath: the build cache serves a clone's packages too.
	cmd := exec.Command(gobin, append(append([]string{"build", "-trimpath", "-o", bin}, flags...), "./cmd/mcptrace")...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=-mod=mod")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %v: %v\n%s", flags, err, out)
	}
	out, err := exec.Command(bin, "version", "--api.socket", filepath.Join(t.TempDir(), "none.sock")).CombinedOutput()
	if err != nil {
		t.Fatalf("mcptrace version: %v\n%s", err, out)
	}
	v, err := exec.Command(bin, "--version").CombinedOutput()
	if err != nil {
		t.Fatalf("mcptrace --version: %v\n%s", err, v)
	}
	return string(out), string(v)
}

// make build's way: the version and revision stamped in with -ldflags -X.
// Like the next test it builds mcptrace (a link from the build cache,
// ~8 s): what a binary says of itself is only known by building one.
func TestVersionOfABuildWithLdflags(t *testing.T) {
	const pkg = "github.com/mcptrace/mcptrace/internal/version"
	out, v := buildMcptrace(t, "../..", "-ldflags", "-X "+pkg+".version=0.1.0~test7 -X "+pkg+".revision=0123456789abcdef")
	for _, s := range []string{out, v} {
		if !strings.Contains(s, "mcptrace 0.1.0~test7 (revision 0123456789ab, go") {
			t.Errorf("stamped build says:\n%s", s)
		}
	}
	if !strings.Contains(out, "agent    not running at") {
		t.Errorf("version without an agent does not say so:\n%s", out)
	}
}

// A plain go build in a clone (no ldflags): the version and revision Go
// recorded from git. (Go records nothing in a git worktree, which this
// checkout may be: the test builds from a clone of its HEAD.)
func TestVersionOfAPlainGoBuild(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		testenv.Missing(t, "git", "the test clones this checkout: "+err.Error())
	}
	head, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		t.Skipf("not a git checkout (%v): a plain go build has no revision to report here", err)
	}
	rev := strings.TrimSpace(string(head))
	clone := filepath.Join(t.TempDir(), "mcptrace")
	if out, err := exec.Command("git", "clone", "--quiet", "--shared", "../..", clone).CombinedOutput(); err != nil {
		t.Fatalf("git clone: %v\n%s", err, out)
	}
	out, v := buildMcptrace(t, clone, "-buildvcs=true")
	for _, s := range []string{out, v} {
		if !strings.Contains(s, "mcptrace v0.0.0-") || !strings.Contains(s, "(revision "+rev[:12]+", go") {
			t.Errorf("a plain go build of %s says:\n%s", rev[:12], s)
		}
	}
}
