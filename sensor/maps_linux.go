package sensor

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
)

// MapUsage counts the entries of the hash maps that fill up as the node
// works: doomed (processes of ended sessions the kernel kills at fork and
// exec) and spare_comms (names of programs doom spares). Counting walks
// the keys: at most the map's capacity, 65,536 for doomed.
func (s *Sensor) MapUsage() ([]MapUsage, error) {
	var out []MapUsage
	for _, m := range []struct {
		name string
		m    *ebpf.Map
	}{{"doomed", s.objs.Doomed}, {"spare_comms", s.objs.SpareComms}} {
		n, err := countKeys(m.m)
		if err != nil {
			return nil, fmt.Errorf("count the entries of %s: %w", m.name, err)
		}
		out = append(out, MapUsage{Name: m.name, Entries: n, Max: int(m.m.MaxEntries())})
	}
	return out, nil
}

// countKeys counts the keys of m. A key deleted during the walk may make
// the kernel start over from the first key; the count stops at the map's
// capacity so it ends anyway.
func countKeys(m *ebpf.Map) (int, error) {
	key := make([]byte, m.KeySize())
	next := make([]byte, m.KeySize())
	var prev any // nil: the first key
	n := 0
	for n < int(m.MaxEntries()) {
		if err := m.NextKey(prev, next); err != nil {
			if isKeyNotExist(err) {
				break
			}
			return 0, err
		}
		n++
		copy(key, next)
		prev = key
	}
	return n, nil
}

func isKeyNotExist(err error) bool { return errors.Is(err, ebpf.ErrKeyNotExist) }
