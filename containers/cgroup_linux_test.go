package containers

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/mcptrace/mcptrace/internal/testenv"
)

// TestARemovedCgroupReadsAsGone proves what CgroupKill relies on once a
// kill has emptied a container's cgroup and its engine removes it: a
// cgroup file opened before the removal and read after it fails with
// ENODEV (the race CI met on a cgroup v1+v2 hybrid host), a cgroup file
// opened after it with ENOENT, and removed counts both as gone.
func TestARemovedCgroupReadsAsGone(t *testing.T) {
	testenv.Root(t)
	mounts, err := readCgroupMounts()
	if err != nil {
		t.Fatal(err)
	}
	var v2 string
	for _, m := range mounts {
		if m.v2 && m.root == "/" {
			v2 = m.point
		}
	}
	if v2 == "" {
		testenv.Missing(t, "cgroup v2", "no cgroup2 file system is mounted here")
	}
	dir := filepath.Join(v2, "mcptrace-test-removed-"+strconv.Itoa(os.Getpid()))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(dir) })
	f, err := os.Open(filepath.Join(dir, "cgroup.events"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	_, err = f.Read(make([]byte, 256))
	if !removed(err) {
		t.Errorf("read of cgroup.events opened before its cgroup was removed: %v, which removed() does not count as gone", err)
	}
	if _, err := populatedV2(dir); !removed(err) {
		t.Errorf("populatedV2 of a removed cgroup: %v, which removed() does not count as gone", err)
	}
	if pids, err := procsBelow(dir); !removed(err) || len(pids) > 0 {
		t.Errorf("procsBelow of a removed cgroup: %v, %v; want no pids and an error removed() counts as gone", pids, err)
	}
}
