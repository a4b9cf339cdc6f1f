package lineage

import (
	"testing"
	"unsafe"
)

// The graph holds a node, its images and their words for every process
// of the node, tens of thousands of them: the fields are ordered so that
// nothing is padding, and a node fills the allocation the runtime gives
// it (its size classes near here are 256, 288 and 320 bytes; two images,
// what a process that exec'd holds, 112). A field added that crosses a
// class costs every process the next one: change these on purpose.
func TestNodesFitTheirAllocations(t *testing.T) {
	for _, c := range []struct {
		what      string
		size, max uintptr
	}{
		{"node", unsafe.Sizeof(node{}), 288},
		{"Process", unsafe.Sizeof(Process{}), 144},
		{"Image", unsafe.Sizeof(Image{}), 56},
	} {
		if c.size > c.max {
			t.Errorf("%s is %d bytes, over the %d it was laid out for", c.what, c.size, c.max)
		}
	}
}
