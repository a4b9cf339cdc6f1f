//go:build linux

package debian

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// rootCacheTTL is how long a cached root is used: the mirror's packages
// change (security updates), a day-old root is as good as a fresh one.
const rootCacheTTL = 24 * time.Hour

// Bootstrap makes a Debian root of suite (e.g. bookworm) in dir with
// debootstrap's minbase variant and the packages include, from the host's
// mirror (HostMirror). A failure says which mirror it used and ends with
// the last lines debootstrap printed.
//
// A root made once is kept as a tar file in the cache (RootCacheDir), by
// suite, packages and mirror, for a day: the tests that need the same
// root (deploy's package test, vmtests/systemd) then pay for debootstrap
// once, not once each (two to four minutes each on a 2-core machine,
// mostly downloading and unpacking). Concurrent callers wait for each
// other on a lock file there, so the second one unpacks the first one's
// root.
func Bootstrap(ctx context.Context, suite, dir string, include ...string) error {
	m, err := HostMirror()
	if err != nil {
		return err
	}
	inc := slices.Clone(include)
	slices.Sort(inc)
	key := sha256.Sum256([]byte(strings.Join(append([]string{suite, m.URI, m.Keyring}, inc...), "\x00")))
	cache, err := RootCacheDir()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(cache, 0o700); err != nil {
		return fmt.Errorf("root cache: %w", err)
	}
	name := suite + "-" + hex.EncodeToString(key[:8])
	lock, err := os.OpenFile(filepath.Join(cache, name+".lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return fmt.Errorf("root cache: %w", err)
	}
	defer lock.Close()
	if err := flockContext(ctx, lock); err != nil {
		return fmt.Errorf("root cache: waiting for %s: %w", lock.Name(), err)
	}
	tarball := filepath.Join(cache, name+".tar")
	if fi, err := os.Stat(tarball); err == nil && time.Since(fi.ModTime()) < rootCacheTTL {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		out, err := exec.CommandContext(ctx, "tar", "-C", dir, "--numeric-owner", "-xpf", tarball).CombinedOutput()
		if err == nil {
			return nil
		}
		// A damaged cache file is made again, not trusted.
		os.Remove(tarball)
		if err := os.RemoveAll(dir); err != nil {
			return fmt.Errorf("unpacking cached root %s: %s; removing what was unpacked: %w", tarball, strings.TrimSpace(string(out)), err)
		}
	}
	if err := debootstrap(ctx, m, suite, dir, inc); err != nil {
		return err
	}
	tmp := tarball + ".tmp"
	if out, err := exec.CommandContext(ctx, "tar", "-C", dir, "--numeric-owner", "-cpf", tmp, ".").CombinedOutput(); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("caching the root in %s: %v: %s", tmp, err, strings.TrimSpace(string(out)))
	}
	return os.Rename(tmp, tarball)
}

func debootstrap(ctx context.Context, m *Mirror, suite, dir string, include []string) error {
	args := []string{"--variant=minbase", "--keyring=" + m.Keyring}
	if len(include) > 0 {
		args = append(args, "--include="+strings.Join(include, ","))
	}
	out, err := exec.CommandContext(ctx, "debootstrap", append(args, suite, dir, m.URI)...).CombinedOutput()
	if err != nil {
		lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
		return fmt.Errorf("debootstrap %s from %s (%s): %w\n%s", suite, m.URI, m.Origin, err, strings.Join(lines[max(0, len(lines)-30):], "\n"))
	}
	return nil
}

// RootCacheDir is where Bootstrap keeps its roots:
// $MCPTRACE_DEBIAN_CACHE, else ${XDG_CACHE_HOME:-$HOME/.cache}/mcptrace/debian.
func RootCacheDir() (string, error) {
	if d := os.Getenv("MCPTRACE_DEBIAN_CACHE"); d != "" {
		return d, nil
	}
	d, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("root cache: %w", err)
	}
	return filepath.Join(d, "mcptrace", "debian"), nil
}

// flockContext takes an exclusive flock on f, giving up when ctx is done.
func flockContext(ctx context.Context, f *os.File) error {
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return nil
		}
		if err != unix.EWOULDBLOCK {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// SystemdRoot is the packages of the root the tests that install the
// Debian package use (deploy's install test, vmtests/systemd's boot):
// one list, so that Bootstrap's cache serves both.
var SystemdRoot = []string{"systemd", "systemd-sysv", "procps"}
