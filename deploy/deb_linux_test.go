package deploy_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mcptrace/mcptrace/internal/debian"
	"github.com/mcptrace/mcptrace/internal/testenv"
)

// TestDebianPackageInstallsUpgradesAndPurgesInAFreshRoot builds two
// versions of the package with scripts/deb.sh (Debian's dpkg-deb) and, in
// a Debian 12 root made by debootstrap from the host's mirror (with
// systemd, not running), installs
// the first, upgrades to the second (a local edit of the configuration
// file survives) and removes and purges it (a removal whose uninstall
// fails stops, and the package stays): every file goes, the agent's
// unit is enabled while installed and not after, and the maintainer
// scripts succeed where no systemd runs. The unit passes systemd-analyze
// verify.
func TestDebianPackageInstallsUpgradesAndPurgesInAFreshRoot(t *testing.T) {
	testenv.Root(t)
	for _, tool := range []string{"dpkg-deb", "debootstrap", "systemd-analyze"} {
		if _, err := exec.LookPath(tool); err != nil {
			testenv.Missing(t, tool, "scripts/setup.sh test installs dpkg, debootstrap and systemd")
		}
	}
	if testing.Short() {
		t.Skip("builds the package twice and a Debian root: not with -short")
	}
	debs := t.TempDir()
	build := func(version string) string {
		cmd := exec.Command("../scripts/deb.sh", version, debs)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("scripts/deb.sh %s: %v\n%s", version, err, out)
		}
		m, _ := filepath.Glob(filepath.Join(debs, "mcptrace_"+version+"_*.deb"))
		if len(m) != 1 {
			t.Fatalf("scripts/deb.sh %s wrote %v", version, m)
		}
		return m[0]
	}
	v1, v2 := build("0.1.0~test1"), build("0.1.0~test2")
	// Debian's own checks of a package: no error or warning but the
	// override the package carries (a static binary, on purpose).
	if lintian, err := exec.LookPath("lintian"); err != nil {
		testenv.Missing(t, "lintian", "scripts/setup.sh test installs it")
	} else if out, err := exec.Command(lintian, "--fail-on", "error,warning", v1).CombinedOutput(); err != nil {
		t.Errorf("lintian %s: %v\n%s", filepath.Base(v1), err, out)
	}

	root := filepath.Join(t.TempDir(), "root")
	if err := debian.Bootstrap(context.Background(), "bookworm", root, debian.SystemdRoot...); err != nil {
		t.Fatal(err)
	}
	in := func(args ...string) string {
		t.Helper()
		out, err := exec.Command("chroot", append([]string{root}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("in the root: %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	exists := func(path string) bool {
		_, err := os.Lstat(filepath.Join(root, path))
		return err == nil
	}
	copyIn := func(deb string) string {
		b, err := os.ReadFile(deb)
		if err != nil {
			t.Fatal(err)
		}
		to := filepath.Join("/tmp", filepath.Base(deb))
		if err := os.WriteFile(filepath.Join(root, to), b, 0o644); err != nil {
			t.Fatal(err)
		}
		return to
	}
	const wants = "/etc/systemd/system/multi-user.target.wants/mcptrace.service"
	const conf = "/etc/mcptrace/config.yaml"

	in("dpkg", "-i", copyIn(v1))
	if v := in("mcptrace", "--version"); !strings.Contains(v, "0.1.0~test1") {
		t.Fatalf("installed: %s", v)
	}
	for _, p := range []string{wants, conf, "/usr/share/man/man1/mcptrace-agent.1.gz", "/usr/share/bash-completion/completions/mcptrace", "/usr/share/mcptrace/prometheus/mcptrace.rules.yml"} {
		if !exists(p) {
			t.Errorf("installed: %s is missing", p)
		}
	}
	// The unit as installed, against the root's systemd (Debian 12's).
	if out, err := exec.Command("systemd-analyze", "verify", "--man=no", "--root="+root, "/lib/systemd/system/mcptrace.service").CombinedOutput(); err != nil {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
	// An edit as an admin makes it: one option uncommented.
	b, err := os.ReadFile(filepath.Join(root, conf))
	if err != nil || !strings.Contains(string(b), "  #level: \"info\"\n") {
		t.Fatalf("installed %s has no commented log level: %v\n%s", conf, err, b)
	}
	edited := strings.Replace(string(b), "  #level: \"info\"\n", "  level: \"debug\"\n", 1)
	if err := os.WriteFile(filepath.Join(root, conf), []byte(edited), 0o644); err != nil {
		t.Fatal(err)
	}

	in("dpkg", "-i", copyIn(v2))
	if v := in("mcptrace", "--version"); !strings.Contains(v, "0.1.0~test2") {
		t.Fatalf("upgraded: %s", v)
	}
	if b, _ := os.ReadFile(filepath.Join(root, conf)); string(b) != edited {
		t.Fatalf("the upgrade lost the local edit of %s", conf)
	}
	if !exists(wants) {
		t.Fatal("upgraded: the unit is no longer enabled")
	}

	// A removal whose uninstall fails stops, so that no kernel program
	// outlives the binary that could remove it: here, a configuration
	// the agent refuses.
	broken := edited + "no-such-section:\n  x: 1\n"
	if err := os.WriteFile(filepath.Join(root, conf), []byte(broken), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("chroot", root, "dpkg", "-r", "mcptrace").CombinedOutput(); err == nil || !strings.Contains(string(out), "removal stopped") || !exists("/usr/bin/mcptrace") {
		t.Fatalf("removal with a failing uninstall went on (%v):\n%s", err, out)
	}
	if err := os.WriteFile(filepath.Join(root, conf), []byte(edited), 0o644); err != nil {
		t.Fatal(err)
	}
	out := in("dpkg", "-r", "mcptrace")
	if !strings.Contains(out, "detached and unpinned") {
		t.Errorf("removal did not take the agent out of the kernel (mcptrace uninstall):\n%s", out)
	}
	if exists("/usr/bin/mcptrace") || !exists(conf) {
		t.Fatalf("removed: the binary is there %v, the configuration %v (want gone, kept)", exists("/usr/bin/mcptrace"), exists(conf))
	}
	in("dpkg", "--purge", "mcptrace")
	for _, p := range []string{"/etc/mcptrace", wants, "/var/lib/mcptrace", "/lib/systemd/system/mcptrace.service"} {
		if exists(p) {
			t.Errorf("purged: %s is still there", p)
		}
	}
	if out, err := exec.Command("chroot", root, "dpkg-query", "-W", "mcptrace").CombinedOutput(); err == nil || !strings.Contains(string(out), "no packages found") {
		t.Errorf("purged: dpkg still knows the package: %v\n%s", err, out)
	}
}
