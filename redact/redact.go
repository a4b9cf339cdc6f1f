package redact

import (
	"path"
	"strings"
)

// Marker replaces every redacted value.
const Marker = "<redacted>"

// maxDepth bounds how deeply nested quotes, scripts and values are followed.
// Anything deeper is redacted whole.
const maxDepth = 12

// Argv returns a copy of argv with every secret replaced by Marker, following
// the rules in the package documentation. argv itself is not modified.
func Argv(argv []string) []string {
	if argv == nil {
		return nil
	}
	out := words(argv, nil, 0)
	for i := range out {
		out[i] = shapes(out[i])
	}
	return out
}

// pending says how the next word is to be read, given the one before it.
type pending uint8

const (
	none        pending = iota
	secretValue         // after --token: the value is a secret
	envValue            // after -e: NAME=VALUE or NAME
	userValue           // after curl -u: user:password
	scriptValue         // after sh -c: a script
)

// words redacts a sequence of shell words: an argv, or the words of a
// script. sep marks separators (; && | newline …) that end a command; they
// are returned unchanged. sep may be nil.
func words(ws []string, sep []bool, depth int) []string {
	out := make([]string, len(ws))
	r := reader{depth: depth}
	for i, w := range ws {
		if sep != nil && sep[i] {
			out[i] = w
			r.reset()
			continue
		}
		out[i] = r.next(w)
	}
	return out
}

// reader redacts the words of one command in order: what a word means
// depends on the words before it (--token X, docker login -p X). The
// words of an argv, of a script and of a JSON array (args) go through it.
type reader struct {
	p     pending
	prog  string // program whose own flag rules apply, see programRule
	depth int
}

func (r *reader) reset() { r.p, r.prog = none, "" }

// next redacts the next word.
func (r *reader) next(w string) string {
	switch r.p {
	case secretValue:
		// The word after a secret flag is its value even when it starts
		// with "--" (--token --x7Qp…): a secret flag that takes no value
		// loses the option after it to Marker, a secret is never shown.
		// Only "--" itself, the end of the options, is not a value.
		if w != "--" {
			if isAuthScheme(w) {
				// Authorization: Bearer X — the scheme is not the secret.
				return w
			}
			r.p = none
			return secret(w)
		}
	case envValue:
		if !isFlag(w) {
			r.p = none
			return envAssignment(w, r.depth)
		}
	case userValue:
		if !isFlag(w) {
			r.p = none
			return userPassword(w)
		}
	case scriptValue:
		if !isFlag(w) {
			open, inner, closing := unquote(w)
			r.p = none
			return open + script(inner, r.depth+1) + closing
		}
	}
	if name := programName(w); name != "" {
		r.prog = name
	} else if w == "login" && loginTools[r.prog] {
		r.prog += " login"
	}
	out, p := word(w, r.prog, r.depth)
	r.p = p
	return out
}

// word redacts one word that no flag before it claims, and says how to read
// the next one.
func word(w, prog string, depth int) (string, pending) {
	if out, p, ok := programRule(prog, w); ok {
		return out, p
	}
	if isScriptFlag(w) {
		return w, scriptValue
	}
	if !isFlag(w) {
		if strings.EqualFold(w, "bearer") {
			return w, secretValue
		}
		if name, ok := strings.CutSuffix(w, ":"); ok && isHeaderName(name) && secretName(name) {
			return w, secretValue
		}
		return arg(w, depth), none
	}
	name, value, hasValue := strings.Cut(w, "=")
	if !hasValue {
		switch {
		case isEnvFlag(name):
			return w, envValue
		case secretFlag(name):
			return w, secretValue
		}
		return w, none
	}
	switch {
	case isEnvFlag(name):
		return name + "=" + envAssignment(value, depth), none
	case isScriptFlag(name):
		return name + "=" + script(value, depth+1), none
	case isAttachedEnv(name):
		// -eNAME=VALUE
		return "-e" + envAssignment(w[2:], depth), none
	case secretFlag(name):
		return name + "=" + secret(value), none
	}
	return name + "=" + arg(value, depth+1), none
}

// arg redacts one argument on its own: a word with no flag before it that
// changes its meaning.
func arg(a string, depth int) string {
	if depth > maxDepth {
		return Marker
	}
	if open, inner, closing := unquote(a); open != "" {
		return open + arg(inner, depth+1) + closing
	}
	a = privateKeys(a)
	if isJSONish(a) {
		return jsonish(a, depth+1)
	}
	if name, value, ok := assignment(a); ok {
		if secretName(name) {
			return name + "=" + secret(value)
		}
		return name + "=" + arg(value, depth+1)
	}
	if name, space, value, ok := header(a); ok && secretName(name) {
		if strings.TrimSpace(value) == "" {
			return a
		}
		return name + ":" + space + Marker
	}
	if strings.ContainsAny(a, " \t\n\r\v\f") {
		return script(a, depth+1)
	}
	return scan(a)
}

// script redacts a shell script: it is split into words, which are redacted
// like an argv, and put back together with the text between them unchanged.
func script(s string, depth int) string {
	if depth > maxDepth {
		return Marker
	}
	spans := tokenize(s)
	if len(spans) == 1 && !spans[0].sep && spans[0].start == 0 && spans[0].end == len(s) {
		// One word with white space inside quotes: nothing to split here.
		return scan(s)
	}
	ws := make([]string, len(spans))
	sep := make([]bool, len(spans))
	for i, sp := range spans {
		ws[i], sep[i] = s[sp.start:sp.end], sp.sep
	}
	red := words(ws, sep, depth)
	var b strings.Builder
	b.Grow(len(s))
	last := 0
	for i, sp := range spans {
		b.WriteString(s[last:sp.start])
		b.WriteString(red[i])
		last = sp.end
	}
	b.WriteString(s[last:])
	return b.String()
}

// envAssignment redacts the value of a docker-style -e argument: NAME=VALUE
// keeps NAME only, a bare NAME is kept.
func envAssignment(v string, depth int) string {
	open, inner, closing := unquote(v)
	if i := strings.IndexByte(inner, '='); i > 0 && !strings.ContainsAny(inner[:i], " \t\n\r\v\f") {
		return open + inner[:i+1] + secret(inner[i+1:]) + closing
	}
	if isEnvName(inner) {
		return v
	}
	return arg(v, depth+1)
}

// userPassword redacts the password of user:password (curl -u).
func userPassword(v string) string {
	open, inner, closing := unquote(v)
	user, pass, ok := strings.Cut(inner, ":")
	if !ok {
		return v
	}
	return open + user + ":" + secret(pass) + closing
}

// secret returns what a secret value is shown as: Marker, unless there is
// nothing to hide (empty, or only a variable reference).
func secret(v string) string {
	_, inner, _ := unquote(v)
	if inner == "" || isVarRef(inner) {
		return v
	}
	return Marker
}

// programRule applies the few flag rules that only hold for one program.
// A single-letter flag is a secret only for the programs listed here: -p
// is a port, -k "insecure" (curl), a sort key (sort -k 2) or a kill
// timeout (timeout -k 5) as often as a password, so -k X, -p X and -w X
// are redacted only for the programs that take a password or key there.
func programRule(prog, w string) (string, pending, bool) {
	switch prog {
	case "mysql", "mysqldump", "mysqladmin", "mariadb", "mariadb-dump", "mariadb-admin", "7z", "7za", "7zr":
		// -pVALUE only: a bare -p prompts (mysql) or is not a flag (7z).
		if v, ok := strings.CutPrefix(w, "-p"); ok && v != "" {
			return "-p" + secret(v), none, true
		}
	case "sshpass", "docker login", "podman login", "nerdctl login", "buildah login", "skopeo login",
		"helm login", "oras login", "crane login", "regctl login":
		if w == "-p" {
			return w, secretValue, true
		}
		if v, ok := strings.CutPrefix(w, "-p"); ok {
			return "-p" + secret(v), none, true
		}
	case "mongo", "mongosh", "mongodump", "mongorestore", "mongoexport", "mongoimport":
		if w == "-p" {
			return w, secretValue, true
		}
	case "redis-cli":
		if w == "-a" {
			return w, secretValue, true
		}
	case "openssl", "mcrypt":
		if w == "-k" {
			return w, secretValue, true
		}
	case "ccrypt":
		if w == "-K" {
			return w, secretValue, true
		}
	case "zip", "unzip":
		if w == "-P" {
			return w, secretValue, true
		}
	case "ldapsearch", "ldapadd", "ldapmodify", "ldapdelete", "ldapwhoami", "ldappasswd", "ldapcompare", "ldapmodrdn", "ldapexop":
		if w == "-w" {
			return w, secretValue, true
		}
	case "curl":
		switch w {
		case "-u", "--user", "-U", "--proxy-user":
			return w, userValue, true
		}
		for _, f := range []string{"--user=", "--proxy-user="} {
			if v, ok := strings.CutPrefix(w, f); ok {
				return f + userPassword(v), none, true
			}
		}
		for _, f := range []string{"-u", "-U"} {
			if v, ok := strings.CutPrefix(w, f); ok {
				return f + userPassword(v), none, true
			}
		}
	}
	return "", none, false
}

// programs have flag rules of their own (programRule); loginTools have
// them after a "login" subcommand (docker login -p X, while docker run -p
// is a port).
var (
	programs = map[string]bool{
		"mysql": true, "mysqldump": true, "mysqladmin": true, "mariadb": true, "mariadb-dump": true, "mariadb-admin": true,
		"sshpass": true, "redis-cli": true, "curl": true,
		"mongo": true, "mongosh": true, "mongodump": true, "mongorestore": true, "mongoexport": true, "mongoimport": true,
		"openssl": true, "mcrypt": true, "ccrypt": true, "zip": true, "unzip": true, "7z": true, "7za": true, "7zr": true,
		"ldapsearch": true, "ldapadd": true, "ldapmodify": true, "ldapdelete": true, "ldapwhoami": true,
		"ldappasswd": true, "ldapcompare": true, "ldapmodrdn": true, "ldapexop": true,
		"docker": true, "podman": true, "nerdctl": true, "buildah": true, "skopeo": true, "helm": true,
		"oras": true, "crane": true, "regctl": true,
	}
	loginTools = map[string]bool{
		"docker": true, "podman": true, "nerdctl": true, "buildah": true, "skopeo": true, "helm": true,
		"oras": true, "crane": true, "regctl": true,
	}
)

// programName returns the base name of w if it names a program with rules
// of its own (see programRule), or "".
func programName(w string) string {
	_, inner, _ := unquote(w)
	if base := path.Base(inner); programs[base] {
		return base
	}
	return ""
}
