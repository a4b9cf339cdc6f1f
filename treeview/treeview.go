package treeview

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/mcptrace/mcptrace/lineage"
)

// DefaultWidth is the line width used when Options.Width is 0.
const DefaultWidth = 120

// Options control how lineage is rendered.
type Options struct {
	// Now is the current CLOCK_BOOTTIME in ns, to compute the age of live
	// processes. 0 leaves ages out.
	Now uint64
	// Wall, when set, turns a boot-clock time into the wall clock: a
	// tree from the history says since when a live process ran (a time)
	// instead of for how long until it was recorded.
	Wall func(boot uint64) time.Time
	// Width is the line width, in runes, that command lines are shortened to
	// fit (0 means DefaultWidth). Very deep trees may exceed it: a command
	// line keeps a minimum of room.
	Width int
	// Color adds ANSI colours: exited processes dimmed, signals red, marks
	// yellow. The caller decides (only when writing to a terminal).
	Color bool
	// ShowChain shows every image a process exec'd (sh -c … → env … → true)
	// instead of only the current one.
	ShowChain bool
	// HideKernel leaves kernel threads out of Tree. Processes they created
	// (usermode helpers) become roots.
	HideKernel bool
	// Notes adds a mark to the line of each process it names, first among
	// the marks, e.g. what the enforcer did to it ("killed by mcptrace
	// SIGTERM after 12ms").
	Notes map[lineage.ID]string
	// Labels puts a label first on the line of each process it names,
	// before its PID: what the process is in its session, e.g. "server
	// @modelcontextprotocol/server-filesystem gen 1 (npx → sh → node)".
	Labels map[lineage.ID]string
	// FullArgv shows command lines and exec chains whole instead of
	// shortened to Width.
	FullArgv bool
	// NoUID leaves uids out, where they are not known: a Windows
	// snapshot's processes are owned by tokens, not uids, and "uid=0"
	// would read as root.
	NoUID bool
	// Fold, when set, says which exited processes may be folded: under
	// each parent, the children Fold accepts that exited with everything
	// they created, none of them with a note (Notes: what the enforcer
	// did to it), are shown as one line after the others, "+ 61 short
	// commands: bash ×40, git ×12, lsb_release ×9" (a host's own commands
	// by the hundred would otherwise bury its servers). nil folds
	// nothing.
	Fold func(p *lineage.Process) bool
}

// Tree writes the forest of nodes along creator edges (Process.Creator): a
// node whose creator is not among nodes is a root. Roots and children are
// sorted by start time, then PID. A node given twice (same ID) is shown once.
// Kernel threads without children of their own are summed up in one line
// per parent when there are several.
func Tree(w io.Writer, nodes []lineage.Process, opts Options) error {
	ps := make([]*lineage.Process, 0, len(nodes))
	index := make(map[lineage.ID]int, len(nodes))
	for i := range nodes {
		p := &nodes[i]
		if opts.HideKernel && p.Kernel {
			continue
		}
		if _, dup := index[p.ID]; dup {
			continue
		}
		index[p.ID] = len(ps)
		ps = append(ps, p)
	}
	r := newRenderer(w, opts, ps)
	order := make([]int, len(ps)) // indexes into ps, by start time
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return byStart(ps[a], ps[b]) })

	children := make([][]int, len(ps))
	var roots []int
	for _, i := range order {
		p := ps[i]
		if c, ok := index[p.Creator]; ok && !p.Creator.IsZero() && p.Creator != p.ID {
			children[c] = append(children[c], i)
		} else {
			roots = append(roots, i)
		}
	}

	// dead[i]: i and everything it created (that nodes hold) exited,
	// with no note.
	var dead []bool
	if opts.Fold != nil {
		dead = make([]bool, len(ps))
		for k := len(order) - 1; k >= 0; k-- { // children start after their creators
			i := order[k]
			dead[i] = ps[i].Exited && opts.Notes[ps[i].ID] == ""
			for _, c := range children[i] {
				dead[i] = dead[i] && dead[c]
			}
		}
	}

	seen := make([]bool, len(ps))
	var walk func(i int, lead, indent string)
	walk = func(i int, lead, indent string) {
		seen[i] = true
		r.line(ps[i], lead)
		// Only a creator cycle leads back to a node already shown.
		kids := slices.DeleteFunc(slices.Clone(children[i]), func(c int) bool { return seen[c] })
		var kthreads []*lineage.Process
		if n := countFunc(kids, func(c int) bool { return ps[c].Kernel && len(children[c]) == 0 }); n > 1 {
			kthreads = make([]*lineage.Process, 0, n)
			kids = slices.DeleteFunc(kids, func(c int) bool {
				if ps[c].Kernel && len(children[c]) == 0 {
					seen[c] = true
					kthreads = append(kthreads, ps[c])
					return true
				}
				return false
			})
		}
		var folded []*lineage.Process
		if dead != nil {
			kids = slices.DeleteFunc(kids, func(c int) bool {
				if dead[c] && opts.Fold(ps[c]) {
					markSubtree(c, children, seen)
					folded = append(folded, ps[c])
					return true
				}
				return false
			})
		}
		for n, c := range kids {
			if n == len(kids)-1 && kthreads == nil && folded == nil {
				walk(c, indent+"└─ ", indent+"   ")
			} else {
				walk(c, indent+"├─ ", indent+"│  ")
			}
		}
		if kthreads != nil {
			lead := indent + "└─ "
			if folded != nil {
				lead = indent + "├─ "
			}
			r.kernelThreads(kthreads, lead)
		}
		if folded != nil {
			r.folded(folded, indent+"└─ ")
		}
	}
	for _, i := range roots {
		walk(i, "", "")
	}
	// Nodes in a creator cycle (bad data) are nobody's descendant of a root:
	// show them rather than lose them.
	for _, i := range order {
		if !seen[i] {
			walk(i, "", "")
		}
	}
	if r.err != nil {
		return fmt.Errorf("write tree: %w", r.err)
	}
	return nil
}

// markSubtree marks i and everything below it seen.
func markSubtree(i int, children [][]int, seen []bool) {
	stack := []int{i}
	for len(stack) > 0 {
		j := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if seen[j] {
			continue
		}
		seen[j] = true
		stack = append(stack, children[j]...)
	}
}

func countFunc[T any](s []T, f func(T) bool) int {
	n := 0
	for _, v := range s {
		if f(v) {
			n++
		}
	}
	return n
}

// Chain writes an ancestor chain top-down: nodes[0] is the process, the last
// node its topmost ancestor, which is written first. HideKernel does not
// apply.
func Chain(w io.Writer, nodes []lineage.Process, opts Options) error {
	ps := make([]*lineage.Process, len(nodes))
	for i := range nodes {
		ps[i] = &nodes[i]
	}
	r := newRenderer(w, opts, ps)
	indent := ""
	for i := len(nodes) - 1; i >= 0; i-- {
		lead := ""
		if i != len(nodes)-1 {
			lead = indent + "└─ "
			indent += "   "
		}
		r.line(&nodes[i], lead)
	}
	if r.err != nil {
		return fmt.Errorf("write chain: %w", r.err)
	}
	return nil
}

func byStart(a, b *lineage.Process) int {
	return cmp.Or(cmp.Compare(a.ID.Start, b.ID.Start), cmp.Compare(a.ID.PID, b.ID.PID))
}
