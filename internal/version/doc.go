// Package version says which build of mcptrace runs: the release and
// commit a build script stamped into the binary (go build -ldflags "-X
// github.com/mcptrace/mcptrace/internal/version.version=… -X
// …/version.revision=…", as the Makefile, scripts/deb.sh and
// scripts/image.sh do), or else what the Go toolchain recorded itself
// (runtime/debug.ReadBuildInfo: the module's version and the VCS
// revision of a plain `go build` in a clone).
//
// It does not ask git or the network: a binary built where neither was
// known says "devel" and "unknown" rather than guess.
package version
