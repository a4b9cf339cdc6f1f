package redact

import "strings"

// JSON arguments: several MCP servers take their configuration as JSON on
// the command line (--config '{"apiKey":"…"}'), and launchers pass whole
// server definitions ({"command":…,"args":[…],"env":{…}}).

// isJSONish reports whether a starts like a JSON object or array (or a
// JavaScript object literal).
func isJSONish(a string) bool {
	t := strings.TrimLeft(a, " \t\n\r")
	return t != "" && (t[0] == '{' || t[0] == '[') && strings.ContainsAny(t, ":\"'")
}

// envKeys name objects whose every value is an environment variable's
// (env-style JSON: {"env": {"GITHUB_TOKEN": "…", "DEBUG": "1"}}): all are
// redacted, as with docker -e.
var envKeys = map[string]bool{
	"env": true, "envs": true, "environment": true, "env_vars": true, "envvars": true,
	"environment_variables": true, "secrets": true,
}

// jframe is one open object or array of a jsonish scan.
type jframe struct {
	obj bool
	// secret: every value inside is redacted (under a secret or env key).
	secret bool
	// wantValue: in an object, after "key": the next token is the value.
	wantValue bool
	key       string
	// r reads an array's strings as the words of an argv ("args").
	r reader
}

// jsonish redacts JSON text, leniently: it takes single quotes and bare
// keys (JavaScript object literals), text cut short by the kernel's argv
// limit, and JSON whose quotes are backslash-escaped (JSON inside a shell
// word: "{\"apiKey\":\"x\"}"). The value of a key that names a secret
// (apiKey, token, password, …) is replaced by Marker, at any depth; an
// object or array under such a key or an env key has every value
// redacted; other string values are redacted as arguments on their own
// (URL passwords, token shapes, KEY=VALUE, nested JSON), and the strings
// of an array as the words of an argv. The text between values is kept
// as it is.
func jsonish(s string, depth int) string {
	if depth > maxDepth {
		return Marker
	}
	if i := strings.IndexByte(s, '"'); i > 0 && s[i-1] == '\\' {
		// JSON inside a shell word: every quote and backslash is escaped.
		un := strings.NewReplacer(`\\`, `\`, `\"`, `"`).Replace(s)
		return strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(jsonScan(un, depth))
	}
	return jsonScan(s, depth)
}

func jsonScan(s string, depth int) string {
	var b strings.Builder
	b.Grow(len(s))
	var stack []*jframe
	top := func() *jframe {
		if len(stack) == 0 {
			return nil
		}
		return stack[len(stack)-1]
	}
	for i := 0; i < len(s); {
		f := top()
		switch c := s[i]; {
		case c == '{' || c == '[':
			nf := &jframe{obj: c == '{', r: reader{depth: depth}}
			if f != nil {
				nf.secret = f.secret || (f.obj && (secretName(f.key) || envKeys[normalize(f.key)]))
				f.wantValue = false
			}
			stack = append(stack, nf)
			b.WriteByte(c)
			i++
		case c == '}' || c == ']':
			if f != nil {
				stack = stack[:len(stack)-1]
			}
			b.WriteByte(c)
			i++
		case c == ':' && f != nil && f.obj:
			f.wantValue = true
			b.WriteByte(c)
			i++
		case c == ',' && f != nil && f.obj:
			f.wantValue, f.key = false, ""
			b.WriteByte(c)
			i++
		case c == '"' || c == '\'':
			end, closed := stringEnd(s, i)
			content := s[i+1 : end]
			closing := ""
			if closed {
				closing = s[end : end+1]
				end++
			}
			switch {
			case f != nil && f.obj && !f.wantValue:
				f.key = content
				b.WriteString(s[i:end])
			default:
				b.WriteByte(c)
				b.WriteString(jsonValue(content, f, depth))
				b.WriteString(closing)
			}
			i = end
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == ',' || c == ':':
			b.WriteByte(c)
			i++
		default:
			j := i
			for j < len(s) && !strings.ContainsRune(",:{}[]\"' \t\n\r", rune(s[j])) {
				j++
			}
			w := s[i:j]
			switch {
			case f != nil && f.obj && !f.wantValue:
				f.key = w
				b.WriteString(w)
			case w == "true" || w == "false" || w == "null":
				b.WriteString(w)
				if f != nil && f.obj {
					f.wantValue = false
				}
			default:
				b.WriteString(jsonValue(w, f, depth))
			}
			i = j
		}
	}
	return b.String()
}

// jsonValue redacts one string or bare value of a jsonish scan in frame f.
func jsonValue(v string, f *jframe, depth int) string {
	switch {
	case f == nil:
		return scan(v)
	case f.obj:
		f.wantValue = false
		if f.secret || secretName(f.key) {
			return secret(v)
		}
		return arg(v, depth+1)
	case f.secret:
		return secret(v)
	}
	return f.r.next(v)
}

// stringEnd returns the index of the quote closing the string opened at
// s[i], or len(s) and false when it is never closed. A backslash escapes
// the next byte.
func stringEnd(s string, i int) (int, bool) {
	q := s[i]
	for j := i + 1; j < len(s); j++ {
		switch s[j] {
		case '\\':
			j++
		case q:
			return j, true
		}
	}
	return len(s), false
}
