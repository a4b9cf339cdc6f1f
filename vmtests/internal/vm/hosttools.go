//go:build linux

package vm

import (
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"

	"github.com/mcptrace/mcptrace/vmtests/internal/cpio"
)

// DefaultHostTools are host commands shipped into the guest (with their
// shared libraries) in place of the busybox applets of the same name, so
// that tests written against a Debian userland (dash as /bin/sh, GNU
// coreutils, util-linux setsid and setpriv) behave the same in the guest: only the
// kernel should differ. Busybox's "sh -c 'exec env X true'" for instance
// runs env in-process, without the exec a process-lineage test expects.
// Names missing on the host are skipped; busybox still provides them.
var DefaultHostTools = []string{
	"sh", "bash", "dash", "env", "true", "false", "sleep", "nohup", "setsid", "timeout",
	"cat", "echo", "printf", "kill", "ls", "id", "mkdir", "rmdir", "rm", "cp", "mv", "ln",
	"chmod", "touch", "head", "tail", "wc", "sort", "uniq", "tr", "cut", "grep", "sed",
	"xargs", "test", "stat", "readlink", "realpath", "basename", "dirname", "pwd", "date",
	"uname", "yes", "seq", "tee", "sync", "ps", "pgrep", "pkill", "setpriv",
}

// libDirs is where shared libraries are looked up, in order (Debian
// multiarch first).
var libDirs = []string{
	"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib",
}

// guestLibPath maps a host library path to the guest: /lib/... is stored
// as /usr/lib/... (the guest's /lib points there, as on Debian 12).
func guestLibPath(p string) string {
	for _, d := range []string{"/lib/", "/lib64/"} {
		if rest, ok := strings.CutPrefix(p, d); ok {
			return "/usr" + d + rest
		}
	}
	return p
}

// libCloser adds ELF files' dynamic loader and shared libraries, once each.
type libCloser struct {
	w    *cpio.Writer
	done map[string]bool // guest paths added
}

func newLibCloser(w *cpio.Writer) *libCloser {
	return &libCloser{w: w, done: map[string]bool{}}
}

// isDynamicELF reports whether path is an ELF file with an interpreter or
// needed libraries.
func isDynamicELF(path string) bool {
	f, err := elf.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return true
		}
	}
	libs, _ := f.ImportedLibraries()
	return len(libs) > 0
}

// add ships what the ELF file at host path needs to run in the guest.
// Non-ELF files and static binaries need nothing.
func (c *libCloser) add(hostPath string) error {
	f, err := elf.Open(hostPath)
	if err != nil {
		return nil // not ELF: scripts, data
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type != elf.PT_INTERP {
			continue
		}
		b := make([]byte, p.Filesz)
		if _, err := p.ReadAt(b, 0); err != nil {
			return fmt.Errorf("%s: reading interpreter: %w", hostPath, err)
		}
		interp := strings.TrimRight(string(b), "\x00")
		if err := c.addFile(interp, guestLibPath(interp)); err != nil {
			return fmt.Errorf("%s: dynamic loader: %w", hostPath, err)
		}
	}
	libs, err := f.ImportedLibraries()
	if err != nil {
		return nil
	}
	var runpath []string
	for _, tag := range []elf.DynTag{elf.DT_RUNPATH, elf.DT_RPATH} {
		if v, err := f.DynString(tag); err == nil {
			for _, s := range v {
				runpath = append(runpath, filepath.SplitList(strings.ReplaceAll(s, "$ORIGIN", filepath.Dir(hostPath)))...)
			}
		}
	}
	for _, lib := range libs {
		found := ""
		for _, d := range append(runpath, libDirs...) {
			p := filepath.Join(d, lib)
			if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
				found = p
				break
			}
		}
		if found == "" {
			return fmt.Errorf("%s needs %s, which is not in %s", hostPath, lib, strings.Join(libDirs, ", "))
		}
		g := guestLibPath(found)
		if c.done[g] {
			continue
		}
		if err := c.addFile(found, g); err != nil {
			return err
		}
		if err := c.add(found); err != nil {
			return err
		}
	}
	return nil
}

func (c *libCloser) addFile(host, guest string) error {
	if c.done[guest] {
		return nil
	}
	c.done[guest] = true
	real, err := filepath.EvalSymlinks(host)
	if err != nil {
		return err
	}
	return c.w.HostFile(real, guest, 0o755)
}

// addHostTools puts the named host commands into /usr/bin, with their
// libraries. Missing optional tools are skipped; missing required ones
// are an error.
func addHostTools(w *cpio.Writer, libs *libCloser, optional, required []string) error {
	add := func(name string, must bool) error {
		if strings.ContainsRune(name, '/') {
			return fmt.Errorf("host tool %q: give a command name, or ship a path with -file", name)
		}
		guest := path.Join("/usr/bin", name)
		if w.Has(guest) {
			return nil
		}
		p, err := exec.LookPath(name)
		if err != nil {
			if must {
				return fmt.Errorf("host tool %s: %w", name, err)
			}
			return nil
		}
		real, err := filepath.EvalSymlinks(p)
		if err != nil {
			return err
		}
		if err := libs.add(real); err != nil {
			if must {
				return fmt.Errorf("host tool %s: %w", name, err)
			}
			return nil
		}
		return w.HostFile(real, guest, 0o755)
	}
	for _, n := range required {
		if err := add(n, true); err != nil {
			return err
		}
	}
	for _, n := range optional {
		if err := add(n, false); err != nil {
			return err
		}
	}
	return nil
}
