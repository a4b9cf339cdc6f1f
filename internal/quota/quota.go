// Package quota keeps values by key within a bound per owner (a uid) and
// a bound on all owners together: an owner over its bound loses its own
// oldest value, and at the total bound the owner holding the most loses
// its oldest. One user who creates values in a loop so evicts only its
// own, never another user's while it holds more than they do.
//
// It keeps values in memory only, does not expire them by time, and is
// not safe for concurrent use: its owner's lock guards it.
package quota

import (
	"cmp"
	"slices"
)

// FIFO keeps values by key, oldest first per owner. Use New.
type FIFO[K comparable, V any] struct {
	// OnEvict, when set, is called with each value evicted to stay
	// within the bounds, after it is gone.
	OnEvict func(K, V)

	perOwner, total int
	seq             uint64
	items           map[K]item[V]
	owners          map[uint32]*queue[K]
}

type item[V any] struct {
	owner uint32
	seq   uint64 // order of first Put, for Keys
	v     V
}

// queue is one owner's keys, oldest first, from head on.
type queue[K comparable] struct {
	keys []K
	head int
}

func (q *queue[K]) len() int { return len(q.keys) - q.head }

func (q *queue[K]) pop() K {
	k := q.keys[q.head]
	var zero K
	q.keys[q.head] = zero
	q.head++
	if q.head > len(q.keys)/2 { // reclaim the popped half
		q.keys = append(q.keys[:0], q.keys[q.head:]...)
		q.head = 0
	}
	return k
}

// New returns a FIFO that keeps at most perOwner values of one owner and
// total values of all owners (both at least 1).
func New[K comparable, V any](perOwner, total int) *FIFO[K, V] {
	return &FIFO[K, V]{perOwner: max(perOwner, 1), total: max(total, 1), items: map[K]item[V]{}, owners: map[uint32]*queue[K]{}}
}

// Put keeps v under k for owner. A key already kept keeps its place (and
// its owner); a new one is the owner's newest. It returns how many values
// were evicted to stay within the bounds.
func (f *FIFO[K, V]) Put(owner uint32, k K, v V) (evicted int) {
	if it, ok := f.items[k]; ok {
		it.v = v
		f.items[k] = it
		return 0
	}
	f.seq++
	f.items[k] = item[V]{owner: owner, seq: f.seq, v: v}
	q := f.owners[owner]
	if q == nil {
		q = &queue[K]{}
		f.owners[owner] = q
	}
	q.keys = append(q.keys, k)
	for q.len() > f.perOwner {
		f.evictOldest(owner)
		evicted++
	}
	for len(f.items) > f.total {
		f.evictOldest(f.largestOwner())
		evicted++
	}
	return evicted
}

// Get returns the value kept under k.
func (f *FIFO[K, V]) Get(k K) (V, bool) {
	it, ok := f.items[k]
	return it.v, ok
}

// Keys returns the keys kept, in the order they were first put.
// O(n log n).
func (f *FIFO[K, V]) Keys() []K {
	keys := make([]K, 0, len(f.items))
	for k := range f.items {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b K) int { return cmp.Compare(f.items[a].seq, f.items[b].seq) })
	return keys
}

// Len is the number of values kept.
func (f *FIFO[K, V]) Len() int { return len(f.items) }

// evictOldest drops owner's oldest value.
func (f *FIFO[K, V]) evictOldest(owner uint32) {
	q := f.owners[owner]
	k := q.pop()
	it := f.items[k]
	delete(f.items, k)
	if q.len() == 0 {
		delete(f.owners, owner)
	}
	if f.OnEvict != nil {
		f.OnEvict(k, it.v)
	}
}

// largestOwner is the owner with the most values. O(owners).
func (f *FIFO[K, V]) largestOwner() uint32 {
	return LargestOwner(f.owners, (*queue[K]).len)
}

// LargestOwner returns the owner whose holding in m is the largest by
// size, the lowest uid among equals, so that an eviction decided twice
// (live, and again when a journal replays) picks the same owner. It is
// the one choice of victim for every per-owner bound: this package's
// FIFO and the session tracker's ended sessions. O(len(m)).
func LargestOwner[T any](m map[uint32]T, size func(T) int) uint32 {
	var best uint32
	n := -1
	for uid, v := range m {
		if c := size(v); c > n || c == n && uid < best {
			best, n = uid, c
		}
	}
	return best
}
