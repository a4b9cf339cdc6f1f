package containers

import (
	"errors"
	"fmt"
	"path"
	"path/filepath"
	"strconv"
	"strings"
)

// Reading /proc/PID/cgroup and /proc/self/mountinfo, and deciding which
// cgroup directory is a container's. Pure functions, so that every layout
// (v1, v2, hybrid, systemd scopes) is tested from text; the I/O is in
// cgroup_linux.go.

// cgroupLine is one line of /proc/PID/cgroup:
// "hierarchy-ID:controller-list:cgroup-path".
type cgroupLine struct {
	hierarchy   int      // 0 for the unified (v2) hierarchy
	controllers []string // v1: "pids", "cpu", "cpuacct", "name=systemd", …; v2: none
	path        string   // absolute, in the reader's cgroup namespace
}

func (l cgroupLine) unified() bool { return l.hierarchy == 0 && len(l.controllers) == 0 }

func (l cgroupLine) has(controller string) bool {
	for _, c := range l.controllers {
		if c == controller {
			return true
		}
	}
	return false
}

// parseProcCgroup parses /proc/PID/cgroup. A hierarchy listed twice (a
// cgroup name with a newline in it could fake a line) is an error.
func parseProcCgroup(data string) ([]cgroupLine, error) {
	var out []cgroupLine
	seen := map[int]bool{}
	for _, text := range strings.Split(strings.TrimSuffix(data, "\n"), "\n") {
		if text == "" {
			continue
		}
		f := strings.SplitN(text, ":", 3)
		if len(f) != 3 {
			return nil, fmt.Errorf("cgroup line %q: not hierarchy:controllers:path", truncate(text, 120))
		}
		h, err := strconv.Atoi(f[0])
		if err != nil || h < 0 {
			return nil, fmt.Errorf("cgroup line %q: hierarchy %q", truncate(text, 120), f[0])
		}
		if !strings.HasPrefix(f[2], "/") {
			return nil, fmt.Errorf("cgroup line %q: path is not absolute", truncate(text, 120))
		}
		if seen[h] {
			return nil, fmt.Errorf("cgroup hierarchy %d listed twice", h)
		}
		seen[h] = true
		l := cgroupLine{hierarchy: h, path: f[2]}
		if f[1] != "" {
			l.controllers = strings.Split(f[1], ",")
		}
		out = append(out, l)
	}
	if len(out) == 0 {
		return nil, errors.New("no cgroup lines")
	}
	return out, nil
}

// cgroupMount is a cgroup file system mounted somewhere, from
// /proc/self/mountinfo.
type cgroupMount struct {
	point string   // where it is mounted, e.g. /sys/fs/cgroup/pids
	root  string   // the cgroup path mounted there: "/" unless only a part is
	v2    bool     // cgroup2
	opts  []string // v1: the super options, which name its controllers ("pids", "name=systemd")
}

// parseCgroupMounts returns the cgroup and cgroup2 mounts of a mountinfo
// file.
func parseCgroupMounts(mountinfo string) []cgroupMount {
	var out []cgroupMount
	for _, text := range strings.Split(mountinfo, "\n") {
		f := strings.Fields(text)
		// ID parent major:minor root point options [optional…] - type source super-options
		sep := -1
		for i := 6; i < len(f); i++ {
			if f[i] == "-" {
				sep = i
				break
			}
		}
		if sep < 0 || sep+3 >= len(f) {
			continue
		}
		var m cgroupMount
		switch f[sep+1] {
		case "cgroup2":
			m.v2 = true
		case "cgroup":
			m.opts = strings.Split(f[sep+3], ",")
		default:
			continue
		}
		m.root, m.point = unescapeMount(f[3]), unescapeMount(f[4])
		out = append(out, m)
	}
	return out
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// shows reports whether m is the hierarchy of line l.
func (m cgroupMount) shows(l cgroupLine) bool {
	if m.v2 || l.unified() {
		return m.v2 && l.unified()
	}
	if len(l.controllers) == 0 {
		return false
	}
	for _, c := range l.controllers {
		found := false
		for _, o := range m.opts {
			if o == c {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// dir returns the directory of cgroup path p under m, if m's root holds
// p.
func (m cgroupMount) dir(p string) (string, bool) {
	rel, ok := within(p, m.root)
	if !ok {
		return "", false
	}
	return filepath.Join(m.point, rel), true
}

// within returns p relative to root ("" for root itself) when p is root
// or below it.
func within(p, root string) (string, bool) {
	p, root = path.Clean(p), path.Clean(root)
	if root == "/" {
		return strings.TrimPrefix(p, "/"), true
	}
	if p == root {
		return "", true
	}
	if rest, ok := strings.CutPrefix(p, root+"/"); ok {
		return rest, true
	}
	return "", false
}

// locate finds the mount a directory is in and the cgroup path it is.
func locate(mounts []cgroupMount, dir string) (cgroupMount, string, bool) {
	dir = filepath.Clean(dir)
	var best cgroupMount
	found := false
	for _, m := range mounts {
		if _, ok := within(dir, m.point); ok && (!found || len(m.point) > len(best.point)) {
			best, found = m, true
		}
	}
	if !found {
		return cgroupMount{}, "", false
	}
	rel, _ := within(dir, best.point)
	return best, path.Join(best.root, rel), true
}

// holdsID reports whether the last element of cgroup path p holds the
// container ID id, not as part of a longer hex string: "<id>" (cgroupfs:
// /docker/<id>), "docker-<id>.scope" (systemd), "cri-containerd-<id>.scope".
func holdsID(p, id string) bool {
	if !ValidID(id) {
		return false
	}
	base := path.Base(path.Clean(p))
	for off := 0; ; {
		i := strings.Index(base[off:], id)
		if i < 0 {
			return false
		}
		i += off
		end := i + len(id)
		if (i == 0 || !isHex(base[i-1])) && (end == len(base) || !isHex(base[end])) {
			return true
		}
		off = i + 1
	}
}

// heldID returns the container ID the last element of cgroup path p holds
// (a run of exactly 64 lowercase hex digits), or "".
func heldID(p string) string {
	base := path.Base(path.Clean(p))
	for i := 0; i < len(base); {
		if !isHex(base[i]) {
			i++
			continue
		}
		j := i
		for j < len(base) && isHex(base[j]) {
			j++
		}
		if ValidID(base[i:j]) {
			return base[i:j]
		}
		i = j
	}
	return ""
}

func isHex(c byte) bool { return isLowerHex(c) || 'A' <= c && c <= 'F' }

// cgroupPreference is the order in which CgroupDir looks at a process's
// hierarchies: the unified one (cgroup.kill), then the v1 controllers
// that hold every process of a container.
var cgroupPreference = []struct {
	name  string
	match func(cgroupLine) bool
}{
	{"unified", cgroupLine.unified},
	{"pids", func(l cgroupLine) bool { return l.has("pids") }},
	{"memory", func(l cgroupLine) bool { return l.has("memory") }},
	{"name=systemd", func(l cgroupLine) bool { return l.has("name=systemd") }},
}

// findCgroupDir returns the directory of the cgroup of container id that
// a process with cgroup lines lines is in, under mounts; exists says
// whether a directory is there (the I/O of the caller).
func findCgroupDir(lines []cgroupLine, mounts []cgroupMount, id string, exists func(string) bool) (string, error) {
	if !ValidID(id) {
		return "", fmt.Errorf("%q is not a full container ID (64 lowercase hex digits)", truncate(id, 80))
	}
	var seen []string
	for _, pref := range cgroupPreference {
		for _, l := range lines {
			if !pref.match(l) {
				continue
			}
			seen = append(seen, pref.name+":"+l.path)
			if !holdsID(l.path, id) {
				continue
			}
			for _, m := range mounts {
				if !m.shows(l) {
					continue
				}
				if d, ok := m.dir(l.path); ok && exists(d) {
					return d, nil
				}
			}
		}
	}
	if len(seen) == 0 {
		return "", errors.New("no unified, pids, memory or name=systemd cgroup")
	}
	return "", fmt.Errorf("not in a mounted cgroup of container %s (its cgroups: %s)", short(id), strings.Join(seen, ", "))
}

// inCgroup reports whether a process with cgroup lines lines is in cgroup
// path p of mount m, or below it.
func inCgroup(lines []cgroupLine, m cgroupMount, p string) bool {
	for _, l := range lines {
		if m.shows(l) {
			_, ok := within(l.path, p)
			return ok
		}
	}
	return false
}
