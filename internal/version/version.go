package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Set at build time with -ldflags -X (see the package documentation);
// empty in a plain go build.
var (
	version  string
	revision string
)

// Info is one build of mcptrace.
type Info struct {
	// Version is the release ("0.1.0~git20261128080454.0123456789ab"),
	// the module version Go recorded (a pseudo-version for a build in a
	// clone), or "devel" when neither is known.
	Version string `json:"version"`
	// Revision is the commit the binary was built from, "unknown" when
	// the build did not record one; Modified says the checkout had
	// uncommitted changes (known from Go's VCS stamp only).
	Revision string `json:"revision"`
	Modified bool   `json:"modified,omitempty"`
	// Time is the commit's time as Go recorded it (RFC 3339), or "".
	Time      string `json:"commit_time,omitempty"`
	GoVersion string `json:"go_version"`
	Platform  string `json:"platform"`
}

// Get is this binary's build.
func Get() Info {
	bi, _ := debug.ReadBuildInfo()
	return from(version, revision, bi)
}

// from is the build described by the stamped values and Go's build
// information (bi may be nil).
func from(stamped, rev string, bi *debug.BuildInfo) Info {
	in := Info{Version: stamped, Revision: rev, GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if bi != nil {
		if bi.GoVersion != "" {
			in.GoVersion = bi.GoVersion
		}
		var vcsRev, vcsTime string
		var modified bool
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				vcsRev = s.Value
			case "vcs.time":
				vcsTime = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
		if in.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			in.Version = bi.Main.Version
		}
		// What Go recorded of the checkout describes a stamped revision
		// only when it is that revision.
		if in.Revision == "" || in.Revision == vcsRev {
			in.Revision, in.Time, in.Modified = vcsRev, vcsTime, modified
		}
	}
	if in.Version == "" {
		in.Version = "devel"
	}
	if in.Revision == "" {
		in.Revision = "unknown"
	}
	return in
}

// String is the build in one line: "0.1.0~git… (revision 0123456789ab,
// go1.26.0, linux/amd64)".
func (in Info) String() string {
	rev := in.Revision
	if len(rev) > 12 && rev != "unknown" {
		rev = rev[:12]
	}
	if in.Modified {
		rev += ", modified"
	}
	return fmt.Sprintf("%s (revision %s, %s, %s)", in.Version, rev, in.GoVersion, in.Platform)
}
