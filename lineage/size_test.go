package lineage

import (
	"testing"
	"unsafe"
)

// The graph holds a node, its images and their words for every process
// of the node, tens of thousands of them: the fields are ordered so that
// the small ones share words, and each fits the allocation class laid
// out for it (the runtime's classes near a node are 256, 288 and 320
// bytes; two images, what a process that exec'd holds, take 112). A field added that crosses a
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
