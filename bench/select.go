package main

import (
	"fmt"
	"strings"
)

// selectNamed returns the items of all whose names list names, in the
// order of all, plus those named in keep; all of them when list is "".
// list separates names with ';'. A name that is not an item's is an
// error naming flag and the names there are.
func selectNamed[T any](all []T, name func(T) string, flag, list string, keep ...string) ([]T, error) {
	if list == "" {
		return all, nil
	}
	want := map[string]bool{}
	for _, n := range keep {
		want[n] = true
	}
	for _, n := range strings.Split(list, ";") {
		want[strings.TrimSpace(n)] = true
	}
	var out []T
	var have []string
	for _, it := range all {
		if want[name(it)] {
			out = append(out, it)
		}
		have = append(have, name(it))
	}
	if len(out) != len(want) {
		return nil, fmt.Errorf("%s %q names something the bench does not have (it has %s)", flag, list, strings.Join(have, "; "))
	}
	return out, nil
}
