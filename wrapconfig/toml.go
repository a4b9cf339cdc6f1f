package wrapconfig

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/pelletier/go-toml/v2"
	"github.com/pelletier/go-toml/v2/unstable"
)

// decodeTOML reads a whole TOML document; a key twice, or a table
// defined twice, is an error.
func decodeTOML(data []byte) (any, error) {
	var doc map[string]any
	if err := toml.Unmarshal(data, &doc); err != nil {
		return nil, err
	}
	return doc, nil
}

// span is where a token is: data[from:to].
type span struct{ from, to int }

// tomlValue is where a server's command or args is written.
type tomlValue struct {
	keyStart int  // the key's first byte
	lastKey  int  // the first byte of the key's last part: "command" in mcp_servers.docs.command
	inline   bool // a key of an inline table
	span          // the value: a string, or an array from "[" to "]"
	array    bool
	items    []span // an array's strings, in order
	odd      bool   // an array holding something other than strings and comments
}

// tomlServerAt is where a server's command and args are written.
type tomlServerAt struct{ command, args *tomlValue }

// tomlValues finds every mcp_servers.NAME.command and .args in the file,
// however written: in a [mcp_servers.NAME] table, with dotted keys, in
// inline tables.
func tomlValues(data []byte) (map[string]*tomlServerAt, error) {
	found := map[string]*tomlServerAt{}
	var visit func(prefix []string, kv *unstable.Node, inline bool)
	visit = func(prefix []string, kv *unstable.Node, inline bool) {
		path := slices.Clone(prefix)
		var parts []*unstable.Node
		for it := kv.Key(); it.Next(); {
			parts = append(parts, it.Node())
			path = append(path, string(it.Node().Data))
		}
		v := kv.Value()
		if v.Kind == unstable.InlineTable {
			for it := v.Children(); it.Next(); {
				visit(path, it.Node(), true)
			}
			return
		}
		if len(path) != 3 || path[0] != "mcp_servers" || path[2] != "command" && path[2] != "args" {
			return
		}
		last := parts[len(parts)-1]
		at := &tomlValue{keyStart: int(parts[0].Raw.Offset), lastKey: int(last.Raw.Offset), inline: inline}
		switch v.Kind {
		case unstable.String:
			at.span = span{int(v.Raw.Offset), int(v.Raw.Offset + v.Raw.Length)}
		case unstable.Array:
			tomlArray(data, int(last.Raw.Offset+last.Raw.Length), v, at)
		default:
			at = nil // neither a string nor an array: the rules refuse it
		}
		srv := found[path[1]]
		if srv == nil {
			srv = &tomlServerAt{}
			found[path[1]] = srv
		}
		if path[2] == "command" {
			srv.command = at
		} else {
			srv.args = at
		}
	}
	p := unstable.Parser{KeepComments: true}
	p.Reset(data)
	var table []string
	inArray := false // keys under [[…]] are never a server's
	for p.NextExpression() {
		e := p.Expression()
		switch e.Kind {
		case unstable.Table, unstable.ArrayTable:
			table = table[:0]
			for it := e.Key(); it.Next(); {
				table = append(table, string(it.Node().Data))
			}
			inArray = e.Kind == unstable.ArrayTable
		case unstable.KeyValue:
			if !inArray {
				visit(table, e, false)
			}
		}
	}
	return found, p.Error()
}

// tomlArray finds the bytes of the array v, whose key ends at keyEnd, and
// of its strings; where it cannot, the array is odd.
func tomlArray(data []byte, keyEnd int, v *unstable.Node, at *tomlValue) {
	at.array, at.odd = true, true
	i := skipSpace(data, keyEnd)
	if i >= len(data) || data[i] != '=' {
		return
	}
	i = skipSpace(data, i+1)
	if i >= len(data) || data[i] != '[' {
		return
	}
	at.from = i
	end := i + 1
	for it := v.Children(); it.Next(); {
		n := it.Node()
		switch n.Kind {
		case unstable.Comment:
		case unstable.String:
			s := span{int(n.Raw.Offset), int(n.Raw.Offset + n.Raw.Length)}
			at.items = append(at.items, s)
			end = s.to
		default:
			return
		}
	}
	for end < len(data) {
		switch data[end] {
		case ' ', '\t', '\r', '\n', ',':
			end++
		case '#':
			_, end = lineEnd(data, end)
		case ']':
			at.to, at.odd = end+1, false
			return
		default:
			return
		}
	}
}

func skipSpace(data []byte, i int) int {
	for i < len(data) && (data[i] == ' ' || data[i] == '\t') {
		i++
	}
	return i
}

// rewriteTOML applies r to every server of a Codex configuration and
// edits the command and args of those it changes in place.
func rewriteTOML(data []byte, r rule) ([]byte, []Change, error) {
	doc, err := decodeTOML(data)
	if err != nil {
		return nil, nil, fmt.Errorf("not a TOML configuration: %w", err)
	}
	raw, has := doc.(map[string]any)["mcp_servers"]
	if !has {
		return data, nil, nil
	}
	servers, ok := raw.(map[string]any)
	if !ok {
		return nil, nil, errors.New("mcp_servers is not a table")
	}
	var targets []target
	for _, name := range slices.Sorted(maps.Keys(servers)) {
		m, ok := servers[name].(map[string]any)
		if !ok {
			continue // not a server entry: left as it is
		}
		s := serverOf(m, "command")
		p, err := r(name, s)
		if err != nil {
			return nil, nil, fmt.Errorf("mcp_servers.%s: %w", name, err)
		}
		if p != nil {
			targets = append(targets, target{where: "mcp_servers." + name, path: []string{"mcp_servers", name}, s: s, plan: p})
		}
	}
	if len(targets) == 0 {
		return data, nil, nil
	}
	found, err := tomlValues(data)
	if err != nil {
		return nil, nil, err
	}
	var edits []edit
	for i, t := range targets {
		e, empty, err := tomlEdits(data, found[t.path[1]], t)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", t.where, err)
		}
		edits = append(edits, e...)
		targets[i].emptyArgs = empty
	}
	out, err := splice(data, edits)
	if err != nil {
		return nil, nil, err
	}
	if err := verify(decodeTOML, data, out, targets); err != nil {
		return nil, nil, err
	}
	// Changes in the order of the file.
	slices.SortFunc(targets, func(a, b target) int {
		return found[a.path[1]].command.from - found[b.path[1]].command.from
	})
	changes := make([]Change, len(targets))
	for i, t := range targets {
		changes[i] = Change{Where: t.where, Session: t.plan.session}
	}
	return out, changes, nil
}

// tomlEdits are the edits that make one server's command and args what
// t plans. Strings the file already holds (the command that becomes an
// argument, the argument that becomes the command) keep their bytes.
// emptyArgs says an args key stays when the plan has no args: args = [],
// where its line holds a comment too.
func tomlEdits(data []byte, at *tomlServerAt, t target) (edits []edit, emptyArgs bool, err error) {
	if at == nil || at.command == nil || at.command.array {
		return nil, false, errors.New("command is not a string wrap-config can find; change it by hand")
	}
	c, a := at.command, at.args
	if a == nil && t.s.hasArgs || a != nil && (!a.array || a.odd || len(a.items) != len(t.s.args)) {
		return nil, false, errors.New("args is not a list wrap-config can find; change it by hand")
	}
	for _, s := range append([]string{t.plan.command}, t.plan.args...) {
		if !utf8.ValidString(s) {
			return nil, false, fmt.Errorf("%q is not UTF-8", s)
		}
	}
	// The strings whose bytes go: the command, and the arguments before
	// those that stay.
	keep := len(t.s.args) - t.plan.tail
	reuse := map[string]string{}
	for _, s := range append([]span{c.span}, itemsBefore(a, keep)...) {
		v, err := decodeTOMLString(data[s.from:s.to])
		if err == nil && reuse[v] == "" {
			reuse[v] = string(data[s.from:s.to])
		}
	}
	text := func(s string) string {
		if r, ok := reuse[s]; ok {
			return r
		}
		return tomlString(s)
	}
	list := func(l []string) string {
		var b strings.Builder
		for i, s := range l {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(text(s))
		}
		return b.String()
	}

	edits = []edit{{c.from, c.to, text(t.plan.command)}}
	newArgs := t.plan.args
	switch {
	case a == nil && len(newArgs) == 0:
	case a == nil:
		// A line after the command's, or a key after it in its inline
		// table, with the same dotted key before "args".
		key := string(data[c.keyStart:c.lastKey]) + "args = [" + list(newArgs) + "]"
		if c.inline {
			edits = append(edits, edit{c.to, c.to, ", " + key})
			break
		}
		start := lineStart(data, c.keyStart)
		end, next := lineEnd(data, c.to)
		line := string(data[start:c.keyStart]) + key
		if next > end {
			edits = append(edits, edit{next, next, line + string(data[end:next])})
		} else {
			edits = append(edits, edit{len(data), len(data), "\n" + line})
		}
	case len(newArgs) == 0:
		if commentIn(data, a.span, a.items, len(a.items), true) {
			return nil, false, errors.New("args has comments inside its list; move them out of it, or change the server by hand")
		}
		e := removeTOMLKey(data, a)
		edits, emptyArgs = append(edits, e), e.text != ""
	case t.plan.tail == 0:
		if commentIn(data, a.span, a.items, len(a.items), true) {
			return nil, false, errors.New("args has comments inside its list; move them out of it, or change the server by hand")
		}
		edits = append(edits, edit{a.from, a.to, "[" + list(newArgs) + "]"})
	default:
		// The arguments that stay keep their bytes; those before them are
		// replaced, up to the first that stays.
		if commentIn(data, a.span, a.items, keep, false) {
			return nil, false, errors.New("args has comments among the mcptrace exec arguments; remove them, or change the server by hand")
		}
		head := list(newArgs[:len(newArgs)-t.plan.tail])
		if head != "" {
			head += ", "
		}
		edits = append(edits, edit{a.items[0].from, a.items[keep].from, head})
	}
	return edits, emptyArgs, nil
}

// itemsBefore is the first n items of a list, none when there is no list.
func itemsBefore(a *tomlValue, n int) []span {
	if a == nil {
		return nil
	}
	return a.items[:n]
}

// removeTOMLKey takes the args key out: its whole line when it has one to
// itself, else with the comma before or after it in its inline table;
// where neither fits, its value becomes [].
func removeTOMLKey(data []byte, a *tomlValue) edit {
	if !a.inline {
		start := lineStart(data, a.keyStart)
		end, next := lineEnd(data, a.to)
		switch {
		case !blank(data[start:a.keyStart]) || !blank(data[a.to:end]):
		case next > end:
			return edit{start, next, ""}
		case start > 0: // the last line, without a newline: take the one before
			from := start - 1
			if from > 0 && data[from-1] == '\r' {
				from--
			}
			return edit{from, len(data), ""}
		}
		return edit{a.from, a.to, "[]"}
	}
	i := a.keyStart
	for i > 0 && (data[i-1] == ' ' || data[i-1] == '\t') {
		i--
	}
	if i > 0 && data[i-1] == ',' {
		return edit{i - 1, a.to, ""}
	}
	j := skipSpace(data, a.to)
	if j < len(data) && data[j] == ',' {
		return edit{a.keyStart, skipSpace(data, j+1), ""}
	}
	return edit{a.from, a.to, "[]"}
}

// commentIn reports whether a list has a comment before its item n: in
// the whole list, brackets included, when whole.
func commentIn(data []byte, list span, items []span, n int, whole bool) bool {
	from := list.from + 1
	if !whole && len(items) > 0 {
		from = items[0].from
	}
	to := list.to
	if !whole && n < len(items) {
		to = items[n].from
	}
	for _, it := range items {
		if it.to <= from || it.from >= to {
			continue
		}
		if strings.Contains(string(data[from:it.from]), "#") {
			return true
		}
		from = it.to
	}
	return strings.Contains(string(data[from:to]), "#")
}

// decodeTOMLString is the value of one TOML string token.
func decodeTOMLString(tok []byte) (string, error) {
	var v struct{ S string }
	if err := toml.Unmarshal(append([]byte("S = "), tok...), &v); err != nil {
		return "", err
	}
	return v.S, nil
}

// tomlString writes s as a TOML basic string: "…", with \ escapes for
// the quote, the backslash and control characters.
func tomlString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\b':
			b.WriteString(`\b`)
		case '\t':
			b.WriteString(`\t`)
		case '\n':
			b.WriteString(`\n`)
		case '\f':
			b.WriteString(`\f`)
		case '\r':
			b.WriteString(`\r`)
		default:
			if r < 0x20 || r == 0x7f {
				fmt.Fprintf(&b, `\u%04X`, r)
			} else {
				b.WriteRune(r)
			}
		}
	}
	b.WriteByte('"')
	return b.String()
}
