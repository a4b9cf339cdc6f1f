package roles

import (
	"hash/fnv"
	"strings"

	"github.com/mcptrace/mcptrace/lineage"
	"github.com/mcptrace/mcptrace/redact"
)

// maxName bounds the length in bytes of every name the package returns.
const maxName = 128

// Identity returns the server identity an image names, and whether the
// image is a wrapper (a program that only starts another: npx, npm exec,
// bunx, pnpm dlx, yarn dlx, uvx, uv run, uv tool run, pipx run,
// sh/bash/dash -c, cmd /c, env, node/python running a known wrapper's bin
// shim such as npx-cli.js or npm-cli.js, `docker run` / `podman run`
// clients, `mcptrace run|exec ... --`). name is "" when the image names no
// identity of its own: a plain program ("node server.js",
// "mcp-server-filesystem /tmp") names none, Name gives one for it.
//
// The program is argv[0]'s basename (the filename's when argv is empty),
// or for `node X`, `env node X` and `python X` the script's. Wrappers are
// followed into the command they run (env → sh -c → npx …) at most four
// programs deep. The last argv element of a truncated argv names nothing.
func Identity(im lineage.Image) (name string, wrapper bool) {
	p := parseImage(im)
	return p.id.safe(), p.wrapper
}

// Name returns the identity to show for a server process whose own
// images name none: the npm package when the script (or binary) path is
// under node_modules/(@scope/)pkg, the python module of `python -m mod`,
// else the script's or binary's basename without .js/.mjs/.cjs/.py/.exe.
// It reads the newest image the process executed itself (an inherited
// one only when there is no other), and falls back to the comm.
func Name(p lineage.Process) string {
	im, ok := ownImage(&p)
	if !ok && len(p.Images) > 0 {
		im, ok = p.Current(), true
	}
	if ok {
		if n := parseImage(im).base.safe(); n != "" {
			return n
		}
	}
	return cand{s: p.Comm, i: -1}.safe()
}

// ownImage returns the newest image p executed itself (not inherited
// from its creator).
func ownImage(p *lineage.Process) (lineage.Image, bool) {
	for k := len(p.Images) - 1; k >= 0; k-- {
		if p.Images[k].Source != lineage.SourceInherited {
			return p.Images[k], true
		}
	}
	return lineage.Image{}, false
}

// level is one argv a name may come from: an image's, or the words of a
// script in it (sh -c, cmd /c, env -S). up is the level the script is an
// element of.
type level struct {
	argv []string
	// truncated: the last element may have been cut short.
	truncated bool
	up        *level
	red       []string // redact.Argv(argv), on first use
}

func (lv *level) redacted() []string {
	if lv.red == nil {
		lv.red = redact.Argv(lv.argv)
		if lv.red == nil {
			lv.red = []string{}
		}
	}
	return lv.red
}

// cand is a candidate name, not yet made safe: s was taken from element i
// of lv's argv (i is -1 when it comes from no argv: a comm). s is "" when
// the element is where the name would be but fits no grammar: it names
// nothing, or redact.Marker when redact hides the element.
type cand struct {
	s  string
	lv *level
	i  int
}

// set reports whether c is a candidate at all: a name, or an element in
// a name's place that names none.
func (c cand) set() bool { return c.s != "" || c.lv != nil }

// safe returns the name to show for c: "" for none; redact.Marker when
// redact would hide the name, hides the element where a name that fits no
// grammar would be, hides the argv element it came from, or
// hides an element of its argv (or of the argv its script is in) that the
// name contains; else the name in the package's charset, cut to maxName.
func (c cand) safe() string {
	if c.lv != nil && c.lv.truncated && c.i == len(c.lv.argv)-1 {
		return "" // may be cut short: a partial name, or a partial secret
	}
	if c.s == "" {
		if c.lv != nil && c.i >= 0 && c.i < len(c.lv.argv) && c.lv.argv[c.i] != "" &&
			c.lv.redacted()[c.i] != c.lv.argv[c.i] {
			return redact.Marker // no name, but a hidden element in its place
		}
		return ""
	}
	s := sanitize(c.s)
	if s == "" {
		return ""
	}
	for lv := c.lv; lv != nil; lv = lv.up {
		red := lv.redacted()
		for k, a := range lv.argv {
			if a == "" || red[k] == a {
				continue
			}
			if (lv == c.lv && k == c.i) || strings.Contains(c.s, a) || strings.Contains(s, a) {
				return redact.Marker
			}
		}
	}
	if redactOne(c.s) != c.s || redactOne(s) != s {
		return redact.Marker
	}
	return s
}

func redactOne(s string) string { return redact.Argv([]string{s})[0] }

// sanitize returns s cut to maxName bytes with every byte outside
// [A-Za-z0-9@/._:+-_] replaced by '_', or "" when no letter or digit is
// left (".", "/", "___").
func sanitize(s string) string {
	if len(s) > maxName {
		s = s[:maxName]
	}
	alnum := false
	clean := true
	for i := 0; i < len(s); i++ {
		b := s[i]
		if isAlnum(b) {
			alnum = true
		} else if !nameByte(b) {
			clean = false
		}
	}
	if !alnum {
		return ""
	}
	if clean {
		return s
	}
	out := []byte(s)
	for i, b := range out {
		if !nameByte(b) {
			out[i] = '_'
		}
	}
	return string(out)
}

func isAlnum(b byte) bool {
	return 'a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' || '0' <= b && b <= '9'
}

// nameByte reports whether b may appear in a name.
func nameByte(b byte) bool {
	if isAlnum(b) {
		return true
	}
	switch b {
	case '@', '/', '.', '_', ':', '+', '-':
		return true
	}
	return false
}

// ImageName is the server name of a container running image ref (as the
// engine reports it): the reference without its tag and digest, as a
// `docker run` wrapper's server is named; "" when ref is no image
// reference.
func ImageName(ref string) string { return imageName(ref) }

// Packaged reports whether what a process runs proves which program it
// is beyond its basename: its own newest image names an identity
// (Identity: a package, a module, an image a wrapper names), or the
// script or binary it runs lies inside an npm package
// (node_modules/pkg/…). A leak detector lists such a process as an MCP
// server; a process known only by its basename ("index", "server") is
// never listed by name alone.
func Packaged(p lineage.Process) bool {
	im, ok := ownImage(&p)
	if !ok {
		if len(p.Images) == 0 {
			return false
		}
		im = p.Current()
	}
	pr := parseImage(im)
	if n := pr.id.safe(); n != "" && n != redact.Marker {
		return true
	}
	c := pr.base
	return c.lv != nil && c.i >= 0 && c.i < len(c.lv.argv) && nodeModule(c.lv.argv[c.i]) != ""
}

// CommandKey hashes what p runs now, its file and argv: two instances of
// a server are the same server started again only when their keys are
// equal, never because their names are.
func CommandKey(p lineage.Process) uint64 {
	h := fnv.New64a()
	im := p.Current()
	h.Write([]byte(im.Filename))
	for _, a := range im.Argv {
		h.Write([]byte{0})
		h.Write([]byte(a))
	}
	return h.Sum64()
}
