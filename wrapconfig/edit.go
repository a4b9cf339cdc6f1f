package wrapconfig

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
)

// An edit replaces data[from:to] with text; the rest of a TOML or YAML
// file keeps its bytes.
type edit struct {
	from, to int
	text     string
}

// splice applies edits, which must not overlap, to a copy of data.
func splice(data []byte, edits []edit) ([]byte, error) {
	slices.SortStableFunc(edits, func(a, b edit) int { return a.from - b.from })
	var out bytes.Buffer
	last := 0
	for _, e := range edits {
		if e.from < last || e.to < e.from || e.to > len(data) {
			return nil, errors.New("two edits of the same bytes")
		}
		out.Write(data[last:e.from])
		out.WriteString(e.text)
		last = e.to
	}
	out.Write(data[last:])
	return out.Bytes(), nil
}

// target is one server a TOML or YAML rewrite changes: where it is, by
// its keys from the top of the document, and what it becomes.
type target struct {
	where string
	path  []string // the server's keys: "mcp_servers", "docs"
	s     server
	plan  *plan
	// emptyArgs: the file says args: [] when the plan has no args (goose
	// needs the key); otherwise it has no args key then.
	emptyArgs bool
}

// verify reads the rewritten file back with decode and checks it against
// what the rewrite meant: each target's command and args as planned, and
// everything else as decode read the original.
func verify(decode func([]byte) (any, error), orig, out []byte, targets []target) error {
	got, err := decode(out)
	if err != nil {
		return fmt.Errorf("the rewritten file does not parse: %w", err)
	}
	want, err := decode(orig)
	if err != nil {
		return err
	}
	for _, t := range targets {
		var args any
		if len(t.plan.args) > 0 || t.emptyArgs {
			l := make([]any, len(t.plan.args))
			for i, a := range t.plan.args {
				l[i] = a
			}
			args = l
		}
		srv, _ := lookup(got, t.path).(map[string]any)
		if srv == nil || !sameValue(srv[t.s.cmdKey], t.plan.command) || !sameValue(srv[t.s.argsKey], args) {
			return fmt.Errorf("%s: the rewritten file does not read back with the command and args intended", t.where)
		}
		w, _ := lookup(want, t.path).(map[string]any)
		if w == nil {
			return fmt.Errorf("%s: not found in the file as it was", t.where)
		}
		w[t.s.cmdKey] = t.plan.command
		if args == nil {
			delete(w, t.s.argsKey)
		} else {
			w[t.s.argsKey] = args
		}
	}
	if !sameValue(got, want) {
		return errors.New("the rest of the rewritten file does not read back as it was (a value shared by an anchor or alias?)")
	}
	return nil
}

// lookup follows keys down maps from v.
func lookup(v any, keys []string) any {
	for _, k := range keys {
		switch m := v.(type) {
		case map[string]any:
			v = m[k]
		case map[any]any:
			v = m[k]
		default:
			return nil
		}
	}
	return v
}

// sameValue reports whether two decoded values are the same: maps by
// their keys, lists by their elements (a nil list is an empty one), NaN
// is NaN, anything else by reflect.DeepEqual.
func sameValue(a, b any) bool {
	switch a := a.(type) {
	case map[string]any:
		b, ok := b.(map[string]any)
		if !ok || len(a) != len(b) {
			return false
		}
		for k, x := range a {
			y, has := b[k]
			if !has || !sameValue(x, y) {
				return false
			}
		}
		return true
	case map[any]any:
		b, ok := b.(map[any]any)
		if !ok || len(a) != len(b) {
			return false
		}
		for k, x := range a {
			y, has := b[k]
			if !has || !sameValue(x, y) {
				return false
			}
		}
		return true
	case []any:
		b, ok := b.([]any)
		if !ok || len(a) != len(b) {
			return false
		}
		for i := range a {
			if !sameValue(a[i], b[i]) {
				return false
			}
		}
		return true
	case float64:
		b, ok := b.(float64)
		return ok && (a == b || math.IsNaN(a) && math.IsNaN(b))
	}
	return reflect.DeepEqual(a, b)
}

// lineStart is the offset of the start of the line holding data[i].
func lineStart(data []byte, i int) int {
	return bytes.LastIndexByte(data[:i], '\n') + 1
}

// lineEnd is where the line holding data[i] ends (its "\n" or "\r\n",
// or the end of data) and where the next line starts.
func lineEnd(data []byte, i int) (end, next int) {
	n := bytes.IndexByte(data[i:], '\n')
	if n < 0 {
		return len(data), len(data)
	}
	end, next = i+n, i+n+1
	if end > i && data[end-1] == '\r' {
		end--
	}
	return end, next
}

// blank reports whether b holds only spaces and tabs.
func blank(b []byte) bool {
	return len(bytes.Trim(b, " \t")) == 0
}
