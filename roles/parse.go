package roles

import (
	"strings"

	"github.com/mcptrace/mcptrace/lineage"
)

// maxDepth bounds how many programs deep a command line is followed
// (env → sh -c → npx …).
const maxDepth = 4

// parsed is what one image says.
type parsed struct {
	id      cand   // the identity it names
	wrapper bool   // it only starts another program
	prog    string // a wrapper's short name for chains: "npx", "sh", "docker run"
	base    cand   // its fallback name (Name): package, module or basename
	top     *level // the image's argv (its filename when it has none)
}

func parseImage(im lineage.Image) parsed {
	argv, trunc := im.Argv, im.ArgvTruncated
	if len(argv) == 0 {
		if im.Filename == "" {
			return parsed{}
		}
		argv, trunc = []string{im.Filename}, false
	}
	top := &level{argv: argv, truncated: trunc}
	p := parse(top, 0, 0)
	p.top = top
	return p
}

// parse reads the command line that starts at lv.argv[i], its program.
func parse(lv *level, i, depth int) parsed {
	if i >= len(lv.argv) || depth > maxDepth {
		return parsed{}
	}
	w := lv.argv[i]
	switch k := progKey(w); {
	case k == "env":
		return parseEnv(lv, i+1, depth)
	case k == "node" || k == "nodejs" || k == "bun":
		return parseNode(lv, i, depth, k == "bun")
	case isPython(k):
		return parsePython(lv, i, depth)
	case k == "npx":
		return parseExec(lv, i+1, "npx", npmGrammar, cand{})
	case k == "bunx":
		return parseExec(lv, i+1, "bunx", bunxGrammar, cand{})
	case k == "pnpx":
		return parseExec(lv, i+1, "pnpm dlx", pnpmGrammar, cand{})
	case k == "npm":
		return parseNpm(lv, i)
	case k == "pnpm":
		return parsePnpm(lv, i)
	case k == "yarn" || strings.HasPrefix(k, "yarn-"):
		return parseYarn(lv, i)
	case k == "uvx":
		return parseUvTool(lv, i+1, "uvx")
	case k == "uv":
		return parseUv(lv, i, depth)
	case k == "pipx":
		return parsePipx(lv, i)
	case shells[k] != "":
		return parseShell(lv, i, depth, shells[k])
	case k == "cmd":
		return parseCmd(lv, i, depth)
	case k == "mcptrace":
		return parseMcptrace(lv, i, depth)
	case k == "docker" || k == "podman":
		return parseDocker(lv, i, k)
	case k == "docker-compose" || k == "podman-compose":
		return parseCompose(lv, i+1, strings.TrimSuffix(k, "-compose"))
	}
	return parsed{base: cand{binName(w), lv, i}}
}

// shells maps the shells whose -c runs a script to their chain name.
var shells = map[string]string{
	"sh": "sh", "bash": "bash", "dash": "dash", "zsh": "zsh", "ash": "ash",
	"ksh": "ksh", "mksh": "mksh",
}

// basename returns the last element of a path with / or \ separators.
func basename(p string) string {
	p = strings.TrimRight(p, `/\`)
	if k := strings.LastIndexAny(p, `/\`); k >= 0 {
		return p[k+1:]
	}
	return p
}

// progKey is the lower-case basename of a program without a Windows
// executable extension: what decides which program it is.
func progKey(w string) string {
	k := strings.ToLower(basename(w))
	for _, ext := range []string{".exe", ".cmd", ".bat"} {
		k = strings.TrimSuffix(k, ext)
	}
	return k
}

// scriptKey is progKey for a script run by node or python.
func scriptKey(w string) string {
	k := progKey(w)
	for _, ext := range []string{".js", ".cjs", ".mjs", ".py"} {
		k = strings.TrimSuffix(k, ext)
	}
	return k
}

// binName is the fallback name of a script or binary: its npm package
// when it is under node_modules, else its basename without .js, .mjs,
// .cjs, .py or .exe.
func binName(p string) string {
	if pkg := nodeModule(p); pkg != "" {
		return pkg
	}
	b := basename(p)
	for _, ext := range []string{".js", ".mjs", ".cjs", ".py", ".exe"} {
		if len(b) > len(ext) && strings.EqualFold(b[len(b)-len(ext):], ext) {
			return b[:len(b)-len(ext)]
		}
	}
	return b
}

// nodeModule returns the package (@scope/pkg or pkg) a path is in, after
// its last node_modules element; "" when there is none (node_modules/.bin
// holds links, not a package).
func nodeModule(p string) string {
	p = strings.ReplaceAll(p, `\`, "/")
	k := strings.LastIndex(p, "node_modules/")
	if k < 0 {
		return ""
	}
	rest := strings.Split(p[k+len("node_modules/"):], "/")
	pkg := rest[0]
	if strings.HasPrefix(pkg, "@") {
		if len(rest) < 2 || rest[1] == "" {
			return ""
		}
		pkg += "/" + rest[1]
	}
	if pkg == "" || strings.HasPrefix(pkg, ".") {
		return ""
	}
	return pkg
}

// isPython reports whether k is a python interpreter: python, python3,
// python3.12, pythonw, pypy3, py (the Windows launcher).
func isPython(k string) bool {
	if k == "py" {
		return true
	}
	var rest string
	switch {
	case strings.HasPrefix(k, "python"):
		rest = k[len("python"):]
	case strings.HasPrefix(k, "pypy"):
		rest = k[len("pypy"):]
	default:
		return false
	}
	rest = strings.TrimSuffix(rest, "w")
	return strings.Trim(rest, "0123456789.") == ""
}

func isFlag(a string) bool { return len(a) > 1 && a[0] == '-' }

// isAssign reports whether a is NAME=VALUE with a shell variable name.
func isAssign(a string) bool {
	k := strings.IndexByte(a, '=')
	if k <= 0 {
		return false
	}
	for i := 0; i < k; i++ {
		b := a[i]
		if !(b == '_' || 'a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' || i > 0 && '0' <= b && b <= '9') {
			return false
		}
	}
	return true
}

// flagSet is a set of flag names ("--package", "-p").
type flagSet map[string]bool

func flags(names ...string) flagSet {
	s := make(flagSet, len(names))
	for _, n := range names {
		s[n] = true
	}
	return s
}

// option reads the flag at argv[j], whose value, when it takes one
// (takes), is attached ("--name=v", "-pv") or the next element. It returns
// the flag's name, its value and the index of the element holding the
// value (-1 when none), and the index after the flag.
func option(lv *level, j int, takes flagSet) (name, value string, vi, next int) {
	a := lv.argv[j]
	if strings.HasPrefix(a, "--") {
		if k := strings.IndexByte(a, '='); k >= 0 {
			return a[:k], a[k+1:], j, j + 1
		}
	} else if len(a) > 2 && takes[a[:2]] {
		return a[:2], strings.TrimPrefix(a[2:], "="), j, j + 1
	}
	if takes[a] {
		if j+1 < len(lv.argv) {
			return a, lv.argv[j+1], j + 1, j + 2
		}
		return a, "", -1, j + 1
	}
	return a, "", -1, j + 1
}

// parseExec reads a package runner's arguments from argv[j]: options,
// then the package (or, with a package flag, the command to run from it).
// pre is a package given before the runner's subcommand (pnpm
// --package=x dlx). An unknown option names nothing.
func parseExec(lv *level, j int, prog string, g *grammar, pre cand) parsed {
	r := parsed{wrapper: true, prog: prog, base: cand{prog, nil, -1}}
	pkg, shell := pre, false
	j, known := g.options(lv, j, false, func(name, value string, vi int) {
		switch name {
		case "-p", "--package":
			if vi >= 0 && !pkg.set() {
				pkg = cand{npmSpec(value), lv, vi}
			}
		case "-c", "--call", "--shell-mode":
			shell = true
		}
	})
	switch {
	case !known:
	case pkg.set():
		r.id = pkg
	case !shell && j < len(lv.argv):
		r.id = cand{npmSpec(lv.argv[j]), lv, j}
	}
	return r
}

// parseNpm reads `npm [opts] exec|x …`; other npm commands are programs.
func parseNpm(lv *level, i int) parsed {
	j, known := npmGrammar.options(lv, i+1, false, nil)
	if j < len(lv.argv) && (lv.argv[j] == "exec" || lv.argv[j] == "x") {
		return unknown(parseExec(lv, j+1, "npm exec", npmGrammar, cand{}), known)
	}
	return parsed{base: cand{binName(lv.argv[i]), lv, i}}
}

// parsePnpm reads `pnpm [opts] dlx …`, where --package may come first.
func parsePnpm(lv *level, i int) parsed {
	var pre cand
	j, known := pnpmGrammar.options(lv, i+1, false, func(name, value string, vi int) {
		if name == "--package" && vi >= 0 && !pre.set() {
			pre = cand{npmSpec(value), lv, vi}
		}
	})
	if j < len(lv.argv) && lv.argv[j] == "dlx" {
		return unknown(parseExec(lv, j+1, "pnpm dlx", pnpmGrammar, pre), known)
	}
	return parsed{base: cand{binName(lv.argv[i]), lv, i}}
}

// parseYarn reads `yarn [opts] dlx …`.
func parseYarn(lv *level, i int) parsed {
	j, known := yarnGrammar.options(lv, i+1, false, nil)
	if j < len(lv.argv) && lv.argv[j] == "dlx" {
		return unknown(parseExec(lv, j+1, "yarn dlx", yarnGrammar, cand{}), known)
	}
	return parsed{base: cand{binName(lv.argv[i]), lv, i}}
}

// unknown returns r, naming nothing unless known: the options read before
// r's were all known.
func unknown(r parsed, known bool) parsed {
	if !known {
		r.id = cand{}
	}
	return r
}

// npmSpec returns the package an npm spec names, "" when it names none:
// a package name without its version (pkg@1.2.3, @scope/pkg@latest), the
// repository of a GitHub shorthand (owner/repo#ref), or the last path
// element of a path, URL or git spec (github:, git+…, http(s)://, file:),
// without .git or .tgz. Anything else (user:secret@host) names nothing.
func npmSpec(s string) string {
	s = strings.TrimPrefix(s, "npm:")
	for _, p := range []string{"github:", "gitlab:", "bitbucket:", "gist:", "file:"} {
		if strings.HasPrefix(s, p) {
			return specElem(s[len(p):], false)
		}
	}
	for _, p := range []string{"git+", "git://", "http://", "https://"} {
		if strings.HasPrefix(s, p) {
			return specElem(s, false)
		}
	}
	if isPath(s) {
		return specElem(s, false)
	}
	if !strings.HasPrefix(s, "@") && strings.Contains(s, "/") {
		// GitHub shorthand: owner/repo[#committish].
		if k := strings.IndexByte(s, '#'); k >= 0 {
			s = s[:k]
		}
		owner, repo, _ := strings.Cut(s, "/")
		if isRepoName(owner) && isRepoName(repo) {
			return repo
		}
		return ""
	}
	name, version := s, ""
	start := 0
	if strings.HasPrefix(s, "@") {
		start = 1
	}
	if k := strings.IndexByte(s[start:], '@'); k >= 0 {
		name, version = s[:start+k], s[start+k+1:]
	}
	// A version, range or tag has no / : @ or \ (npm rejects such tags):
	// pkg@host/path and pkg@x:y are no package specs.
	if strings.ContainsAny(version, `/:@\`) || !isNpmName(name) {
		return ""
	}
	return name
}

// pySpec returns the distribution a Python requirement names, "" when it
// names none: without its version, extras or marker (pkg==1.0, pkg>=1,
// pkg@1.0, pkg[cli]), or the last path element of a path, URL or VCS spec.
func pySpec(s string) string {
	s = strings.TrimSpace(s)
	if isPath(s) || strings.Contains(s, "://") || strings.HasPrefix(s, "git+") {
		return specElem(s, true)
	}
	if strings.HasPrefix(s, "file:") {
		return specElem(s[len("file:"):], true)
	}
	if k := strings.IndexAny(s, "=<>!~;[@( ,"); k >= 0 {
		s = strings.TrimSpace(s[:k])
	}
	if !isPyName(s) {
		return ""
	}
	return s
}

// isPath reports whether a spec is a file path.
func isPath(s string) bool {
	return strings.HasPrefix(s, ".") || strings.HasPrefix(s, "/") || strings.HasPrefix(s, "~") ||
		strings.ContainsRune(s, '\\')
}

// specElem returns the name a path, URL or git spec names: the last
// element of its path (never its scheme, user info or host: a URL
// without a path names nothing), without a query, fragment, .git, .tgz,
// .tar.gz, .whl or .zip, and with atRef without an @ref (pip's
// git+https://host/org/repo@v1); "" unless that is a repository or file
// name.
func specElem(s string, atRef bool) string {
	if k := strings.IndexAny(s, "?#"); k >= 0 {
		s = s[:k]
	}
	if k := strings.Index(s, "://"); k >= 0 {
		rest := s[k+len("://"):]
		slash := strings.IndexByte(rest, '/')
		if slash < 0 {
			return ""
		}
		s = rest[slash+1:]
	}
	s = basename(s)
	if atRef {
		if k := strings.IndexByte(s, '@'); k > 0 {
			s = s[:k]
		}
	}
	for _, ext := range []string{".git", ".tgz", ".tar.gz", ".whl", ".zip"} {
		s = strings.TrimSuffix(s, ext)
	}
	if !isRepoName(s) {
		return ""
	}
	return s
}

// parseEnv reads env's arguments from argv[j]: options and assignments,
// then the command.
func parseEnv(lv *level, j, depth int) parsed {
	r := parsed{wrapper: true, prog: "env", base: cand{"env", nil, -1}}
	for j < len(lv.argv) {
		a := lv.argv[j]
		if a == "--" {
			j++
			break
		}
		if a == "-" {
			j++
			continue
		}
		if isFlag(a) {
			var split string
			switch {
			case a == "-S" || a == "--split-string":
				if j+1 >= len(lv.argv) {
					return r
				}
				split, j = lv.argv[j+1], j+1
			case strings.HasPrefix(a, "-S"):
				split = a[2:]
			case strings.HasPrefix(a, "--split-string="):
				split = a[len("--split-string="):]
			case a == "-u" || a == "-C" || a == "-P" || a == "--unset" || a == "--chdir":
				j += 2
				continue
			default:
				j++
				continue
			}
			// env -S "node --flag" script args: the string is more of
			// env's arguments, then the rest follow.
			words := splitWords(split, false)
			sub := &level{
				argv:      append(words, lv.argv[j+1:]...),
				truncated: lv.truncated,
				up:        lv,
			}
			in := parseEnv(sub, 0, depth+1)
			r.id, r.base = in.id, in.base
			return r
		}
		if isAssign(a) {
			j++
			continue
		}
		break
	}
	in := parse(lv, j, depth+1)
	r.id, r.base = in.id, in.base
	return r
}

// nodeValue are node's (and bun's) options that take a value.
var nodeValue = flags(
	"-r", "--require", "--import", "--loader", "--experimental-loader", "-C",
	"--conditions", "--env-file", "--env-file-if-exists", "--title", "--input-type",
	"--inspect-port", "--disable-warning", "--watch-path", "--cwd", "--preload",
	"--localstorage-file",
)

// parseNode reads `node [opts] SCRIPT args`: the script decides what runs.
func parseNode(lv *level, i, depth int, bun bool) parsed {
	j := i + 1
	for j < len(lv.argv) {
		a := lv.argv[j]
		if a == "--" {
			j++
			break
		}
		if !isFlag(a) {
			break
		}
		switch a {
		case "-e", "--eval", "-p", "--print":
			return parsed{base: cand{binName(lv.argv[i]), lv, i}}
		}
		_, _, _, j = option(lv, j, nodeValue)
	}
	if bun && j < len(lv.argv) {
		switch lv.argv[j] {
		case "x":
			return parseExec(lv, j+1, "bunx", bunxGrammar, cand{})
		case "run":
			j++
		}
	}
	if j >= len(lv.argv) {
		return parsed{base: cand{binName(lv.argv[i]), lv, i}}
	}
	if r, ok := shim(lv, j, depth); ok {
		return r
	}
	// An option node has that takes a value the parser does not know
	// would make its value look like the script: only what looks like a
	// script (a path, or a file with a script's extension) names it.
	if !looksLikeScript(lv.argv[j]) {
		return parsed{base: cand{binName(lv.argv[i]), lv, i}}
	}
	return parsed{base: cand{binName(lv.argv[j]), lv, j}}
}

// looksLikeScript: a path or a file name with a JavaScript or
// TypeScript extension.
func looksLikeScript(a string) bool {
	if strings.ContainsRune(a, '/') {
		return true
	}
	for _, ext := range []string{".js", ".mjs", ".cjs", ".ts", ".mts", ".cts"} {
		if strings.HasSuffix(a, ext) {
			return true
		}
	}
	return false
}

// shim reads a runtime's script argv[j] that is a wrapper's bin shim
// (npx-cli.js, npm-cli.js, pnpm.cjs, yarn.js, pipx).
func shim(lv *level, j, depth int) (parsed, bool) {
	switch k := scriptKey(lv.argv[j]); {
	case k == "npx" || k == "npx-cli":
		return parseExec(lv, j+1, "npx", npmGrammar, cand{}), true
	case k == "npm" || k == "npm-cli":
		return parseNpm(lv, j), true
	case k == "pnpx":
		return parseExec(lv, j+1, "pnpm dlx", pnpmGrammar, cand{}), true
	case k == "pnpm":
		return parsePnpm(lv, j), true
	case k == "yarn" || strings.HasPrefix(k, "yarn-"):
		return parseYarn(lv, j), true
	case k == "bunx":
		return parseExec(lv, j+1, "bunx", bunxGrammar, cand{}), true
	case k == "pipx":
		return parsePipx(lv, j), true
	case k == "mcptrace":
		return parseMcptrace(lv, j, depth), true
	}
	return parsed{}, false
}

// pythonSwitches are the python interpreter's one-letter options that take
// no value; -W, -X (and python 2's -Q) take one, -c and -m end them.
const pythonSwitches = "bBdEhiIOPqRsSuvVx?3t"

// parsePython reads `python [opts] -m MODULE | SCRIPT args`. An option
// python does not have names nothing.
func parsePython(lv *level, i, depth int) parsed {
	self := parsed{base: cand{binName(lv.argv[i]), lv, i}}
	j := i + 1
	for j < len(lv.argv) {
		a := lv.argv[j]
		if a == "--" {
			j++
			break
		}
		if !isFlag(a) {
			break
		}
		if strings.HasPrefix(a, "--") {
			switch a {
			case "--check-hash-based-pycs":
				j += 2
			case "--help", "--version", "--help-env", "--help-xoptions", "--help-all":
				j++
			default:
				if !strings.HasPrefix(a, "--check-hash-based-pycs=") {
					return self
				}
				j++
			}
			continue
		}
		next := j + 1
	cluster:
		for x := 1; x < len(a); x++ {
			switch c := a[x]; {
			case c == 'c':
				return self // inline code
			case c == 'm':
				mod, mi := a[x+1:], j
				if mod == "" {
					if j+1 >= len(lv.argv) {
						return self
					}
					mod, mi = lv.argv[j+1], j+1
				}
				return pyModule(lv, mod, mi, depth, self)
			case c == 'W' || c == 'X' || c == 'Q':
				if x+1 == len(a) {
					next++
				}
				break cluster
			case strings.IndexByte(pythonSwitches, c) < 0:
				return self
			}
		}
		j = next
	}
	if j >= len(lv.argv) || lv.argv[j] == "-" {
		return self
	}
	if r, ok := shim(lv, j, depth); ok {
		return r
	}
	return parsed{base: cand{binName(lv.argv[j]), lv, j}}
}

// pyModule reads `python -m MOD`, MOD at argv[mi] (or attached to -m);
// self is what the interpreter names without it. A module that is no
// dotted Python name names nothing.
func pyModule(lv *level, mod string, mi, depth int, self parsed) parsed {
	if mi < len(lv.argv) && lv.argv[mi] == mod {
		switch mod {
		case "pipx":
			return parsePipx(lv, mi)
		case "uv":
			return parseUv(lv, mi, depth)
		}
	}
	if !isPyModule(mod) {
		self.id = cand{"", lv, mi}
		return self
	}
	c := cand{mod, lv, mi}
	return parsed{id: c, base: c}
}

// uvValue are uv's options that take a value.
var uvValue = flags(
	"--from", "--with", "-w", "--with-editable", "--with-requirements", "--python", "-p",
	"--index", "--default-index", "--index-url", "-i", "--extra-index-url", "--find-links", "-f",
	"--directory", "--project", "--package", "--extra", "--group", "--only-group", "--no-group",
	"--env-file", "--config-file", "--cache-dir", "--color", "--constraints", "-c", "--constraint",
	"--overrides", "--override", "--build-constraints", "-b", "--build-constraint",
	"--index-strategy", "--keyring-provider", "--resolution", "--prerelease", "--exclude-newer",
	"--link-mode", "--refresh-package", "--reinstall-package", "--upgrade-package", "-P",
	"--config-setting", "-C", "--no-build-package", "--no-binary-package", "--only-binary",
	"--python-platform", "--allow-insecure-host", "--torch-backend", "--python-preference",
	"--fork-strategy", "--no-extra", "--exclude-newer-package", "--module", "-m",
)

// parseUv reads `uv [opts] run …` and `uv [opts] tool run …`.
func parseUv(lv *level, i, depth int) parsed {
	j, known := uvGrammar.options(lv, i+1, false, nil)
	if j >= len(lv.argv) {
		return parsed{base: cand{binName(lv.argv[i]), lv, i}}
	}
	switch lv.argv[j] {
	case "run":
		return unknown(parseUvRun(lv, j+1, depth), known)
	case "tool":
		k, known2 := uvGrammar.options(lv, j+1, false, nil)
		if k < len(lv.argv) && lv.argv[k] == "run" {
			return unknown(parseUvTool(lv, k+1, "uv tool run"), known && known2)
		}
	}
	return parsed{base: cand{binName(lv.argv[i]), lv, i}}
}

// parseUvTool reads uvx's (uv tool run's) arguments from argv[j]:
// options, then the package to run, or the command when --from names it.
func parseUvTool(lv *level, j int, prog string) parsed {
	r := parsed{wrapper: true, prog: prog, base: cand{prog, nil, -1}}
	var from cand
	j, known := uvGrammar.options(lv, j, false, func(name, value string, vi int) {
		if name == "--from" && vi >= 0 && !from.set() {
			from = cand{pySpec(value), lv, vi}
		}
	})
	switch {
	case !known:
	case from.set():
		r.id = from
	case j < len(lv.argv):
		r.id = cand{pySpec(lv.argv[j]), lv, j}
	}
	return r
}

// parseUvRun reads `uv run`'s arguments from argv[j]: the module of -m,
// else what the command names, else its script's or program's basename.
func parseUvRun(lv *level, j, depth int) parsed {
	r := parsed{wrapper: true, prog: "uv run", base: cand{"uv run", nil, -1}}
	for j < len(lv.argv) {
		a := lv.argv[j]
		if a == "--" {
			j++
			break
		}
		if !isFlag(a) {
			break
		}
		name, value, vi, next, known := uvGrammar.read(lv, j)
		if !known {
			return r
		}
		if (name == "-m" || name == "--module") && vi >= 0 {
			if isPyModule(value) {
				r.id = cand{value, lv, vi}
			} else {
				r.id = cand{"", lv, vi}
			}
			return r
		}
		j = next
	}
	if j < len(lv.argv) {
		in := parse(lv, j, depth+1)
		if in.id.set() {
			r.id = in.id
		} else {
			r.id = in.base
		}
	}
	return r
}

// parsePipx reads `pipx [opts] run [opts] [--spec PKG] PKG|CMD …`.
func parsePipx(lv *level, i int) parsed {
	j, known := pipxGrammar.options(lv, i+1, false, nil)
	if j >= len(lv.argv) || lv.argv[j] != "run" {
		return parsed{base: cand{binName(lv.argv[i]), lv, i}}
	}
	r := parsed{wrapper: true, prog: "pipx run", base: cand{"pipx run", nil, -1}}
	var spec cand
	j, known2 := pipxGrammar.options(lv, j+1, false, func(name, value string, vi int) {
		if name == "--spec" && vi >= 0 && !spec.set() {
			spec = cand{pySpec(value), lv, vi}
		}
	})
	switch {
	case !known || !known2:
	case spec.set():
		r.id = spec
	case j < len(lv.argv):
		r.id = cand{pySpec(lv.argv[j]), lv, j}
	}
	return r
}

// parseShell reads `sh [opts] -c SCRIPT [name args]`; a shell running a
// script file is a program, not a wrapper.
func parseShell(lv *level, i, depth int, prog string) parsed {
	j, c := i+1, false
	for j < len(lv.argv) {
		a := lv.argv[j]
		if a == "--" || a == "-" {
			j++
			break
		}
		if len(a) < 2 || (a[0] != '-' && a[0] != '+') {
			break
		}
		j++
		if strings.HasPrefix(a, "--") {
			if a == "--rcfile" || a == "--init-file" {
				j++
			}
			continue
		}
		for x := 1; x < len(a); x++ {
			switch a[x] {
			case 'c':
				c = c || a[0] == '-'
			case 'o', 'O':
				j++ // -o pipefail
			}
		}
	}
	if !c {
		if j < len(lv.argv) {
			return parsed{base: cand{binName(lv.argv[j]), lv, j}}
		}
		return parsed{base: cand{binName(lv.argv[i]), lv, i}}
	}
	r := parsed{wrapper: true, prog: prog, base: cand{prog, nil, -1}}
	if j >= len(lv.argv) {
		return r
	}
	return script(r, lv, j, lv.argv[j], depth)
}

// script fills r with what a wrapper's script (argv[j], or text built from
// it) runs: its first command that is not a shell builtin.
func script(r parsed, lv *level, j int, text string, depth int) parsed {
	words := splitWords(text, true)
	if len(words) == 0 {
		return r
	}
	sub := &level{argv: words, truncated: lv.truncated && j == len(lv.argv)-1, up: lv}
	in := parse(sub, 0, depth+1)
	r.id = in.id
	if in.base.s != "" {
		r.base = in.base
	}
	return r
}

// parseCmd reads `cmd [/s /q /d …] /c|/k COMMAND…`.
func parseCmd(lv *level, i, depth int) parsed {
	for j := i + 1; j < len(lv.argv); j++ {
		a := strings.ToLower(lv.argv[j])
		if !strings.HasPrefix(a, "/") {
			break
		}
		if a == "/c" || a == "/k" {
			r := parsed{wrapper: true, prog: "cmd", base: cand{"cmd", nil, -1}}
			text := strings.Join(lv.argv[j+1:], " ")
			if len(text) >= 2 && text[0] == '"' && text[len(text)-1] == '"' {
				text = text[1 : len(text)-1]
			}
			return script(r, lv, len(lv.argv)-1, text, depth)
		}
	}
	return parsed{base: cand{binName(lv.argv[i]), lv, i}}
}

// parseMcptrace reads `mcptrace [flags] run|exec [flags] -- CMD args`.
func parseMcptrace(lv *level, i, depth int) parsed {
	j := i + 1
	for j < len(lv.argv) && isFlag(lv.argv[j]) && lv.argv[j] != "--" {
		if strings.Contains(lv.argv[j], "=") {
			j++
		} else {
			j += 2
		}
	}
	if j >= len(lv.argv) || (lv.argv[j] != "run" && lv.argv[j] != "exec") {
		return parsed{base: cand{binName(lv.argv[i]), lv, i}}
	}
	prog := "mcptrace " + lv.argv[j]
	for k := j + 1; k < len(lv.argv); k++ {
		if lv.argv[k] == "--" {
			in := parse(lv, k+1, depth+1)
			return parsed{wrapper: true, prog: prog, id: in.id, base: in.base}
		}
	}
	return parsed{base: cand{binName(lv.argv[i]), lv, i}}
}

// parseDocker reads `docker|podman [opts] [container] run|create [opts]
// IMAGE …` and `docker compose … run … SERVICE`. An option docker and
// podman do not have names nothing, and so does an image that is no image
// reference.
func parseDocker(lv *level, i int, k string) parsed {
	self := parsed{base: cand{binName(lv.argv[i]), lv, i}}
	j, known := dockerGlobal.options(lv, i+1, true, nil)
	if j >= len(lv.argv) {
		return self
	}
	sub := lv.argv[j]
	if sub == "container" && j+1 < len(lv.argv) {
		j++
		sub = lv.argv[j]
	} else if sub == "compose" {
		return unknown(parseCompose(lv, j+1, k), known)
	}
	if sub != "run" && sub != "create" {
		return self
	}
	r := parsed{wrapper: true, prog: k + " " + sub, base: cand{k, nil, -1}}
	j, known2 := dockerRun.options(lv, j+1, false, nil)
	if known && known2 && j < len(lv.argv) {
		r.id = cand{imageName(lv.argv[j]), lv, j}
	}
	return r
}

// parseCompose reads compose's arguments from argv[j]: `[opts] run [opts]
// SERVICE …`; k is "docker" or "podman".
func parseCompose(lv *level, j int, k string) parsed {
	j, known := composeGlobal.options(lv, j, true, nil)
	if j >= len(lv.argv) || lv.argv[j] != "run" {
		return parsed{base: cand{k + "-compose", nil, -1}}
	}
	r := parsed{wrapper: true, prog: k + " compose run", base: cand{k + "-compose", nil, -1}}
	j, known2 := composeRun.options(lv, j+1, false, nil)
	if known && known2 && j < len(lv.argv) {
		s := lv.argv[j]
		if !fits(serviceRe, s) {
			s = ""
		} else {
			s = "compose:" + s
		}
		r.id = cand{s, lv, j}
	}
	return r
}

// imageName returns an image reference without its tag and digest,
// keeping a registry's port (host:5000/img:tag → host:5000/img); "" when
// ref is no image reference.
func imageName(ref string) string {
	if !imageRe.MatchString(ref) {
		return ""
	}
	if k := strings.IndexByte(ref, '@'); k >= 0 {
		ref = ref[:k]
	}
	if c := strings.LastIndexByte(ref, ':'); c > strings.LastIndexByte(ref, '/') {
		ref = ref[:c]
	}
	if len(ref) > maxName {
		return ""
	}
	return ref
}
