//go:build linux

// Package kernel finds, downloads and caches Debian kernel images for the
// VM test runner.
//
// A kernel is asked for by series ("5.10", "6.1", "6.12", "7", "sid"), by
// Debian codename, or by the path of a vmlinuz. A series is resolved with a
// private apt state (its own sources.list, lists and cache under the cache
// directory, using the same Debian mirror as the host's apt sources) by
// searching the image package names, taking the newest version, and
// extracting vmlinuz (and the kernel config) from the .deb with dpkg-deb.
// Images are cached by exact package name and version; the result of a
// resolution is remembered for a while (24h by default) so that every test
// binary does not run apt-get update.
package kernel

import (
	"github.com/mcptrace/mcptrace/internal/debian"

	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Kernel is a resolved, locally available kernel image.
type Kernel struct {
	Spec       string    `json:"spec"`              // what was asked for: "6.1", "7", a path
	Series     string    `json:"series,omitempty"`  // canonical series name, "" for a path
	Suite      string    `json:"suite,omitempty"`   // Debian suite the package came from
	Package    string    `json:"package,omitempty"` // e.g. linux-image-6.1.0-56-amd64
	Version    string    `json:"version,omitempty"` // Debian package version, e.g. 6.1.192-2
	Release    string    `json:"release"`           // what uname -r prints in the guest
	Banner     string    `json:"banner,omitempty"`  // full version string of the image
	Vmlinuz    string    `json:"vmlinuz"`           // the image as shipped (bzImage)
	Vmlinux    string    `json:"vmlinux,omitempty"` // uncompressed PVH-bootable ELF, if available (boots faster)
	Config     string    `json:"config,omitempty"`  // the kernel's .config, if known
	ResolvedAt time.Time `json:"resolved_at,omitempty"`
}

// String is a one-line description for logs and reports.
func (k *Kernel) String() string {
	if k.Package == "" {
		return fmt.Sprintf("%s (%s)", k.Release, k.Vmlinuz)
	}
	return fmt.Sprintf("%s = %s %s from %s (uname -r %s)", k.Series, k.Package, k.Version, k.Suite, k.Release)
}

// Series describes where the kernels of one series come from.
type Series struct {
	Name     string   // "6.1"
	Suites   []string // suites of the main archive
	Security []string // suites of the security archive
	Prefix   string   // the image's upstream version must start with this ("6.1.")
}

// SeriesTable lists the known series. To add a kernel, add a line here
// (and, if it should run by default, to the KERNELS default of vmmatrix).
var SeriesTable = []Series{
	{Name: "5.10", Suites: []string{"bullseye"}, Security: []string{"bullseye-security"}, Prefix: "5.10."},
	{Name: "6.1", Suites: []string{"bookworm"}, Security: []string{"bookworm-security"}, Prefix: "6.1."},
	{Name: "6.12", Suites: []string{"trixie"}, Security: []string{"trixie-security"}, Prefix: "6.12."},
	{Name: "7", Suites: []string{"sid"}, Prefix: "7."},
	{Name: "sid", Suites: []string{"sid"}, Prefix: ""},
}

var seriesAliases = map[string]string{
	"bullseye": "5.10", "debian11": "5.10",
	"bookworm": "6.1", "debian12": "6.1",
	"trixie": "6.12", "debian13": "6.12",
	"unstable": "sid", "7.x": "7",
}

// LookupSeries returns the series for a name or alias.
func LookupSeries(name string) (Series, bool) {
	if a, ok := seriesAliases[name]; ok {
		name = a
	}
	for _, s := range SeriesTable {
		if s.Name == name {
			return s, true
		}
	}
	return Series{}, false
}

// SeriesNames lists the accepted series names, for messages.
func SeriesNames() string {
	var n []string
	for _, s := range SeriesTable {
		n = append(n, s.Name)
	}
	return strings.Join(n, ", ")
}

// DefaultCacheDir is $MCPTRACE_VM_CACHE, else
// ${XDG_CACHE_HOME:-$HOME/.cache}/mcptrace/vmtests.
func DefaultCacheDir() string {
	if d := os.Getenv("MCPTRACE_VM_CACHE"); d != "" {
		return d
	}
	base := os.Getenv("XDG_CACHE_HOME")
	if base == "" {
		home, err := os.UserHomeDir()
		if err != nil || home == "" {
			home = os.TempDir()
		}
		base = filepath.Join(home, ".cache")
	}
	return filepath.Join(base, "mcptrace", "vmtests")
}

// Resolver resolves kernel specs. The zero value is not usable: set CacheDir.
type Resolver struct {
	CacheDir string
	Log      io.Writer      // progress messages; nil discards
	Refresh  bool           // ignore a remembered resolution and ask apt again
	TTL      time.Duration  // how long a resolution is remembered; 0 means 24h
	Mirror   *debian.Mirror // nil: read from the host's apt sources
}

func (r *Resolver) logf(format string, args ...any) {
	if r.Log != nil {
		fmt.Fprintf(r.Log, "vmexec: "+format+"\n", args...)
	}
}

// Resolve turns a spec (series, codename or vmlinuz path) into a local image.
func (r *Resolver) Resolve(ctx context.Context, spec string) (*Kernel, error) {
	if spec == "" {
		return nil, errors.New("empty kernel spec")
	}
	if strings.ContainsRune(spec, '/') || fileExists(spec) {
		k, err := imageKernel(spec)
		if err == nil && k.Package != "" {
			r.ensureVmlinux(k) // one of ours: its directory is in the cache
		}
		return k, err
	}
	ser, ok := LookupSeries(spec)
	if !ok {
		return nil, fmt.Errorf("unknown kernel %q: want one of %s, a Debian codename, or the path of a vmlinuz", spec, SeriesNames())
	}
	if err := os.MkdirAll(r.CacheDir, 0o755); err != nil {
		return nil, err
	}
	unlock, err := r.lock(ctx, "series-"+ser.Suites[0])
	if err != nil {
		return nil, err
	}
	defer unlock()

	ttl := r.TTL
	if ttl == 0 {
		ttl = 24 * time.Hour
		if v := os.Getenv("MCPTRACE_VM_RESOLVE_TTL"); v != "" {
			if d, err := time.ParseDuration(v); err == nil {
				ttl = d
			}
		}
	}
	memo := filepath.Join(r.CacheDir, "resolved", ser.Name+".json")
	cached, _ := readKernelJSON(memo)
	if cached != nil && !r.Refresh && time.Since(cached.ResolvedAt) < ttl && fileExists(cached.Vmlinuz) {
		cached.Spec = spec
		r.ensureVmlinux(cached)
		return cached, nil
	}

	k, err := r.resolveSeries(ctx, ser)
	if err != nil {
		if cached != nil && fileExists(cached.Vmlinuz) && ctx.Err() == nil {
			r.logf("WARNING: %v", err)
			r.logf("WARNING: using the kernel resolved on %s: %s", cached.ResolvedAt.Format(time.RFC3339), cached)
			cached.Spec = spec
			return cached, nil
		}
		return nil, err
	}
	k.Spec = spec
	k.ResolvedAt = time.Now().UTC()
	if err := writeJSON(memo, k); err != nil {
		return nil, err
	}
	return k, nil
}

func imageKernel(path string) (*Kernel, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	if !fileExists(abs) {
		return nil, fmt.Errorf("kernel image %s does not exist", abs)
	}
	rel, banner, err := ImageVersion(abs)
	if err != nil {
		return nil, err
	}
	k := &Kernel{Spec: path, Release: rel, Banner: banner, Vmlinuz: abs}
	if isELF(abs) {
		// An uncompressed vmlinux: QEMU boots it through its PVH entry.
		k.Vmlinux = abs
	}
	// A vmlinuz from our own cache has its metadata next to it.
	if meta, _ := readKernelJSON(filepath.Join(filepath.Dir(abs), "kernel.json")); meta != nil && meta.Vmlinuz == abs {
		meta.Spec = path
		return meta, nil
	}
	for _, c := range []string{filepath.Join(filepath.Dir(abs), "config-"+rel), filepath.Join(filepath.Dir(abs), "config")} {
		if fileExists(c) {
			k.Config = c
			break
		}
	}
	return k, nil
}

// lock takes an exclusive flock on a file in the cache, so that concurrent
// vmexec processes (go test runs packages in parallel) do not run apt or
// download the same image at the same time.
func (r *Resolver) lock(ctx context.Context, name string) (func(), error) {
	dir := filepath.Join(r.CacheDir, "locks")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(dir, name+".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		r.logf("waiting for another vmexec to finish with %s", f.Name())
		done := make(chan error, 1)
		go func() { done <- syscall.Flock(int(f.Fd()), syscall.LOCK_EX) }()
		select {
		case err = <-done:
		case <-ctx.Done():
			f.Close() // the goroutine's flock fails or the lock is dropped with the fd
			return nil, ctx.Err()
		}
		if err != nil {
			f.Close()
			return nil, err
		}
	}
	return func() { f.Close() }, nil
}

// apt runs apt-get/apt-cache against a private state directory.
type apt struct {
	dir    string
	suites []suiteSource
}

type suiteSource struct {
	URI, Suite, Keyring string
}

func (a *apt) opts() []string {
	o := []string{
		"-o", "Dir::Etc::sourcelist=" + filepath.Join(a.dir, "sources.list"),
		"-o", "Dir::Etc::sourceparts=-",
		"-o", "Dir::State::Lists=" + filepath.Join(a.dir, "lists"),
		"-o", "Dir::Cache=" + filepath.Join(a.dir, "cache"),
		"-o", "APT::Architecture=amd64",
		"-o", "APT::Architectures=amd64",
		"-o", "Acquire::Languages=none",
		"-o", "Acquire::IndexTargets::deb::DEP-11::DefaultEnabled=false",
		"-o", "Acquire::IndexTargets::deb::DEP-11-icons::DefaultEnabled=false",
		"-o", "Acquire::IndexTargets::deb::Contents-deb::DefaultEnabled=false",
	}
	if os.Geteuid() == 0 {
		// Downloads go to our private directories, which the _apt sandbox
		// user cannot write to.
		o = append(o, "-o", "APT::Sandbox::User=root")
	}
	return o
}

func (a *apt) setup() error {
	for _, d := range []string{"lists/partial", "cache/archives/partial"} {
		if err := os.MkdirAll(filepath.Join(a.dir, d), 0o755); err != nil {
			return err
		}
	}
	var b strings.Builder
	for _, s := range a.suites {
		fmt.Fprintf(&b, "deb [signed-by=%s] %s %s main\n", s.Keyring, s.URI, s.Suite)
	}
	return os.WriteFile(filepath.Join(a.dir, "sources.list"), []byte(b.String()), 0o644)
}

func (a *apt) run(ctx context.Context, dir, tool string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, tool, append(a.opts(), args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "LC_ALL=C", "DEBIAN_FRONTEND=noninteractive")
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	err := cmd.Run()
	if err != nil {
		return out.Bytes(), fmt.Errorf("%s %s: %v\n%s", tool, strings.Join(args, " "), err, tail(out.String(), 15))
	}
	return out.Bytes(), nil
}

func (a *apt) update(ctx context.Context) error {
	out, err := a.run(ctx, a.dir, "apt-get", "-q", "update")
	// apt-get update may exit 0 and keep old lists when a source fails:
	// look at its Err: lines, and name the suites that failed.
	var errLines []string
	failed := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "Err:") || strings.HasPrefix(line, "E:") || strings.HasPrefix(line, "W: Failed to fetch") || strings.HasPrefix(line, "W: GPG error") || strings.HasPrefix(line, "  ") && len(errLines) > 0 {
			errLines = append(errLines, line)
		}
		for _, s := range a.suites {
			if (strings.HasPrefix(line, "Err:") || strings.HasPrefix(line, "W: GPG error") || strings.HasPrefix(line, "E:")) &&
				strings.Contains(line, s.URI) && strings.Contains(line, " "+s.Suite+" ") {
				failed[s.Suite+" ("+s.URI+")"] = true
			}
		}
	}
	if err == nil && len(failed) == 0 && !bytes.Contains(out, []byte("\nE: ")) {
		return nil
	}
	var names []string
	for n := range failed {
		names = append(names, n)
	}
	sort.Strings(names)
	if len(names) == 0 {
		for _, s := range a.suites {
			names = append(names, s.Suite+" ("+s.URI+")")
		}
	}
	msg := tail(strings.Join(errLines, "\n"), 20)
	if msg == "" {
		msg = tail(string(out), 20)
	}
	return fmt.Errorf("apt-get update could not fetch the package lists of suite %s from the Debian mirror:\n%s",
		strings.Join(names, ", "), msg)
}

type candidate struct {
	Package, Version, URI, Suite string
}

// imageNameRE matches the Debian kernel image package names of all
// releases: linux-image-5.10.0-46-amd64, linux-image-6.1.0-0.deb11.52-amd64
// (a backport), linux-image-6.12.117+deb13-amd64, linux-image-7.2.13+deb14-amd64,
// each optionally with -unsigned; not -cloud-, -rt-, -dbg, meta-packages.
var imageNameRE = regexp.MustCompile(`^linux-image-([0-9]+\.[0-9]+\.[0-9]+)(-[0-9]+|-0\.deb[0-9]+\.[0-9]+|\+deb[0-9]+(\.[0-9]+)?)-amd64(-unsigned)?$`)

const imageNameERE = `^linux-image-[0-9]+\.[0-9]+\.[0-9]+(-[0-9]+|-0\.deb[0-9]+\.[0-9]+|\+deb[0-9]+(\.[0-9]+)?)-amd64(-unsigned)?$`

func (r *Resolver) resolveSeries(ctx context.Context, ser Series) (*Kernel, error) {
	m := r.Mirror
	if m == nil {
		var err error
		if m, err = debian.HostMirror(); err != nil {
			return nil, err
		}
	}
	a := &apt{dir: filepath.Join(r.CacheDir, "apt", ser.Suites[0])}
	for _, s := range ser.Suites {
		a.suites = append(a.suites, suiteSource{m.URI, s, m.Keyring})
	}
	if len(ser.Security) > 0 {
		if m.SecurityURI == "" {
			r.logf("WARNING: no Debian security mirror known; %s kernels from %s only", ser.Name, strings.Join(ser.Suites, ", "))
		} else {
			for _, s := range ser.Security {
				a.suites = append(a.suites, suiteSource{m.SecurityURI, s, m.Keyring})
			}
		}
	}
	var suiteNames, from []string
	for _, s := range a.suites {
		suiteNames = append(suiteNames, s.Suite)
		from = append(from, s.Suite+" from "+s.URI)
	}
	if err := a.setup(); err != nil {
		return nil, err
	}
	r.logf("kernel %s: updating package lists: %s (%s)", ser.Name, strings.Join(from, ", "), m.Origin)
	if err := a.update(ctx); err != nil {
		return nil, fmt.Errorf("kernel %s: %w", ser.Name, err)
	}

	out, err := a.run(ctx, a.dir, "apt-cache", "search", "--names-only", imageNameERE)
	if err != nil {
		return nil, err
	}
	var names []string
	var seen []string
	for _, line := range strings.Split(string(out), "\n") {
		name, _, _ := strings.Cut(line, " ")
		sm := imageNameRE.FindStringSubmatch(name)
		if sm == nil {
			continue
		}
		seen = append(seen, name)
		if strings.HasPrefix(sm[1], ser.Prefix) {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		sort.Strings(seen)
		return nil, fmt.Errorf("kernel %s: no image package with version %s* in %s (found: %s)",
			ser.Name, ser.Prefix, strings.Join(suiteNames, ", "), strings.Join(seen, " "))
	}
	out, err = a.run(ctx, a.dir, "apt-cache", append([]string{"madison"}, names...)...)
	if err != nil {
		return nil, err
	}
	cands := parseMadison(string(out))
	if len(cands) == 0 {
		return nil, fmt.Errorf("kernel %s: apt-cache madison gave no versions for %s", ser.Name, strings.Join(names, " "))
	}
	best := cands[0]
	for _, c := range cands[1:] {
		cmp := CompareVersions(c.Version, best.Version)
		// Newest version wins; for equal versions prefer the signed image,
		// the one Debian machines boot (the kernels are the same).
		if cmp > 0 || cmp == 0 && strings.HasSuffix(best.Package, "-unsigned") && !strings.HasSuffix(c.Package, "-unsigned") {
			best = c
		}
	}

	final := filepath.Join(r.CacheDir, "kernels", best.Package+"_"+best.Version)
	if k, _ := readKernelJSON(filepath.Join(final, "kernel.json")); k != nil && fileExists(k.Vmlinuz) {
		k.Series = ser.Name
		r.ensureVmlinux(k)
		return k, nil
	}
	k, err := r.download(ctx, a, best, final)
	if err != nil {
		return nil, fmt.Errorf("kernel %s: %w", ser.Name, err)
	}
	k.Series = ser.Name
	return k, nil
}

func parseMadison(out string) []candidate {
	var cands []candidate
	for _, line := range strings.Split(out, "\n") {
		parts := strings.Split(line, "|")
		if len(parts) != 3 {
			continue
		}
		c := candidate{Package: strings.TrimSpace(parts[0]), Version: strings.TrimSpace(parts[1])}
		src := strings.Fields(parts[2])
		if len(src) >= 2 {
			c.URI = src[0]
			c.Suite, _, _ = strings.Cut(src[1], "/main")
		}
		if strings.HasSuffix(c.Suite, "/updates") { // old security layout
			c.Suite = strings.TrimSuffix(c.Suite, "/updates")
		}
		cands = append(cands, c)
	}
	return cands
}

// pkgInfo reads Size and Depends of one package version.
func (a *apt) pkgInfo(ctx context.Context, name, version string) (size int64, depends []string) {
	out, err := a.run(ctx, a.dir, "apt-cache", "show", name+"="+version)
	if err != nil {
		return 0, nil
	}
	// Only the first stanza: the same version may be listed by several suites.
	stanza, _, _ := strings.Cut(string(out), "\n\n")
	for _, line := range strings.Split(stanza, "\n") {
		if v, ok := strings.CutPrefix(line, "Size: "); ok {
			size, _ = strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		}
		if v, ok := strings.CutPrefix(line, "Depends: "); ok {
			for _, d := range strings.Split(v, ",") {
				depends = append(depends, strings.TrimSpace(d))
			}
		}
	}
	return size, depends
}

// splitPackageRE matches the parts that newer Debian kernels (sid, 2026)
// split out of linux-image-REL, which became a small package depending on
// linux-binary-REL (vmlinuz) and linux-base-REL (config, System.map), and
// on linux-modules-REL, which we do not need.
var splitPackageRE = regexp.MustCompile(`^(linux-(?:binary|base)-[0-9][^ ]*)(?: \(= ([^)]+)\))?$`)

func (r *Resolver) download(ctx context.Context, a *apt, c candidate, final string) (*Kernel, error) {
	type pkg struct {
		name, version string
		size          int64
	}
	size, deps := a.pkgInfo(ctx, c.Package, c.Version)
	pkgs := []pkg{{c.Package, c.Version, size}}
	for _, d := range deps {
		m := splitPackageRE.FindStringSubmatch(d)
		if m == nil {
			continue
		}
		v := m[2]
		if v == "" {
			v = c.Version
		}
		sz, _ := a.pkgInfo(ctx, m[1], v)
		pkgs = append(pkgs, pkg{m[1], v, sz})
	}
	var total int64
	var refs, names []string
	for _, p := range pkgs {
		total += p.size
		refs = append(refs, p.name+"="+p.version)
		names = append(names, p.name)
	}

	if err := os.MkdirAll(filepath.Dir(final), 0o755); err != nil {
		return nil, err
	}
	stage, err := os.MkdirTemp(filepath.Dir(final), ".download-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(stage)

	r.logf("downloading %s %s from %s (%.1f MB) into %s", strings.Join(names, " + "), c.Version, c.Suite, float64(total)/1e6, filepath.Dir(final))
	start := time.Now()
	stop := make(chan struct{})
	go func() {
		t := time.NewTicker(3 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				var got int64
				ents, _ := os.ReadDir(stage)
				for _, e := range ents {
					if fi, err := e.Info(); err == nil {
						got += fi.Size()
					}
				}
				r.logf("  ... %.1f / %.1f MB (%s)", float64(got)/1e6, float64(total)/1e6, time.Since(start).Round(time.Second))
			}
		}
	}()
	_, err = a.run(ctx, stage, "apt-get", append([]string{"-q", "download"}, refs...)...)
	close(stop)
	if err != nil {
		return nil, fmt.Errorf("downloading %s from %s (%s): %w", strings.Join(refs, " "), c.Suite, c.URI, err)
	}
	debs, _ := filepath.Glob(filepath.Join(stage, "*.deb"))
	if len(debs) != len(refs) {
		return nil, fmt.Errorf("apt-get download %s left %d .deb files, want %d", strings.Join(refs, " "), len(debs), len(refs))
	}
	r.logf("downloaded in %s; extracting vmlinuz", time.Since(start).Round(100*time.Millisecond))

	out := filepath.Join(stage, "out")
	if err := os.Mkdir(out, 0o755); err != nil {
		return nil, err
	}
	var vmlinuz, config string
	for _, deb := range debs {
		v, cf, err := extractImage(ctx, deb, out)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", filepath.Base(deb), err)
		}
		if v != "" {
			vmlinuz = v
		}
		if cf != "" {
			config = cf
		}
	}
	if vmlinuz == "" {
		return nil, fmt.Errorf("no vmlinuz found in %s", strings.Join(refs, " "))
	}
	rel, banner, err := ImageVersion(vmlinuz)
	if err != nil {
		return nil, err
	}
	k := &Kernel{
		Suite: c.Suite, Package: c.Package, Version: c.Version,
		Release: rel, Banner: banner,
		Vmlinuz: filepath.Join(final, "vmlinuz"),
	}
	if config != "" {
		k.Config = filepath.Join(final, "config")
	}
	if err := ExtractVmlinux(vmlinuz, filepath.Join(out, "vmlinux")); err != nil {
		r.logf("note: cannot extract an uncompressed vmlinux (%v); booting the bzImage, which is slower", err)
	} else {
		k.Vmlinux = filepath.Join(final, "vmlinux")
	}
	if err := writeJSON(filepath.Join(out, "kernel.json"), k); err != nil {
		return nil, err
	}
	os.RemoveAll(final) // an incomplete earlier attempt
	if err := os.Rename(out, final); err != nil {
		return nil, err
	}
	r.logf("kernel ready: %s %s (uname -r %s)", c.Package, c.Version, rel)
	return k, nil
}

// extractImage pulls vmlinuz and the kernel config out of a linux-image .deb.
// Older packages ship boot/vmlinuz-REL and boot/config-REL; newer ones (sid)
// ship usr/lib/modules/REL/vmlinuz and .../config, with or without links
// in boot/.
func extractImage(ctx context.Context, deb, dir string) (vmlinuz, config string, err error) {
	cmd := exec.CommandContext(ctx, "dpkg-deb", "--fsys-tarfile", deb)
	pipe, err := cmd.StdoutPipe()
	if err != nil {
		return "", "", err
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return "", "", fmt.Errorf("dpkg-deb: %w (is dpkg installed?)", err)
	}
	tr := tar.NewReader(pipe)
	for {
		h, terr := tr.Next()
		if terr == io.EOF {
			break
		}
		if terr != nil {
			err = terr
			break
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		name := strings.TrimPrefix(h.Name, "./")
		var dst string
		switch {
		case strings.HasPrefix(name, "boot/vmlinuz-"),
			(strings.HasPrefix(name, "usr/lib/modules/") || strings.HasPrefix(name, "lib/modules/")) && strings.HasSuffix(name, "/vmlinuz") && strings.Count(name, "/") <= 4:
			dst = "vmlinuz"
		case strings.HasPrefix(name, "boot/config-"),
			(strings.HasPrefix(name, "usr/lib/modules/") || strings.HasPrefix(name, "lib/modules/")) && strings.HasSuffix(name, "/config") && strings.Count(name, "/") <= 4:
			dst = "config"
		default:
			continue
		}
		if err = writeFile(filepath.Join(dir, dst), tr, 0o644); err != nil {
			break
		}
		if dst == "vmlinuz" {
			vmlinuz = filepath.Join(dir, dst)
		} else {
			config = filepath.Join(dir, dst)
		}
	}
	if err != nil {
		cmd.Process.Kill()
	} else {
		io.Copy(io.Discard, pipe)
	}
	if werr := cmd.Wait(); werr != nil && err == nil {
		err = fmt.Errorf("dpkg-deb --fsys-tarfile: %v: %s", werr, strings.TrimSpace(stderr.String()))
	}
	if err != nil {
		return "", "", err
	}
	return vmlinuz, config, nil
}

func writeFile(path string, r io.Reader, perm os.FileMode) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, perm)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, r); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// ensureVmlinux adds the uncompressed image to a cached kernel that was
// downloaded without it. Failure only means slower boots.
func (r *Resolver) ensureVmlinux(k *Kernel) {
	if k.Vmlinux != "" && fileExists(k.Vmlinux) {
		return
	}
	k.Vmlinux = ""
	dir := filepath.Dir(k.Vmlinuz)
	meta := filepath.Join(dir, "kernel.json")
	if !fileExists(meta) {
		return
	}
	dst := filepath.Join(dir, "vmlinux")
	if !fileExists(dst) {
		if err := ExtractVmlinux(k.Vmlinuz, dst); err != nil {
			// Said once, when the kernel was downloaded; here it would be
			// repeated into every test package's output.
			return
		}
	}
	k.Vmlinux = dst
	if m, err := readKernelJSON(meta); err == nil {
		m.Vmlinux = dst
		writeJSON(meta, m)
	}
}

func isELF(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	b := make([]byte, 4)
	_, err = io.ReadFull(f, b)
	return err == nil && string(b) == "\x7fELF"
}

func readKernelJSON(path string) (*Kernel, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var k Kernel
	if err := json.Unmarshal(data, &k); err != nil {
		return nil, err
	}
	return &k, nil
}

func writeJSON(path string, v any) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(data, '\n'), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func fileExists(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular()
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
