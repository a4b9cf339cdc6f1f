package testenv

import (
	"os/exec"
	"slices"
	"testing"
	"time"
)

// ForkExecTrue runs /bin/true b.N times, each fork+exec+wait, and returns
// the time per run: the unit of the fork/exec overhead benchmarks.
func ForkExecTrue(b *testing.B) time.Duration {
	start := time.Now()
	for i := 0; i < b.N; i++ {
		if err := exec.Command("/bin/true").Run(); err != nil {
			b.Fatal(err)
		}
	}
	return time.Since(start) / time.Duration(b.N)
}

// Median returns the median of d in ns, sorting d.
func Median(d []time.Duration) float64 {
	slices.Sort(d)
	return float64(d[len(d)/2])
}
