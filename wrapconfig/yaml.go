package wrapconfig

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
)

// parseYAML reads a file holding one YAML document whose top is a
// mapping, and the values it holds (a key twice is an error).
func parseYAML(data []byte) (*yaml.Node, any, error) {
	if !utf8.Valid(data) {
		return nil, nil, errors.New("not UTF-8")
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if err == io.EOF {
			return nil, nil, errors.New("no YAML document")
		}
		return nil, nil, err
	}
	var more yaml.Node
	if err := dec.Decode(&more); err != io.EOF {
		if err == nil {
			return nil, nil, errors.New("more than one YAML document")
		}
		return nil, nil, err
	}
	var v any
	if err := doc.Decode(&v); err != nil {
		return nil, nil, err
	}
	if len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return nil, nil, errors.New("not a YAML mapping")
	}
	return doc.Content[0], v, nil
}

func decodeYAML(data []byte) (any, error) {
	_, v, err := parseYAML(data)
	return v, err
}

// pair is the value of key in a mapping node, written there (not merged
// in from elsewhere), with its key.
func pair(m *yaml.Node, key string) (k, v *yaml.Node) {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if k := m.Content[i]; k.Kind == yaml.ScalarNode && k.Tag != "!!merge" && k.Value == key {
			return k, m.Content[i+1]
		}
	}
	return nil, nil
}

// hasKey reports whether the decoded mapping v has the key k.
func hasKey(v any, k string) bool {
	switch m := v.(type) {
	case map[string]any:
		_, has := m[k]
		return has
	case map[any]any:
		_, has := m[k]
		return has
	}
	return false
}

// rewriteYAML applies r to every extension of a goose configuration and
// edits the cmd and args of those it changes in place.
func rewriteYAML(data []byte, r rule) ([]byte, []Change, error) {
	root, doc, err := parseYAML(data)
	if err != nil {
		return nil, nil, fmt.Errorf("not a YAML configuration: %w", err)
	}
	_, ext := pair(root, "extensions")
	if ext == nil {
		if hasKey(doc, "extensions") {
			return nil, nil, errors.New("extensions comes from a merge key (<<); write it out in the file")
		}
		return data, nil, nil
	}
	exts := ext
	if ext.Kind == yaml.AliasNode {
		exts = ext.Alias
	}
	if exts.Kind == yaml.ScalarNode && exts.Tag == "!!null" {
		return data, nil, nil
	}
	if exts.Kind != yaml.MappingNode {
		return nil, nil, errors.New("extensions is not a mapping")
	}
	t := newYAMLText(data)
	var targets []target
	var edits []edit
	for i := 0; i+1 < len(exts.Content); i += 2 {
		k, v := exts.Content[i], exts.Content[i+1]
		if k.Kind != yaml.ScalarNode || k.Tag == "!!merge" {
			continue
		}
		var m map[string]any
		if v.Decode(&m) != nil || m == nil {
			continue // not an extension entry: left as it is
		}
		where := "extensions." + k.Value
		s := serverOf(m, "cmd")
		p, err := r(k.Value, s)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", where, err)
		}
		if p == nil {
			continue
		}
		if ext.Kind == yaml.AliasNode {
			return nil, nil, fmt.Errorf("%s: extensions is an alias (*%s); write the extensions out in the file, or change the extension by hand", where, ext.Value)
		}
		e, err := t.edits(v, s, p)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", where, err)
		}
		edits = append(edits, e...)
		targets = append(targets, target{where: where, path: []string{"extensions", k.Value}, s: s, plan: p, emptyArgs: true})
	}
	if len(targets) == 0 {
		return data, nil, nil
	}
	out, err := splice(data, edits)
	if err != nil {
		return nil, nil, err
	}
	if err := verify(decodeYAML, data, out, targets); err != nil {
		return nil, nil, err
	}
	changes := make([]Change, len(targets))
	for i, t := range targets {
		changes[i] = Change{Where: t.where, Session: t.plan.session}
	}
	return out, changes, nil
}

// yamlText finds nodes' bytes by their line and column, counted as the
// YAML parser counts them: lines end at \r\n, \r, \n, U+0085, U+2028 and
// U+2029; columns are characters; a byte order mark at the start is not
// in line 1.
type yamlText struct {
	data  []byte
	lines []int // where each line starts
}

func newYAMLText(data []byte) *yamlText {
	t := &yamlText{data: data, lines: []int{0}}
	if bytes.HasPrefix(data, []byte("\ufeff")) {
		t.lines[0] = 3
	}
	for i := t.lines[0]; i < len(data); {
		r, n := utf8.DecodeRune(data[i:])
		switch {
		case r == '\r' && i+1 < len(data) && data[i+1] == '\n':
			n = 2
			fallthrough
		case r == '\r', r == '\n', r == '\u0085', r == '\u2028', r == '\u2029':
			t.lines = append(t.lines, i+n)
		}
		i += n
	}
	return t
}

// offset is where the node n starts in the file.
func (t *yamlText) offset(n *yaml.Node) (int, bool) {
	if n.Line < 1 || n.Line > len(t.lines) || n.Column < 1 {
		return 0, false
	}
	i := t.lines[n.Line-1]
	for c := 1; c < n.Column; c++ {
		if i >= len(t.data) {
			return 0, false
		}
		_, size := utf8.DecodeRune(t.data[i:])
		i += size
	}
	return i, i <= len(t.data)
}

// scalar is where the string node n is written, when it is written on one
// line, plainly or quoted, with no anchor, alias or tag.
func (t *yamlText) scalar(n *yaml.Node) (span, error) {
	switch {
	case n.Kind == yaml.AliasNode:
		return span{}, fmt.Errorf("is an alias (*%s)", n.Value)
	case n.Kind != yaml.ScalarNode:
		return span{}, errors.New("is not a string")
	case n.Anchor != "":
		return span{}, fmt.Errorf("has an anchor (&%s)", n.Anchor)
	case n.Style&yaml.TaggedStyle != 0:
		return span{}, fmt.Errorf("has a tag (%s)", n.Tag)
	case n.Style&(yaml.LiteralStyle|yaml.FoldedStyle) != 0:
		return span{}, errors.New("is a block scalar (| or >)")
	}
	from, ok := t.offset(n)
	if !ok {
		return span{}, errors.New("is not where the parser said")
	}
	d := t.data
	switch {
	case n.Style&yaml.DoubleQuotedStyle != 0:
		for i := from + 1; from < len(d) && d[from] == '"' && i < len(d); i++ {
			switch d[i] {
			case '\\':
				i++
				if i < len(d) && (d[i] == '\r' || d[i] == '\n') {
					i = len(d)
				}
			case '"':
				return span{from, i + 1}, nil
			case '\r', '\n':
				i = len(d)
			}
		}
	case n.Style&yaml.SingleQuotedStyle != 0:
		for i := from + 1; from < len(d) && d[from] == '\'' && i < len(d); i++ {
			switch d[i] {
			case '\'':
				if i+1 < len(d) && d[i+1] == '\'' {
					i++
					continue
				}
				return span{from, i + 1}, nil
			case '\r', '\n':
				i = len(d)
			}
		}
	default:
		// A plain scalar is its value, unless it goes on to further lines.
		to := from + len(n.Value)
		if n.Value != "" && to <= len(d) && string(d[from:to]) == n.Value {
			return span{from, to}, nil
		}
	}
	return span{}, errors.New("is not a string on one line")
}

// edits are the edits that make the extension v's cmd and args what p
// plans. Quoted strings the file already holds (the cmd that becomes an
// argument, the argument that becomes the cmd) keep their bytes.
func (t *yamlText) edits(v *yaml.Node, s server, p *plan) ([]edit, error) {
	if v.Kind == yaml.AliasNode {
		return nil, fmt.Errorf("is an alias (*%s); write it out in the file, or change it by hand", v.Value)
	}
	_, c := pair(v, "cmd")
	ak, a := pair(v, "args")
	if c == nil {
		return nil, errors.New("cmd comes from a merge key (<<); write cmd and args in the extension itself")
	}
	if a == nil {
		if s.hasArgs {
			return nil, errors.New("args comes from a merge key (<<); write cmd and args in the extension itself")
		}
		return nil, errors.New("has no args, which goose needs; add args: [] after its cmd")
	}
	cmd, err := t.scalar(c)
	if err != nil {
		return nil, fmt.Errorf("cmd %v; write it as a one-line string, or change the extension by hand", err)
	}
	switch {
	case a.Kind == yaml.AliasNode:
		return nil, fmt.Errorf("args is an alias (*%s); write the list out, or change the extension by hand", a.Value)
	case a.Kind != yaml.SequenceNode:
		return nil, errors.New("args is not a list of strings")
	case a.Anchor != "":
		return nil, fmt.Errorf("args has an anchor (&%s); take it out, or change the extension by hand", a.Anchor)
	case a.Style&yaml.TaggedStyle != 0:
		return nil, fmt.Errorf("args has a tag (%s); take it out, or change the extension by hand", a.Tag)
	}
	items := make([]span, len(a.Content))
	for i, n := range a.Content {
		if items[i], err = t.scalar(n); err != nil {
			return nil, fmt.Errorf("args item %d %v; write it as a one-line string, or change the extension by hand", i+1, err)
		}
	}
	list, ok := t.offset(a)
	flow := a.Style&yaml.FlowStyle != 0
	if !ok || list >= len(t.data) || flow && t.data[list] != '[' || !flow && (len(items) == 0 || t.data[list] != '-') {
		return nil, errors.New("args is not where the parser said; change the extension by hand")
	}

	// Quoted strings keep their bytes where they go; plain ones are
	// written again for where they go (a flow list, a block one).
	keep := len(s.args) - p.tail
	reuse := map[string]string{}
	for i, sp := range append([]span{cmd}, items[:keep]...) {
		n := c
		if i > 0 {
			n = a.Content[i-1]
		}
		if n.Style&(yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle) != 0 && reuse[n.Value] == "" {
			reuse[n.Value] = string(t.data[sp.from:sp.to])
		}
	}
	text := func(s string, flow bool) (string, error) {
		if r, ok := reuse[s]; ok {
			return r, nil
		}
		return yamlScalar(s, flow)
	}
	cmdText, err := text(p.command, v.Style&yaml.FlowStyle != 0)
	if err != nil {
		return nil, err
	}
	edits := []edit{{cmd.from, cmd.to, cmdText}}
	head := p.args[:len(p.args)-p.tail]
	var texts []string
	for _, s := range head {
		x, err := text(s, flow)
		if err != nil {
			return nil, err
		}
		texts = append(texts, x)
	}

	if flow {
		end, ok := flowEnd(t.data, list, items)
		if !ok {
			return nil, errors.New("args is not a list wrap-config can edit; change the extension by hand")
		}
		switch {
		case p.tail > 0:
			if commentIn(t.data, span{list, end}, items, keep, false) {
				return nil, errors.New("args has comments among the mcptrace exec arguments; remove them, or change the extension by hand")
			}
			h := strings.Join(texts, ", ")
			if h != "" {
				h += ", "
			}
			return append(edits, edit{items[0].from, items[keep].from, h}), nil
		case commentIn(t.data, span{list, end}, items, len(items), true):
			return nil, errors.New("args has comments inside its list; move them out of it, or change the extension by hand")
		}
		return append(edits, edit{list, end, "[" + strings.Join(texts, ", ") + "]"}), nil
	}

	// A block list: one "- item" line each, at the first item's indentation.
	dashes := make([]int, len(items))
	for i, it := range items {
		j := it.from
		for j > 0 && strings.IndexByte(" \t\r\n", t.data[j-1]) >= 0 {
			j--
		}
		if j == 0 || t.data[j-1] != '-' {
			return nil, errors.New("args is not a list wrap-config can edit; change the extension by hand")
		}
		dashes[i] = j - 1
	}
	if blockCommentIn(t.data, dashes, items, keep) {
		return nil, errors.New("args has comments among the mcptrace exec arguments; remove them, or change the extension by hand")
	}
	start := lineStart(t.data, dashes[0])
	indent := string(t.data[start:dashes[0]])
	if !blank(t.data[start:dashes[0]]) {
		return nil, errors.New("args is not a list wrap-config can edit; change the extension by hand")
	}
	if p.tail > 0 {
		end, next := lineEnd(t.data, dashes[0])
		nl := string(t.data[end:next])
		if nl == "" {
			nl = "\n"
		}
		var h strings.Builder
		for _, x := range texts {
			h.WriteString("- " + x + nl + indent)
		}
		return append(edits, edit{dashes[0], dashes[keep], h.String()}), nil
	}
	// No argument left: args: [] on the key's line.
	if blockCommentIn(t.data, dashes, items, len(items)) {
		return nil, errors.New("args has comments inside its list; move them out of it, or change the extension by hand")
	}
	key, err := t.scalar(ak)
	if err != nil {
		return nil, fmt.Errorf("the args key %v; change the extension by hand", err)
	}
	colon := skipSpace(t.data, key.to)
	if colon >= len(t.data) || t.data[colon] != ':' || len(bytes.Trim(t.data[colon+1:dashes[0]], " \t\r\n")) > 0 {
		return nil, errors.New("args is not a list wrap-config can edit; change the extension by hand")
	}
	return append(edits, edit{colon + 1, items[len(items)-1].to, " []"}), nil
}

// flowEnd is where the flow list starting at list ends, after its "]".
func flowEnd(data []byte, list int, items []span) (int, bool) {
	i := list + 1
	if len(items) > 0 {
		i = items[len(items)-1].to
	}
	for i < len(data) {
		switch data[i] {
		case ' ', '\t', '\r', '\n', ',':
			i++
		case '#':
			_, i = lineEnd(data, i)
		case ']':
			return i + 1, true
		default:
			return 0, false
		}
	}
	return 0, false
}

// blockCommentIn reports whether a block list has a comment between its
// items before item n (and before the end of the last item, for all).
func blockCommentIn(data []byte, dashes []int, items []span, n int) bool {
	for i := 1; i <= n && i < len(items); i++ {
		if bytes.IndexByte(data[items[i-1].to:dashes[i]], '#') >= 0 {
			return true
		}
	}
	return false
}

// yamlScalar writes s as YAML: plain where YAML reads it back as the
// same string in that place (a flow list or mapping, or a block one),
// else double-quoted. The YAML encoder decides both.
func yamlScalar(s string, flow bool) (string, error) {
	if !utf8.ValidString(s) {
		return "", fmt.Errorf("%q is not UTF-8", s)
	}
	plain := !strings.ContainsAny(s, "\r\n")
	type probe struct {
		v    any
		want string
	}
	probes := []probe{ // in a block list, in a block mapping
		{[]string{s}, "- " + s + "\n"},
		{map[string]string{"a": s}, "a: " + s + "\n"},
	}
	if flow { // in a flow list, in a flow mapping
		probes = []probe{
			{struct {
				A []string `yaml:"a,flow"`
			}{[]string{s}}, "a: [" + s + "]\n"},
			{struct {
				A map[string]string `yaml:"a,flow"`
			}{map[string]string{"b": s}}, "a: {b: " + s + "}\n"},
		}
	}
	for _, p := range probes {
		if out, err := yaml.Marshal(p.v); err != nil || string(out) != p.want {
			plain = false
		}
	}
	if plain {
		return s, nil
	}
	out, err := yaml.Marshal(&yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Style: yaml.DoubleQuotedStyle, Value: s})
	if err != nil {
		return "", err
	}
	q := strings.TrimSuffix(string(out), "\n")
	if strings.ContainsAny(q, "\r\n") || !strings.HasPrefix(q, `"`) {
		return "", fmt.Errorf("%q cannot be written on one line", s)
	}
	return q, nil
}
