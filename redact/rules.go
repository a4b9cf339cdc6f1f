package redact

import (
	"regexp"
	"strings"
)

// secretParts make a flag or variable name secret when they occur anywhere
// in it (after normalize).
var secretParts = []string{
	"token", "secret", "pass", "key", "credential", "bearer", "cookie",
	"private", "session_id", "sessionid", "signature", "jwt",
}

// notSecret removes words that contain a secret part but name no secret
// before the parts are looked for (BYPASS_TOKEN still has "token").
var notSecret = strings.NewReplacer(
	"bypass", "_", "passthrough", "_", "pass_through", "_", "compass", "_",
	"keyboard", "_",
)

// normalize lowercases a name and turns - . and spaces into _.
func normalize(name string) string {
	return strings.Map(func(r rune) rune {
		switch r {
		case '-', '.', ' ':
			return '_'
		}
		if 'A' <= r && r <= 'Z' {
			return r + 'a' - 'A'
		}
		return r
	}, name)
}

// secretName reports whether a flag, variable, parameter or header name
// says its value is a secret.
func secretName(name string) bool {
	n := notSecret.Replace(normalize(name))
	for _, p := range secretParts {
		if strings.Contains(n, p) {
			return true
		}
	}
	if hasAuth(n) {
		return true
	}
	segs := strings.FieldsFunc(n, func(r rune) bool { return r == '_' })
	for _, s := range segs {
		switch s {
		case "pat", "sig", "dsn", "pw":
			return true
		case "pwd":
			if len(segs) > 1 { // MYSQL_PWD, not PWD (the working directory)
				return true
			}
		}
	}
	return false
}

// hasAuth reports whether n contains "auth" other than in "author"
// (authorization and authority count).
func hasAuth(n string) bool {
	for {
		i := strings.Index(n, "auth")
		if i < 0 {
			return false
		}
		n = n[i+len("auth"):]
		if !strings.HasPrefix(n, "or") || strings.HasPrefix(n, "ori") {
			return true
		}
	}
}

// booleanPrefixes start the names of switches that take no value, even
// when the rest of the name is a secret word.
var booleanPrefixes = []string{"no_", "show_", "with_", "ask_", "use_", "enable_", "disable_", "skip_", "allow_", "prompt_"}

// secretFlag reports whether the value of flag name (with its dashes) is a
// secret.
func secretFlag(name string) bool {
	n := normalize(strings.TrimLeft(name, "-"))
	if n == "private" {
		return false // a boolean switch: gh repo create --private
	}
	for _, prefix := range booleanPrefixes {
		if strings.HasPrefix(n, prefix) {
			return false // a boolean switch: --no-auth, --show-secrets, --with-token
		}
	}
	for _, suffix := range []string{"file", "path", "dir", "_env", "_name", "_stdin"} {
		if strings.HasSuffix(n, suffix) {
			return false // names where the secret is, not the secret
		}
	}
	return secretName(n)
}

// isFlag reports whether w looks like an option: -x, -name, --name.
func isFlag(w string) bool {
	if len(w) < 2 || w[0] != '-' {
		return false
	}
	if w[1] == '-' {
		return len(w) > 2 && isLetter(w[2])
	}
	return isLetter(w[1])
}

func isLetter(c byte) bool { return 'a' <= c|0x20 && c|0x20 <= 'z' }

// isEnvFlag reports whether flag name takes a docker-style NAME=VALUE.
func isEnvFlag(name string) bool {
	switch name {
	case "-e", "--env", "--build-arg", "--setenv":
		return true
	}
	return false
}

// isAttachedEnv reports whether name is -eNAME (docker -eNAME=VALUE). The
// upper-case first letter tells it apart from single-dash long flags such as
// -encoding.
func isAttachedEnv(name string) bool {
	return len(name) > 2 && name[0] == '-' && name[1] == 'e' &&
		('A' <= name[2] && name[2] <= 'Z' || name[2] == '_')
}

// isScriptFlag reports whether the word after w is a script: -c (also
// combined as -lc, -ec, -xec), cmd's /c and /k, PowerShell's -Command, and
// --eval.
func isScriptFlag(w string) bool {
	switch w {
	case "-c", "/c", "/C", "/k", "/K", "-Command", "-command", "--command", "--eval":
		return true
	}
	if len(w) >= 3 && len(w) <= 4 && w[0] == '-' && w[len(w)-1] == 'c' {
		for i := 1; i < len(w); i++ {
			if w[i] < 'a' || w[i] > 'z' {
				return false
			}
		}
		return true
	}
	return false
}

// isAuthScheme reports whether w is an HTTP authorization scheme, which
// stands before the secret, not in its place.
func isAuthScheme(w string) bool {
	for _, s := range []string{"bearer", "basic", "token", "digest"} {
		if strings.EqualFold(w, s) {
			return true
		}
	}
	return false
}

var (
	envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	varRefRE  = regexp.MustCompile(`^\$(?:[A-Za-z_][A-Za-z0-9_]*|\{[A-Za-z_][A-Za-z0-9_]*\})$`)
	assignRE  = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_.\-\[\]]*$`)
	headerRE  = regexp.MustCompile(`(?s)^([A-Za-z0-9_\-]+):([ \t]*)(.*)$`)
)

func isEnvName(s string) bool { return envNameRE.MatchString(s) }
func isVarRef(s string) bool  { return varRefRE.MatchString(s) }
func isHeaderName(s string) bool {
	return s != "" && strings.Trim(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-") == ""
}

// assignment splits NAME=VALUE.
func assignment(a string) (name, value string, ok bool) {
	name, value, ok = strings.Cut(a, "=")
	if !ok || !assignRE.MatchString(name) {
		return "", "", false
	}
	return name, value, true
}

// header splits an HTTP header "Name: value".
func header(a string) (name, space, value string, ok bool) {
	if strings.IndexByte(a, ':') < 0 {
		return "", "", "", false
	}
	m := headerRE.FindStringSubmatch(a)
	if m == nil {
		return "", "", "", false
	}
	return m[1], m[2], m[3], true
}

// unquote takes one pair of quotes off a word that is quoted as a whole
// ('…' or "…"), or the opening quote off a word whose quote is never
// closed (a script cut short). Otherwise open is "" and inner is s.
func unquote(s string) (open, inner, closing string) {
	if s == "" || (s[0] != '\'' && s[0] != '"') {
		return "", s, ""
	}
	q := s[0]
	end := -1
	for i := 1; i < len(s); i++ {
		if s[i] == '\\' && q == '"' {
			i++
			continue
		}
		if s[i] == q {
			end = i
			break
		}
	}
	switch end {
	case -1:
		return s[:1], s[1:], ""
	case len(s) - 1:
		return s[:1], s[1 : len(s)-1], s[len(s)-1:]
	}
	return "", s, ""
}

var privateKeyRE = regexp.MustCompile(`(?s)(-----BEGIN [A-Z0-9 ]*PRIVATE KEY[A-Z ]*-----).*?(-----END [A-Z0-9 ]*PRIVATE KEY[A-Z ]*-----|$)`)

// privateKeys redacts PEM private key blocks.
func privateKeys(a string) string {
	if !strings.Contains(a, "PRIVATE KEY") {
		return a
	}
	return privateKeyRE.ReplaceAllString(a, "${1}"+Marker+"${2}")
}

var (
	userinfoRE = regexp.MustCompile(`([A-Za-z][A-Za-z0-9+.\-]*://)([^\s/?#@:]*):([^\s/?#]*)@`)
	pairRE     = regexp.MustCompile(`(^|[?&;,#'"\s])([A-Za-z0-9_.\-\[\]]+)=([^&;,#'"\s]*)`)
)

// scan redacts secrets inside one word: URL passwords, secret NAME=VALUE
// pairs (query strings, connection strings) and token shapes.
func scan(a string) string {
	if strings.Contains(a, "://") {
		a = userinfoRE.ReplaceAllStringFunc(a, func(m string) string {
			sub := userinfoRE.FindStringSubmatch(m)
			if sub[3] == "" {
				return m
			}
			return sub[1] + sub[2] + ":" + Marker + "@"
		})
	}
	if strings.IndexByte(a, '=') >= 0 {
		a = pairs(a)
	}
	return shapes(a)
}

// pairs redacts the values of NAME=VALUE pairs with a secret name.
func pairs(a string) string {
	ms := pairRE.FindAllStringSubmatchIndex(a, -1)
	if ms == nil {
		return a
	}
	var b strings.Builder
	last := 0
	for _, m := range ms {
		name, vs, ve := a[m[4]:m[5]], m[6], m[7]
		if ve == vs || !secretName(name) || isVarRef(a[vs:ve]) {
			continue
		}
		b.WriteString(a[last:vs])
		b.WriteString(Marker)
		last = ve
	}
	b.WriteString(a[last:])
	return b.String()
}

// tokenShapes match well-known token formats. Group 1 of re is the part
// that is kept (the type prefix); the rest of the match is the secret. re
// only runs when s contains hint, a lower-case word looked for ignoring
// case, which is much cheaper than running every re.
var tokenShapes = []struct {
	hint string
	re   *regexp.Regexp
}{
	{"gh", regexp.MustCompile(`(gh[pousr]_)[A-Za-z0-9_]{16,}`)},
	{"github_pat_", regexp.MustCompile(`(github_pat_)[A-Za-z0-9_]{16,}`)},
	{"glpat-", regexp.MustCompile(`(glpat-)[A-Za-z0-9_\-]{16,}`)},
	{"npm_", regexp.MustCompile(`(npm_)[A-Za-z0-9]{30,}`)},
	{"hf_", regexp.MustCompile(`(hf_)[A-Za-z0-9]{30,}`)},
	{"sk-", regexp.MustCompile(`((?:^|[^A-Za-z0-9])sk-)[A-Za-z0-9_\-]{20,}`)},
	{"k_", regexp.MustCompile(`([sr]k_(?:live|test)_)[A-Za-z0-9]{16,}`)},
	{"xox", regexp.MustCompile(`(xox[abposre]-)[A-Za-z0-9\-]{10,}`)},
	{"xapp-", regexp.MustCompile(`(xapp-)[A-Za-z0-9\-]{10,}`)},
	{"akia", regexp.MustCompile(`(AKIA)[0-9A-Z]{16}`)},
	{"asia", regexp.MustCompile(`(ASIA)[0-9A-Z]{16}`)},
	{"aiza", regexp.MustCompile(`(AIza)[0-9A-Za-z_\-]{30,}`)},
	{"eyj", regexp.MustCompile(`(eyJ)[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]*`)},
	{"bearer", regexp.MustCompile(`(?i)(\bbearer(?:\s+|%20|\+))[^\s'"&;,#]+`)},
}

// shapes redacts well-known token formats anywhere in s.
func shapes(s string) string {
	for _, t := range tokenShapes {
		if containsFold(s, t.hint) {
			s = t.re.ReplaceAllString(s, "${1}"+Marker)
		}
	}
	return s
}

// containsFold reports whether s contains the lower-case ASCII word sub,
// ignoring ASCII case.
func containsFold(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i]|0x20 == sub[0] && strings.EqualFold(s[i:i+len(sub)], sub) {
			return true
		}
	}
	return false
}

// span is one word or separator of a script: s[start:end].
type span struct {
	start, end int
	sep        bool
}

// tokenize splits a shell script into words and separators (; & | ( ) < >
// and newlines), respecting quotes and backslashes. A quote that is never
// closed runs to the end.
func tokenize(s string) []span {
	var out []span
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == '\n':
			out = append(out, span{i, i + 1, true})
			i++
		case isBlank(c):
			i++
		case isSepChar(c):
			j := i
			for j < len(s) && isSepChar(s[j]) {
				j++
			}
			out = append(out, span{i, j, true})
			i = j
		default:
			j := scanWord(s, i)
			out = append(out, span{i, j, false})
			i = j
		}
	}
	return out
}

// scanWord returns the end of the word starting at s[i].
func scanWord(s string, i int) int {
	for i < len(s) {
		switch c := s[i]; {
		case c == '\\':
			i += 2
		case c == '\'':
			k := strings.IndexByte(s[i+1:], '\'')
			if k < 0 {
				return len(s)
			}
			i += k + 2
		case c == '"':
			j := i + 1
			for j < len(s) && s[j] != '"' {
				if s[j] == '\\' {
					j++
				}
				j++
			}
			if j >= len(s) {
				return len(s)
			}
			i = j + 1
		case c == '\n' || isBlank(c) || isSepChar(c):
			return i
		default:
			i++
		}
	}
	return len(s)
}

func isBlank(c byte) bool { return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f' }

func isSepChar(c byte) bool {
	switch c {
	case ';', '&', '|', '(', ')', '<', '>':
		return true
	}
	return false
}
