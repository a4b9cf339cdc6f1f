package lineage

import "unsafe"

// Source says where a piece of the graph came from.
type Source uint8

const (
	// SourceKernel: observed in a kernel event.
	SourceKernel Source = iota
	// SourceProc: read from /proc (seeding at start, or repair after a gap).
	SourceProc
	// SourceInherited: a forked child runs its creator's image until it execs.
	SourceInherited
)

func (s Source) String() string {
	switch s {
	case SourceKernel:
		return "kernel"
	case SourceProc:
		return "proc"
	case SourceInherited:
		return "inherited"
	}
	return "unknown"
}

// Image is one program a process ran. A process has one image per exec
// (sh → node is one process with two images).
type Image struct {
	Time          uint64   `json:"time_ns,omitempty"` // exec time, ns since boot; 0 when unknown
	Filename      string   `json:"filename,omitempty"`
	Argv          []string `json:"argv,omitempty"`
	ArgvTruncated bool     `json:"argv_truncated,omitempty"`
	Source        Source   `json:"source"`
	// Stdio is what the process's fd 0 and fd 1 were when it executed
	// this image; an inherited image keeps its creator's. Zero when not
	// recorded. (Before UID, so that the small fields share a word: an
	// Image is 56 bytes, two of them a 112-byte allocation.)
	Stdio Stdio `json:"stdio,omitzero"`
	// UID is the real uid the image was executed under (the exec event's,
	// or /proc's when read from there); an inherited image keeps its
	// creator's. The API shows an image only to root and to this uid: a
	// process that changed uid after an exec does not show its new owner
	// what it ran before. State saved before this field existed reads 0
	// (root's), which hides those images from other users.
	UID uint32 `json:"uid"`
}

// Gap flags record what the graph had to fill in because an event was lost,
// arrived out of order or predates the agent.
type Gap uint16

const (
	// GapSeeded: the process existed before the agent started; its creator
	// is taken from its parent at that time, which may be a reaper.
	GapSeeded Gap = 1 << iota
	// GapNoFork: an exec or exit arrived for a process whose fork was never seen.
	GapNoFork
	// GapUnknownCreator: the creator was not in the graph when its child appeared.
	GapUnknownCreator
	// GapNoExit: the process vanished from /proc without an exit event.
	GapNoExit
	// GapRepaired: the process was found in /proc during repair after a loss.
	GapRepaired
)

// Process is one node of the graph: a process for its whole life, alive or
// exited. Values returned by Graph methods are copies; mutate nothing.
type Process struct {
	// The fields are in the order that packs them (the bools and Gaps
	// share the last word): a node is what the graph holds per process,
	// tens of thousands of them.

	ID ID `json:"id"`
	// Creator is the process that forked this one. Written once; zero when
	// unknown (see Gaps). When CreatorsElided is nonzero, it is the nearest
	// creator the graph still holds.
	Creator ID `json:"creator"`
	// Parent is the current parent: the creator, or after the creator died
	// the reaper the kernel reparented this process to.
	Parent ID `json:"parent"`
	// CreatorsElided counts the exited processes between Creator and this
	// one that the graph folded out of the chain to stay bounded: each
	// created only the next, and had exited (see Graph.Pin, fold.go).
	CreatorsElided uint32 `json:"creators_elided,omitempty"`

	UID      uint32 `json:"uid"`
	CgroupID uint64 `json:"cgroup_id,omitempty"`
	Comm     string `json:"comm"`

	// Images is the exec chain, oldest first. The first image of a forked
	// child is its creator's (SourceInherited) until it execs.
	Images []Image `json:"images,omitempty"`
	// ImagesDropped counts the images left out of Images between the first
	// and the latest ones (Config.MaxImages).
	ImagesDropped uint64 `json:"images_dropped,omitempty"`

	ExitTime uint64 `json:"exit_time_ns,omitempty"` // ns since boot; 0 when unknown
	ExitCode int    `json:"exit_code,omitempty"`
	Signal   int    `json:"signal,omitempty"`

	Gaps Gap `json:"gaps,omitempty"`
	// CoarseStart: ID.Start came from /proc/PID/stat and has clock-tick
	// precision; the first kernel event for the process makes it exact.
	CoarseStart bool `json:"coarse_start,omitempty"`
	Kernel      bool `json:"kernel_thread,omitempty"`
	Exited      bool `json:"exited,omitempty"`
}

// Current returns the image the process runs (or ran last); zero when none is known.
func (p *Process) Current() Image {
	if len(p.Images) == 0 {
		return Image{}
	}
	return p.Images[len(p.Images)-1]
}

// ImageBytes is the graph's accounting of the memory p's images hold: the
// bytes of every filename and argv string plus a string header (16 bytes)
// per argv element and the Image struct itself. Images shared with a
// creator (inherited) count in full.
func (p *Process) ImageBytes() int {
	n := 0
	for i := range p.Images {
		n += imageBytes(&p.Images[i])
	}
	return n
}

func imageBytes(im *Image) int {
	n := int(unsafe.Sizeof(*im)) + len(im.Filename)
	for _, a := range im.Argv {
		n += int(unsafe.Sizeof(a)) + len(a)
	}
	return n
}
