// Package debian reads which Debian mirror the host's apt uses, for the
// tests that fetch from Debian: kernel images (vmtests) and a root to
// install the package in (deploy, vmtests/systemd); Bootstrap makes such a
// root with debootstrap. Nothing else here fetches.
package debian

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// DefaultKeyring is used when the host's apt sources name no Signed-By file.
const DefaultKeyring = "/usr/share/keyrings/debian-archive-keyring.gpg"

// aptSource is one "deb" entry of the host's apt configuration.
type aptSource struct {
	URI      string
	Suites   []string
	SignedBy string
	From     string // file it was read from
}

// Mirror is where Debian packages are fetched from: the Debian archive and
// security archive URLs the host itself uses, and the keyring.
type Mirror struct {
	URI         string // e.g. http://deb.debian.org/debian
	SecurityURI string // e.g. http://deb.debian.org/debian-security ("" if unknown)
	Keyring     string
	Origin      string // human-readable: where these were read from
}

// HostMirror reads the machine's apt sources (/etc/apt/sources.list,
// /etc/apt/sources.list.d/*.list and *.sources) and returns the Debian
// mirror URLs they use. MCPTRACE_VM_MIRROR, MCPTRACE_VM_SECURITY_MIRROR and
// MCPTRACE_VM_KEYRING override what is found.
func HostMirror() (*Mirror, error) {
	return hostMirror("/etc/apt")
}

func hostMirror(etc string) (*Mirror, error) {
	var srcs []aptSource
	if s, err := parseOneLine(filepath.Join(etc, "sources.list")); err == nil {
		srcs = append(srcs, s...)
	}
	lists, _ := filepath.Glob(filepath.Join(etc, "sources.list.d", "*.list"))
	deb822, _ := filepath.Glob(filepath.Join(etc, "sources.list.d", "*.sources"))
	sort.Strings(lists)
	sort.Strings(deb822)
	for _, f := range lists {
		if s, err := parseOneLine(f); err == nil {
			srcs = append(srcs, s...)
		}
	}
	for _, f := range deb822 {
		if s, err := parseDeb822(f); err == nil {
			srcs = append(srcs, s...)
		}
	}

	m := &Mirror{}
	var mainSrc, secSrc *aptSource
	for i := range srcs {
		s := &srcs[i]
		for _, suite := range s.Suites {
			base, kind := debianSuite(suite)
			switch {
			case base == "":
				// Not a Debian suite (e.g. a third-party repository).
			case kind == "security":
				if secSrc == nil {
					secSrc = s
				}
			case mainSrc == nil:
				mainSrc = s
			}
		}
	}
	mainFrom, secFrom := "", ""
	if mainSrc != nil {
		m.URI, m.Keyring, mainFrom = mainSrc.URI, mainSrc.SignedBy, mainSrc.From
	}
	if secSrc != nil {
		m.SecurityURI, secFrom = secSrc.URI, secSrc.From
	} else if strings.HasSuffix(strings.TrimRight(m.URI, "/"), "/debian") {
		// Same host, the archive's well-known sibling path.
		m.SecurityURI, secFrom = strings.TrimRight(m.URI, "/")+"-security", "derived from the archive URL"
	}
	if v := os.Getenv("MCPTRACE_VM_MIRROR"); v != "" {
		m.URI, mainFrom = v, "MCPTRACE_VM_MIRROR"
	}
	if v := os.Getenv("MCPTRACE_VM_SECURITY_MIRROR"); v != "" {
		m.SecurityURI, secFrom = v, "MCPTRACE_VM_SECURITY_MIRROR"
	}
	if v := os.Getenv("MCPTRACE_VM_KEYRING"); v != "" {
		m.Keyring = v
	}
	m.Origin = "archive from " + mainFrom
	if m.SecurityURI != "" {
		m.Origin += ", security archive from " + secFrom
	}
	if m.Keyring == "" || strings.Contains(m.Keyring, "BEGIN PGP") {
		m.Keyring = DefaultKeyring
	}
	if m.URI == "" {
		return nil, fmt.Errorf("no Debian archive found in %s/sources.list{,.d} (set MCPTRACE_VM_MIRROR to a Debian mirror URL)", etc)
	}
	if _, err := os.Stat(m.Keyring); err != nil {
		return nil, fmt.Errorf("Debian archive keyring: %v (install debian-archive-keyring or set MCPTRACE_VM_KEYRING)", err)
	}
	return m, nil
}

var debianCodenames = map[string]bool{
	"buster": true, "bullseye": true, "bookworm": true, "trixie": true, "forky": true, "duke": true,
	"sid": true, "oldoldstable": true, "oldstable": true, "stable": true, "testing": true, "unstable": true,
}

// debianSuite splits a Debian suite name ("bookworm-security",
// "bullseye/updates", "trixie-updates") into its codename and kind
// ("security", "updates", "backports" or ""). base is "" when suite is not
// a Debian suite (third-party repositories use names like "nodistro").
func debianSuite(suite string) (base, kind string) {
	if b, ok := strings.CutSuffix(suite, "/updates"); ok && debianCodenames[b] {
		return b, "security"
	}
	b, k, _ := strings.Cut(suite, "-")
	if !debianCodenames[b] {
		return "", ""
	}
	return b, k
}

func parseOneLine(path string) ([]aptSource, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []aptSource
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		fields := strings.Fields(line)
		if len(fields) < 3 || fields[0] != "deb" {
			continue
		}
		fields = fields[1:]
		s := aptSource{From: path}
		if strings.HasPrefix(fields[0], "[") {
			// Options: [ key=value key=value ].
			var opts []string
			for len(fields) > 0 {
				tok := fields[0]
				fields = fields[1:]
				opts = append(opts, strings.Trim(tok, "[]"))
				if strings.HasSuffix(tok, "]") {
					break
				}
			}
			for _, o := range opts {
				if k, v, ok := strings.Cut(o, "="); ok && strings.EqualFold(k, "signed-by") {
					s.SignedBy = v
				}
			}
		}
		if len(fields) < 2 {
			continue
		}
		s.URI = fields[0]
		s.Suites = []string{fields[1]}
		out = append(out, s)
	}
	return out, sc.Err()
}

func parseDeb822(path string) ([]aptSource, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []aptSource
	for _, para := range strings.Split(strings.ReplaceAll(string(data), "\r\n", "\n"), "\n\n") {
		fields := map[string]string{}
		var last string
		for _, line := range strings.Split(para, "\n") {
			if strings.HasPrefix(line, "#") || strings.TrimSpace(line) == "" {
				continue
			}
			if (line[0] == ' ' || line[0] == '\t') && last != "" {
				fields[last] += "\n" + strings.TrimSpace(line)
				continue
			}
			k, v, ok := strings.Cut(line, ":")
			if !ok {
				continue
			}
			last = strings.ToLower(strings.TrimSpace(k))
			fields[last] = strings.TrimSpace(v)
		}
		if !strings.Contains(" "+fields["types"]+" ", " deb ") {
			continue
		}
		if e := strings.ToLower(fields["enabled"]); e == "no" || e == "false" {
			continue
		}
		suites := strings.Fields(fields["suites"])
		for _, uri := range strings.Fields(fields["uris"]) {
			out = append(out, aptSource{URI: uri, Suites: suites, SignedBy: strings.TrimSpace(fields["signed-by"]), From: path})
		}
	}
	return out, nil
}
