package quota

import (
	"fmt"
	"slices"
	"testing"
)

func TestFIFO(t *testing.T) {
	type put struct {
		owner uint32
		key   string
	}
	for _, tc := range []struct {
		name            string
		perOwner, total int
		puts            []put
		kept, gone      []string
	}{
		{name: "an owner over its bound loses its own oldest", perOwner: 2, total: 10,
			puts: []put{{1, "a1"}, {2, "b1"}, {1, "a2"}, {1, "a3"}},
			kept: []string{"b1", "a2", "a3"}, gone: []string{"a1"}},
		{name: "at the total bound the largest holder loses its oldest", perOwner: 10, total: 4,
			puts: []put{{2, "b1"}, {1, "a1"}, {1, "a2"}, {1, "a3"}, {1, "a4"}},
			kept: []string{"b1", "a2", "a3", "a4"}, gone: []string{"a1"}},
		{name: "among equal holders the lowest uid loses first", perOwner: 10, total: 4,
			puts: []put{{2, "b1"}, {1, "a1"}, {2, "b2"}, {1, "a2"}, {3, "c1"}},
			kept: []string{"b1", "b2", "a2", "c1"}, gone: []string{"a1"}},
		{name: "a key put again keeps its place and its owner", perOwner: 2, total: 10,
			puts: []put{{1, "a1"}, {1, "a2"}, {2, "a1"}, {1, "a3"}},
			kept: []string{"a2", "a3"}, gone: []string{"a1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := New[string, int](tc.perOwner, tc.total)
			for i, p := range tc.puts {
				f.Put(p.owner, p.key, i)
			}
			for _, k := range tc.kept {
				if _, ok := f.Get(k); !ok {
					t.Errorf("%s was evicted", k)
				}
			}
			for _, k := range tc.gone {
				if _, ok := f.Get(k); ok {
					t.Errorf("%s is still kept", k)
				}
			}
			if got := f.Keys(); !slices.Equal(got, tc.kept) {
				t.Errorf("Keys %v, want %v (in order of first put)", got, tc.kept)
			}
			if f.Len() != len(tc.kept) {
				t.Errorf("Len %d, want %d", f.Len(), len(tc.kept))
			}
		})
	}
}

// One owner's churn far past both bounds evicts none of another owner's
// values, and the table never holds more than its total bound.
func TestChurnOfOneOwnerKeepsAnothers(t *testing.T) {
	f := New[string, int](50, 120)
	var told []string
	f.OnEvict = func(k string, _ int) { told = append(told, k) }
	for i := range 40 {
		f.Put(1000, fmt.Sprint("keep", i), i)
	}
	evicted := 0
	for i := range 100_000 {
		evicted += f.Put(65534, fmt.Sprint("churn", i), i)
		if f.Len() > 120 {
			t.Fatalf("%d values kept, bound 120", f.Len())
		}
	}
	if want := 100_000 - 50; evicted != want || len(told) != want || told[0] != "churn0" || told[want-1] != fmt.Sprint("churn", want-1) {
		t.Errorf("Put counted %d evictions and OnEvict was told %d (first %q), want %d, oldest first", evicted, len(told), told[0], want)
	}
	for i := range 40 {
		if _, ok := f.Get(fmt.Sprint("keep", i)); !ok {
			t.Fatalf("keep%d evicted by another owner's churn", i)
		}
	}
}

// Putting past the bounds costs the same whatever the number kept:
// `go test -bench . ./internal/quota/`.
func BenchmarkPutPastTheBounds(b *testing.B) {
	for _, kept := range []int{1_000, 100_000} {
		b.Run(fmt.Sprint(kept), func(b *testing.B) {
			f := New[int, int](kept, 8*kept)
			for i := range kept {
				f.Put(1000, -1-i, i)
			}
			b.ResetTimer()
			for i := range b.N {
				f.Put(1000, i, i)
			}
		})
	}
}
