package redact

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// String returns argv redacted (see Argv), each argument shell-quoted where
// needed, joined by spaces and shortened to at most max runes, ending in "…"
// when cut. To fit, long absolute paths first lose middle components
// (/home/u/.npm/_npx/…/mcp-server-github) so program names survive; then
// the end is cut, keeping the beginning. max <= 0 means no limit.
//
// Control characters, invalid UTF-8 and other non-printable runes are
// escaped ($'…' quoting), so the result is safe to print on a terminal.
func String(argv []string, max int) string {
	red := Argv(argv)
	parts := make([]string, len(red))
	for i, a := range red {
		parts[i] = quote(a)
	}
	s := strings.Join(parts, " ")
	if max <= 0 {
		return s
	}
	// Squeeze paths, as long as what is left of them is not cut anyway.
	over := utf8.RuneCountInString(s) - max
	pos := 0 // where parts[i] starts
	for i := 0; i < len(parts) && over > 0 && pos < max; i++ {
		short := squeezePath(parts[i], over)
		n, saved := utf8.RuneCountInString(short), utf8.RuneCountInString(parts[i])-utf8.RuneCountInString(short)
		room := max
		if over > saved {
			room-- // the end will be cut: keep space for "…"
		}
		if saved > 0 && pos+n <= room {
			parts[i], over = short, over-saved
		}
		pos += utf8.RuneCountInString(parts[i]) + 1
	}
	return shorten(strings.Join(parts, " "), max)
}

// squeezePath replaces middle components of an absolute path with "…" until
// it is over runes shorter, or only its first and last components are left.
// Anything else is returned as it is.
func squeezePath(p string, over int) string {
	if !strings.HasPrefix(p, "/") || strings.Contains(p, Marker) {
		return p
	}
	comps := strings.Split(p, "/") // "", first, …, last
	last := comps[len(comps)-1]
	if len(comps) < 4 || last == "" {
		return p
	}
	n := utf8.RuneCountInString(p)
	short := p
	for k := len(comps) - 2; k >= 2; k-- {
		short = strings.Join(comps[:k], "/") + "/…/" + last
		if n-utf8.RuneCountInString(short) >= over {
			break
		}
	}
	if utf8.RuneCountInString(short) >= n {
		return p
	}
	return short
}

// quote shell-quotes a if it needs it. Marker needs no quoting by itself.
func quote(a string) string {
	if a == "" {
		return "''"
	}
	plain, printable := true, true
	rest := strings.ReplaceAll(a, Marker, "")
	for i, r := range rest {
		if r == utf8.RuneError {
			if _, size := utf8.DecodeRuneInString(rest[i:]); size == 1 {
				printable = false
				break
			}
		}
		if !unicode.IsPrint(r) {
			printable = false
			break
		}
		if !safeRune(r) {
			plain = false
		}
	}
	switch {
	case !printable:
		return ansiC(a)
	case plain:
		return a
	case strings.Contains(a, "'") && !strings.ContainsAny(a, "\"$`\\!"):
		return `"` + a + `"` // reads better than '…'\''…'
	}
	return "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
}

// safeRune reports whether r needs no quoting in a shell word.
func safeRune(r rune) bool {
	if r < utf8.RuneSelf {
		return 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' ||
			strings.ContainsRune("_@%+=:,./-", r)
	}
	return unicode.IsLetter(r) || unicode.IsDigit(r)
}

// ansiC quotes a as $'…' with every non-printable byte or rune escaped.
func ansiC(a string) string {
	var b strings.Builder
	b.WriteString("$'")
	for i := 0; i < len(a); {
		r, size := utf8.DecodeRuneInString(a[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, a[i])
		case r == '\\' || r == '\'':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\r':
			b.WriteString(`\r`)
		case r < 0x80 && !unicode.IsPrint(r):
			fmt.Fprintf(&b, `\x%02x`, r)
		case !unicode.IsPrint(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteRune(r)
		}
		i += size
	}
	b.WriteByte('\'')
	return b.String()
}

// shorten cuts s to at most max runes, ending in "…". It does not cut
// through a Marker, which would look like part of a value.
func shorten(s string, max int) string {
	if max <= 0 || utf8.RuneCountInString(s) <= max {
		return s
	}
	if max == 1 {
		return "…"
	}
	cut := byteOffset(s, max-1) // the first rune that does not fit
	for start := 0; ; {
		i := strings.Index(s[start:], Marker)
		if i < 0 {
			break
		}
		i += start
		if i >= cut {
			break
		}
		if i+len(Marker) > cut {
			cut = i
			break
		}
		start = i + len(Marker)
	}
	return s[:cut] + "…"
}

// byteOffset returns the byte offset of rune n of s.
func byteOffset(s string, n int) int {
	for i := range s {
		if n == 0 {
			return i
		}
		n--
	}
	return len(s)
}
