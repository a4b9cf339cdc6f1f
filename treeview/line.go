package treeview

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/mcptrace/mcptrace/lineage"
	"github.com/mcptrace/mcptrace/redact"
)

const (
	arrow        = " → "
	truncated    = "…[truncated]"
	minArgvWidth = 24 // room a command line keeps however deep the tree
	minImage     = 8  // room each image of a shortened exec chain keeps
	maxImages    = 4  // longer exec chains show the first and the last ones
	// maxArgvRunes bounds a command line shown whole (Options.FullArgv).
	maxArgvRunes = 1 << 16
)

// ANSI SGR parameters. Segments set a foreground colour and restore the
// default one, so a dimmed line stays dim.
const (
	sgrReset   = "0"
	sgrDim     = "2"
	sgrRed     = "31"
	sgrGreen   = "32"
	sgrYellow  = "33"
	sgrCyan    = "36"
	sgrDefault = "39"
)

// renderer writes lines, remembering the first write error.
type renderer struct {
	w      io.Writer
	opts   Options
	reused map[uint32]bool // PIDs that stand for more than one process
	err    error
}

func newRenderer(w io.Writer, opts Options, nodes []*lineage.Process) *renderer {
	if opts.Width <= 0 {
		opts.Width = DefaultWidth
	}
	starts := make(map[uint32]uint64, len(nodes))
	reused := make(map[uint32]bool)
	for _, p := range nodes {
		if s, ok := starts[p.ID.PID]; ok && s != p.ID.Start {
			reused[p.ID.PID] = true
		}
		starts[p.ID.PID] = p.ID.Start
	}
	return &renderer{w: w, opts: opts, reused: reused}
}

// segment is a piece of a line with its colour.
type segment struct {
	text string
	sgr  string
}

// line writes the line for p after the tree drawing lead.
func (r *renderer) line(p *lineage.Process, lead string) {
	if r.err != nil {
		return
	}
	var head []segment
	if l := r.opts.Labels[p.ID]; l != "" {
		head = append(head, segment{printable(l), sgrCyan})
	}
	head = append(head, segment{strconv.FormatUint(uint64(p.ID.PID), 10), ""})
	st := segment{state(p), sgrGreen}
	if p.Exited {
		st.sgr = ""
		if p.Signal != 0 {
			st.sgr = sgrRed
		}
	}
	head = append(head, st)
	if a := ageOf(p, r.opts); a != "" {
		head = append(head, segment{a, ""})
	}
	if !p.Kernel && !r.opts.NoUID {
		head = append(head, segment{fmt.Sprintf("uid=%d", p.UID), ""})
	}
	var marks []segment
	for _, m := range r.marks(p) {
		marks = append(marks, segment{m, sgrYellow})
	}

	used := runes(lead)
	for _, s := range head {
		used += runes(s.text) + 1
	}
	for _, s := range marks {
		used += 1 + runes(s.text)
	}
	room := max(r.opts.Width-used, minArgvWidth)
	if r.opts.FullArgv {
		room = maxArgvRunes
	}
	segs := append(head, segment{r.command(p, room), ""})
	segs = append(segs, marks...)

	var b strings.Builder
	b.WriteString(lead)
	dim := r.opts.Color && p.Exited
	if dim {
		b.WriteString("\x1b[" + sgrDim + "m")
	}
	for i, s := range segs {
		if i > 0 {
			b.WriteByte(' ')
		}
		if r.opts.Color && s.sgr != "" {
			b.WriteString("\x1b[" + s.sgr + "m" + s.text + "\x1b[" + sgrDefault + "m")
		} else {
			b.WriteString(s.text)
		}
	}
	if dim {
		b.WriteString("\x1b[" + sgrReset + "m")
	}
	b.WriteByte('\n')
	_, r.err = io.WriteString(r.w, b.String())
}

// kernelThreads writes one line for kernel threads that are leaves of the
// tree, listing their names.
func (r *renderer) kernelThreads(ps []*lineage.Process, lead string) {
	if r.err != nil {
		return
	}
	exited := 0
	names := make([]string, len(ps))
	for i, p := range ps {
		names[i] = printable(p.Comm)
		if p.Exited {
			exited++
		}
	}
	head := fmt.Sprintf("%d kernel threads", len(ps))
	if exited > 0 {
		head += fmt.Sprintf(" (%d exited)", exited)
	}
	head += ":"
	list := strings.Join(names, " ")
	if room := max(r.opts.Width-runes(lead)-runes(head)-1, minArgvWidth); runes(list) > room {
		list = string([]rune(list)[:room-1]) + "…"
	}
	text := head + " " + list
	if r.opts.Color {
		text = "\x1b[" + sgrDim + "m" + text + "\x1b[" + sgrReset + "m"
	}
	_, r.err = io.WriteString(r.w, lead+text+"\n")
}

// folded writes the line that stands for exited processes Options.Fold
// accepted under one parent: how many, and how many of each program,
// the most frequent first.
func (r *renderer) folded(ps []*lineage.Process, lead string) {
	if r.err != nil {
		return
	}
	counts := map[string]int{}
	for _, p := range ps {
		counts[commandName(p)]++
	}
	names := make([]string, 0, len(counts))
	for n := range counts {
		names = append(names, n)
	}
	slices.SortFunc(names, func(a, b string) int {
		if c := counts[b] - counts[a]; c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
	noun := "short commands"
	if len(ps) == 1 {
		noun = "short command"
	}
	head := fmt.Sprintf("+ %d %s:", len(ps), noun)
	items := make([]string, len(names))
	for i, n := range names {
		items[i] = fmt.Sprintf("%s ×%d", n, counts[n])
	}
	list := strings.Join(items, ", ")
	if room := max(r.opts.Width-runes(lead)-runes(head)-1, minArgvWidth); runes(list) > room && !r.opts.FullArgv {
		list = string([]rune(list)[:room-1]) + "…"
	}
	text := head + " " + list
	if r.opts.Color {
		text = "\x1b[" + sgrDim + "m" + text + "\x1b[" + sgrReset + "m"
	}
	_, r.err = io.WriteString(r.w, lead+text+"\n")
}

// commandName is the short name of what p runs: its program's basename,
// or for a process that never executed one of its own (a fork), its
// process name.
func commandName(p *lineage.Process) string {
	im := p.Current()
	if im.Source != lineage.SourceInherited {
		switch {
		case len(im.Argv) > 0 && im.Argv[0] != "":
			return printable(baseName(im.Argv[0]))
		case im.Filename != "":
			return printable(baseName(im.Filename))
		}
	}
	if p.Comm != "" {
		return printable(p.Comm)
	}
	return "?"
}

func baseName(s string) string {
	if i := strings.LastIndexAny(s, `/\`); i >= 0 && i < len(s)-1 {
		return s[i+1:]
	}
	return s
}

// marks lists what is special about p, in a fixed order.
func (r *renderer) marks(p *lineage.Process) []string {
	var m []string
	if note, ok := r.opts.Notes[p.ID]; ok {
		m = append(m, "["+printable(note)+"]")
	}
	if !p.Parent.IsZero() && !p.Creator.IsZero() && p.Parent != p.Creator {
		m = append(m, fmt.Sprintf("[reparented to %d]", p.Parent.PID))
	}
	if p.CreatorsElided > 0 {
		// The graph folded exited creators out of the chain above p to
		// stay bounded (lineage.max-nodes).
		m = append(m, fmt.Sprintf("[%d exited creators folded]", p.CreatorsElided))
	}
	for _, g := range []struct {
		gap  lineage.Gap
		text string
	}{
		{lineage.GapSeeded, "[seeded]"},
		{lineage.GapNoFork, "[gap: no fork seen]"},
		{lineage.GapUnknownCreator, "[gap: creator unknown]"},
		{lineage.GapNoExit, "[gap: no exit seen]"},
		{lineage.GapRepaired, "[repaired]"},
	} {
		if p.Gaps&g.gap != 0 {
			m = append(m, g.text)
		}
	}
	if !p.Kernel && len(p.Images) > 0 && p.Current().Source == lineage.SourceInherited {
		m = append(m, "[no exec]")
	}
	if r.reused[p.ID.PID] {
		m = append(m, "[pid reused]")
	}
	return m
}

// command renders what p runs in at most room runes: the current image, or
// with ShowChain every image it exec'd.
func (r *renderer) command(p *lineage.Process, room int) string {
	if p.Kernel || len(p.Images) == 0 {
		return "[" + printable(p.Comm) + "]"
	}
	var imgs []lineage.Image
	dropAt := -1 // where in imgs the images the graph dropped were
	if r.opts.ShowChain {
		for i, img := range p.Images {
			if i == 1 && p.ImagesDropped > 0 {
				dropAt = len(imgs)
			}
			if img.Source != lineage.SourceInherited {
				imgs = append(imgs, img)
			}
		}
	}
	if len(imgs) < 2 && dropAt < 0 {
		return image(p.Current(), p.Comm, room)
	}

	// An elided middle is a part with text and no image.
	type part struct {
		img  lineage.Image
		text string
	}
	var parts []part
	if len(imgs) > maxImages {
		last := maxImages - 2
		parts = append(parts, part{img: imgs[0]}, part{text: fmt.Sprintf("…%d more", len(imgs)-1-last)})
		imgs = imgs[len(imgs)-last:]
	}
	for _, img := range imgs {
		parts = append(parts, part{img: img})
	}
	if dropAt >= 0 {
		// The graph kept the first and the latest images only
		// (lineage.max-images); dropAt is 0 or 1, before any elision.
		at := min(dropAt, len(parts))
		parts = slices.Insert(parts, at, part{text: fmt.Sprintf("…%d images dropped", p.ImagesDropped)})
	}
	// Share the room fairly: short images keep their full length, the
	// longer ones split what is left.
	want := make([]int, len(parts))
	for i, pt := range parts {
		if pt.text == "" {
			pt.text = image(pt.img, p.Comm, 0)
		}
		want[i] = runes(pt.text)
	}
	alloc := share(want, room-runes(arrow)*(len(parts)-1))
	texts := make([]string, len(parts))
	for i, pt := range parts {
		texts[i] = pt.text
		if pt.text == "" {
			texts[i] = image(pt.img, p.Comm, alloc[i])
		}
	}
	return strings.Join(texts, arrow)
}

// share splits room between items wanting want[i] runes: items that want
// less than an equal share get what they want, the others split the rest.
// Nobody gets less than minImage.
func share(want []int, room int) []int {
	idx := make([]int, len(want))
	for i := range idx {
		idx[i] = i
	}
	// Smallest first, ties by position, so the result is deterministic.
	for i := 1; i < len(idx); i++ {
		for j := i; j > 0 && want[idx[j]] < want[idx[j-1]]; j-- {
			idx[j], idx[j-1] = idx[j-1], idx[j]
		}
	}
	got := make([]int, len(want))
	left := len(want)
	for _, i := range idx {
		fair := max(room/left, minImage)
		got[i] = min(want[i], fair)
		room -= got[i]
		left--
	}
	return got
}

// image renders one image's command line in at most room runes (0: no
// limit), falling back to the file name, then to comm.
func image(img lineage.Image, comm string, room int) string {
	argv := img.Argv
	if len(argv) == 0 && img.Filename != "" {
		argv = []string{img.Filename}
	}
	if len(argv) == 0 {
		return "[" + printable(comm) + "]"
	}
	if !img.ArgvTruncated {
		return redact.String(argv, room)
	}
	limit := 0
	if room > 0 {
		limit = max(room-runes(truncated), 1)
	}
	return strings.TrimSuffix(redact.String(argv, limit), "…") + truncated
}

// printable escapes a comm (which any process can set) if it holds
// anything that is not safe to print on a terminal.
func printable(s string) string {
	for _, r := range s {
		if r == utf8.RuneError || !unicode.IsPrint(r) {
			q := strconv.QuoteToGraphic(s)
			return q[1 : len(q)-1]
		}
	}
	return s
}

func runes(s string) int { return utf8.RuneCountInString(s) }
