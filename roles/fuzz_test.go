package roles

import (
	"regexp"
	"strings"
	"testing"

	"github.com/mcptrace/mcptrace/lineage"
	"github.com/mcptrace/mcptrace/redact"
)

// checkName fails unless name is "", redact.Marker, or at most maxName
// bytes of the name charset with a letter or digit.
func checkName(t *testing.T, what, name string) {
	t.Helper()
	if name == "" || name == redact.Marker {
		return
	}
	if len(name) > maxName {
		t.Fatalf("%s: name %q is %d bytes", what, name, len(name))
	}
	alnum := false
	for i := 0; i < len(name); i++ {
		if !nameByte(name[i]) {
			t.Fatalf("%s: name %q has byte %q", what, name, name[i])
		}
		alnum = alnum || isAlnum(name[i])
	}
	if !alnum {
		t.Fatalf("%s: name %q has no letter or digit", what, name)
	}
}

// checkNotSecret fails when name contains an element of argv that redact
// hides.
func argv0(argv []string) string {
	if len(argv) == 0 {
		return ""
	}
	return argv[0]
}

func checkNotSecret(t *testing.T, what, name string, argv []string) {
	t.Helper()
	if name == "" || name == redact.Marker {
		return
	}
	red := redact.Argv(argv)
	// A program's own name (argv[0]'s basename, as the parser reads it,
	// when argv[0] is not hidden) is not taken from a secret, even if a
	// short hidden value happens to be part of it ("x" in "npx").
	if own := strings.ToLower(binName(argv0(argv))); own != "" && red[0] == argv[0] &&
		(strings.ToLower(name) == own || strings.HasPrefix(strings.ToLower(name), own+" ")) {
		return
	}
	for k, a := range argv {
		if a != "" && red[k] != a && strings.Contains(name, a) {
			t.Fatalf("%s: name %q contains %q, which redact hides in %q", what, name, a, argv)
		}
	}
	if r := redact.Argv([]string{name})[0]; r != name {
		t.Fatalf("%s: redact hides name %q as %q", what, name, r)
	}
}

// imagePathRe is an image reference without its tag and digest.
var imagePathRe = regexp.MustCompile(`^([a-z0-9.-]+(:[0-9]+)?/)?[a-z0-9]+([._-]+[a-z0-9]+)*(/[a-z0-9]+([._-]+[a-z0-9]+)*)*$`)

// fromGrammar reports whether name is one a known grammar gives: an npm
// package, a repository or file name (GitHub shorthand, URL, path), a
// Python distribution or module, an image path, a compose service.
func fromGrammar(name string) bool {
	return isNpmName(name) || isRepoName(name) || isPyName(name) || isPyModule(name) ||
		imagePathRe.MatchString(name) ||
		strings.HasPrefix(name, "compose:") && serviceRe.MatchString(name[len("compose:"):])
}

// isFallback reports whether name can be the basename fallback: a
// script's or binary's basename (no /), or the @scope/pkg of a
// node_modules path.
func isFallback(name string) bool {
	return !strings.Contains(name, "/") ||
		strings.HasPrefix(name, "@") && strings.Count(name, "/") == 1
}

// checkGrammar fails unless name is "", redact.Marker, from a known
// grammar, or the basename fallback; an identity is the fallback only
// through uv run, whose command names none.
func checkGrammar(t *testing.T, what, name string, argv []string, identity bool) {
	t.Helper()
	if name == "" || name == redact.Marker || fromGrammar(name) {
		return
	}
	if !isFallback(name) {
		t.Fatalf("%s: name %q of %q is from no grammar and no basename", what, name, argv)
	}
	if identity && !strings.Contains(strings.Join(argv, " "), "run") {
		t.Fatalf("%s: identity %q of %q is a basename, with no uv run", what, name, argv)
	}
}

var fuzzArgvs = [][]string{
	{"npx", "-y", "@modelcontextprotocol/server-filesystem", "/tmp"},
	{"/usr/bin/env", "node", "/usr/bin/npx", "--no-install", "pkg@1", "/tmp/d"},
	{"sh", "-c", "cd /x && GITHUB_TOKEN=" + ghToken + " npx -y 'pkg' --token s3cr3t"},
	{"npx", "--token", "s3cr3tvalue", "pkg"},
	{"uvx", "--from", "git+https://user:pw@h/x/repo.git@v1", "repo"},
	{"uv", "run", "--with", "mcp", "server.py"},
	{"python3", "-um", "mcp_server_time"},
	{"docker", "run", "-itv", "/a:/b", "-e", "API_KEY=x", "host:5000/img:tag@sha256:00"},
	{"docker", "compose", "-f", "c.yml", "run", "--rm", "svc"},
	{"env", "-S", "A=1 npx -y", "pkg"},
	{"cmd.exe", "/c", "\"npx -y pkg\""},
	{"mcptrace", "exec", "--session", "s", "--", "pipx", "run", "--spec", "a==1", "b"},
	{"node", "/n/node_modules/@s/p/cli.js"},
	{"pnpm", "--package=x", "dlx", "y"},
	{"npx", "-y", ghToken},
	{"npx", "--otp", "123456", "pkg"},
	{"podman", "run", "--rm", "-i", "--no-hostname", "ghcr.io/x/y", "S3cr3tValue"},
	{"npx", "user:S3cr3tValue@github.com"},
	{"npx", "git+https://user:tok@host/org/repo.git"},
	{"uv", "run", "--frob", "x", "-m", "mod"},
	{"docker", "compose", "run", "--rm", "svc"},
}

func FuzzIdentity(f *testing.F) {
	for _, argv := range fuzzArgvs {
		f.Add(strings.Join(argv, "\x00"), argv[0], false, "comm")
	}
	f.Add("", "/usr/bin/npx", true, "")
	f.Fuzz(func(t *testing.T, joined, filename string, truncated bool, comm string) {
		var argv []string
		if joined != "" {
			argv = strings.Split(joined, "\x00")
		}
		im := lineage.Image{Filename: filename, Argv: argv, ArgvTruncated: truncated}
		name, _ := Identity(im)
		checkName(t, "Identity", name)
		checkNotSecret(t, "Identity", name, argv)
		checkGrammar(t, "Identity", name, argv, true)
		p := lineage.Process{Comm: comm, Images: []lineage.Image{im}}
		n := Name(p)
		checkName(t, "Name", n)
		// The comm is the kernel's name for the task, which /proc shows
		// every user; a name that is the comm is not taken from argv, even
		// when a hidden value there happens to equal it ("0").
		if n != (cand{s: comm, i: -1}).safe() {
			checkNotSecret(t, "Name", n, argv)
			checkGrammar(t, "Name", n, argv, false)
		} else if r := redact.Argv([]string{n})[0]; r != n {
			t.Fatalf("Name: redact hides the comm name %q as %q", n, r)
		}
	})
}

// fuzzProcs builds up to 64 processes from data, 3 bytes each: the
// creator (an earlier process, the root, or one not listed), the images
// (from fuzzArgvs and words) and a swap that shuffles the list. Process 0
// is the root unless rootListed is false.
func fuzzProcs(data []byte, words string, rootListed bool) (lineage.ID, []lineage.Process) {
	argvs := append([][]string{}, fuzzArgvs...)
	argvs = append(argvs, []string{"node", "host.mjs"}, []string{"/usr/bin/git", "status"}, []string{"sh", "-c", "x"})
	if words != "" {
		argvs = append(argvs, strings.Split(words, "\x00"))
	}
	root := lineage.ID{PID: 1, Start: 1}
	if !rootListed {
		root = lineage.ID{PID: 999, Start: 999}
	}
	n := min(len(data)/3, 64)
	procs := make([]lineage.Process, n)
	for k := range n {
		b0, b1, b2 := data[3*k], data[3*k+1], data[3*k+2]
		p := lineage.Process{ID: lineage.ID{PID: uint32(k + 1), Start: uint64(k + 1)}, Comm: "c"}
		switch c := int(b0) % (k + 2); {
		case c < k:
			p.Creator = procs[c].ID
		case c == k:
			p.Creator = root
		default:
			p.Creator = lineage.ID{PID: uint32(500 + k), Start: 5}
		}
		if b1&0x80 != 0 && c0(k, procs, p.Creator) != nil {
			p.Images = append(p.Images, inh(c0(k, procs, p.Creator).Current()))
		}
		if b1&0x40 != 0 {
			argv := argvs[int(b1&0x3f)%len(argvs)]
			p.Images = append(p.Images, lineage.Image{Filename: argv[0], Argv: argv, ArgvTruncated: b2&0x80 != 0})
		}
		if b1&0x20 != 0 {
			argv := argvs[int(b2&0x3f)%len(argvs)]
			p.Images = append(p.Images, lineage.Image{Filename: argv[0], Argv: argv})
		}
		p.Exited = b2&0x40 != 0
		procs[k] = p
	}
	for k := range n {
		j := int(data[3*k+2]) % n
		procs[k], procs[j] = procs[j], procs[k]
	}
	return root, procs
}

// c0 returns the process among procs[:k] with ID id.
func c0(k int, procs []lineage.Process, id lineage.ID) *lineage.Process {
	for i := range procs[:k] {
		if procs[i].ID == id {
			return &procs[i]
		}
	}
	return nil
}

// refKind is a naive, recursive reading of Classify's rules (with a
// HostTable that knows nothing of the host: no Self, no Tools). The
// folding of short branches never applies here: no fuzzed process has
// an exit time.
func refKind(root lineage.ID, rootIsHost bool, procs []lineage.Process, i int) (kind, lineage.ID) {
	p := &procs[i]
	if p.ID == root {
		if rootIsHost {
			return kHost, lineage.ID{}
		}
		return kServer, p.ID
	}
	pk, ps := kUnset, lineage.ID{}
	found := false
	for j := range procs {
		if procs[j].ID == p.Creator && j != i {
			pk, ps = refKind(root, rootIsHost, procs, j)
			found = true
			break
		}
	}
	if !found && p.Creator == root {
		pk = kHost
		if !rootIsHost {
			pk, ps = kServer, root
		}
	}
	// Created by the host's own processes (or by one not listed, read as
	// the host's child).
	host := pk == kHost || pk == kUnset && rootIsHost
	im := p.Current()
	pr := parseImage(im)
	cli := !pr.wrapper && pr.top != nil && progKey(pr.top.argv[0]) == "mcptrace"
	cut := im.Stdio.Known() && !im.Stdio.Connected()
	switch {
	case pk == kServer || pk == kBelow:
		return kBelow, ps
	case pk == kTool:
		return kTool, lineage.ID{}
	case !executed(p) && pk == kWrapper:
		return kWrapper, lineage.ID{}
	case !executed(p) && pk == kHost && len(p.Images) > 0:
		return kHost, lineage.ID{} // a fork of the host runs the host's code
	case !executed(p):
		return kPlain, lineage.ID{}
	case host && (cli || cut):
		return kTool, lineage.ID{}
	}
	if _, w := Identity(im); w {
		return kWrapper, lineage.ID{}
	}
	switch {
	case cli:
		return kTool, lineage.ID{}
	case cut:
		return kPlain, lineage.ID{}
	}
	return kServer, p.ID
}

// wrapperProgs are the wrappers' names in chains.
var wrapperProgs = map[string]bool{
	"npx": true, "bunx": true, "npm exec": true, "pnpm dlx": true, "yarn dlx": true,
	"uvx": true, "uv run": true, "uv tool run": true, "pipx run": true,
	"sh": true, "bash": true, "dash": true, "zsh": true, "ash": true, "ksh": true, "mksh": true,
	"cmd": true, "env": true, "mcptrace run": true, "mcptrace exec": true,
	"docker run": true, "docker create": true, "podman run": true, "podman create": true,
	"docker compose run": true, "podman compose run": true,
}

var kindRole = map[kind]Role{kHost: Host, kPlain: Other, kWrapper: Wrapper, kServer: Server, kBelow: Other, kTool: Tool}

func FuzzClassify(f *testing.F) {
	f.Add([]byte{0, 0xc0, 0, 0, 0xc1, 0, 1, 0x40, 0, 2, 0x40, 0x20}, "", true, true)
	f.Add([]byte{1, 0x40, 3, 0, 0xc2, 2, 1, 0xe4, 0x45, 5, 0x4a, 0x81}, "npx\x00-y\x00x", false, true)
	f.Add([]byte{1, 0x40, 3, 0, 0xc2, 2, 1, 0xe4, 0x45, 5, 0x4a, 0x81}, "", true, false)
	f.Fuzz(func(t *testing.T, data []byte, words string, rootIsHost, rootListed bool) {
		root, procs := fuzzProcs(data, words, rootListed)
		ms := Classify(root, rootIsHost, procs)
		if len(ms) != len(procs) {
			t.Fatalf("%d members for %d processes", len(ms), len(procs))
		}
		// Every name is one Identity or Name gives for a member.
		names := map[string]bool{"": true}
		servers := map[lineage.ID]string{}
		for i := range procs {
			names[Name(procs[i])] = true
			for _, im := range procs[i].Images {
				n, _ := Identity(im)
				names[n] = true
			}
			if ms[i].Role == Server {
				servers[procs[i].ID] = ms[i].Server
			}
		}
		for i, m := range ms {
			p := &procs[i]
			// The host is the root, and forks of the host's own
			// processes that executed nothing (refKind below says which).
			if m.Role == Host && !rootIsHost || (rootIsHost && p.ID == root) && m.Role != Host {
				t.Fatalf("pid %d: role %v, root %v, rootIsHost %v", p.ID.PID, m.Role, root, rootIsHost)
			}
			checkName(t, "Server", m.Server)
			if !names[m.Server] {
				t.Fatalf("pid %d: server %q is no name of any member", p.ID.PID, m.Server)
			}
			if m.Role != Server && m.Chain != nil {
				t.Fatalf("pid %d: %v with chain %q", p.ID.PID, m.Role, m.Chain)
			}
			if len(m.Chain) > maxChain {
				t.Fatalf("pid %d: chain %q", p.ID.PID, m.Chain)
			}
			for _, c := range m.Chain {
				if !wrapperProgs[c] {
					checkName(t, "Chain", c)
				}
				if c == "" {
					t.Fatalf("pid %d: empty chain entry in %q", p.ID.PID, m.Chain)
				}
			}
			switch m.Role {
			case Container:
				t.Fatalf("pid %d: container", p.ID.PID)
			case Server:
				if m.ServerID != p.ID {
					t.Fatalf("pid %d: server with ServerID %v", p.ID.PID, m.ServerID)
				}
			case Host, Wrapper:
				if !m.ServerID.IsZero() {
					t.Fatalf("pid %d: %v with ServerID %v", p.ID.PID, m.Role, m.ServerID)
				}
			case Other:
				s, ok := servers[m.ServerID]
				if ok && s != m.Server {
					t.Fatalf("pid %d: under server %v named %q, not %q", p.ID.PID, m.ServerID, s, m.Server)
				}
				if !ok && !m.ServerID.IsZero() && (m.ServerID != root || rootIsHost || m.Server != "") {
					t.Fatalf("pid %d: under %v, which is no server", p.ID.PID, m.ServerID)
				}
			}
			// Creators are earlier processes (no cycles): the naive
			// reading of the rules agrees.
			k, sid := refKind(root, rootIsHost, procs, i)
			if kindRole[k] != m.Role || sid != m.ServerID {
				t.Fatalf("pid %d: %v under %v; the rules say %v under %v", p.ID.PID, m.Role, m.ServerID, kindRole[k], sid)
			}
		}
	})
}
