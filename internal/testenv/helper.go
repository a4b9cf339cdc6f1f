package testenv

import (
	"fmt"
	"os"
)

// HelperVar names the helper process a test binary was started as: test
// binaries double as the helper processes their tests need (a process
// that holds a connection, execs from a thread, crashes mid-write), so
// that a VM guest needs nothing but the binary.
const HelperVar = "MCPTRACE_TEST_HELPER"

// RunHelper is the first call of such a package's TestMain. In a process
// started as one of helpers (HelperEnv), it runs that helper and exits
// (0 when the helper returns); in the test binary itself it returns.
func RunHelper(helpers map[string]func()) {
	name := os.Getenv(HelperVar)
	if name == "" {
		return
	}
	run, ok := helpers[name]
	if !ok {
		fmt.Fprintf(os.Stderr, "%s=%s: no such test helper in this package\n", HelperVar, name)
		os.Exit(2)
	}
	run()
	os.Exit(0)
}

// HelperEnv is this process's environment, plus extra, for a child that
// runs this test binary as the helper name.
func HelperEnv(name string, extra ...string) []string {
	return append(append(os.Environ(), HelperVar+"="+name), extra...)
}
