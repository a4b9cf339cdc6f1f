package treeview

import (
	"cmp"
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/mcptrace/mcptrace/lineage"
)

// Timeline is one session's life as TimelineSVG draws it. Times are
// CLOCK_BOOTTIME ns, as in lineage.
type Timeline struct {
	// Title heads the picture; Start is the wall time of Begin, for the
	// axis.
	Title string
	Start time.Time
	// Begin and End are the session's; End is 0 while it runs, and Now
	// then ends the picture.
	Begin, End, Now uint64
	// EndWhy says how the session ended.
	EndWhy    string
	Processes []lineage.Process
	// Labels are the role labels of processes (as Options.Labels).
	Labels  map[lineage.ID]string
	Kills   []TimelineMark
	Markers []TimelineMark
}

// TimelineMark is a kill (Process set) or a destroy marker at a time.
type TimelineMark struct {
	Process lineage.ID
	At      uint64
	What    string
}

// Picture geometry, in SVG pixels. The label column is as wide as its
// longest label needs, between tlLabelMin and tlLabelMax; the plot keeps
// tlPlot whatever the labels.
const (
	tlPlot     = 820
	tlLabelMin = 460
	tlLabelMax = 1000
	tlRow      = 22
	tlTop      = 70
	tlMargin   = 20
	// tlChar is the advance of one character at the picture's 12 px
	// monospace (0.6 em), tlIndent the indent of one level of depth.
	tlChar   = 7.3
	tlIndent = 14
)

// tlWidth is the width of the picture with the default label column.
const tlWidth = tlLabelMin + tlPlot

// TimelineSVG writes a self-contained SVG: a row per process in tree
// order (labels indented by depth), a bar from its start to its exit
// filled by role, a tick at each exec, a red cross where the enforcer
// killed it, dashed lines at destroy markers and a red line at the
// session's end. Hovering a bar shows its command line (redacted as in
// Tree).
func TimelineSVG(w io.Writer, tl Timeline) error {
	rows := treeOrder(tl.Processes)
	t0 := tl.Begin
	t1 := max(tl.End, tl.Begin+1)
	if tl.End == 0 {
		t1 = max(t1, tl.Now)
	}
	for _, r := range rows {
		if r.p.ID.Start != 0 {
			t0 = min(t0, r.p.ID.Start)
		}
		t1 = max(t1, r.p.ID.Start, r.p.ExitTime)
	}
	for _, k := range append(slices.Clone(tl.Kills), tl.Markers...) {
		t1 = max(t1, k.At)
	}
	// Each row's label: its PID, role, server, generation and wrapper
	// chain ("4311 server @scope/pkg gen 1 (npx → sh → node)"), whole
	// where the column allows, else cut in the middle: the role first and
	// the generation and chain last are what tell rows apart.
	labels := make([]string, len(rows))
	need := 0.0
	for i, r := range rows {
		labels[i] = fmt.Sprintf("%d %s", r.p.ID.PID, cmp.Or(printable(tl.Labels[r.p.ID]), printable(r.p.Comm)))
		need = max(need, float64(indentOf(r.depth))+tlChar*float64(runes(labels[i])))
	}
	tlLabel := min(max(tlLabelMin, int(math.Ceil(need+tlChar))+2*tlMargin), tlLabelMax)
	width := tlLabel + tlPlot
	span := float64(t1 - t0)
	plot := float64(width - tlLabel - 2*tlMargin)
	x := func(t uint64) float64 {
		if t < t0 {
			t = t0
		}
		return float64(tlLabel+tlMargin) + plot*float64(t-t0)/span
	}
	height := tlTop + len(rows)*tlRow + 70

	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="DejaVu Sans Mono, monospace" font-size="12">`+"\n", width, height, width, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text class="title" x="%d" y="24" font-size="16" font-weight="bold">%s</text>`+"\n", tlMargin, esc(tl.Title))
	// The axis: five ticks, relative to the first time shown.
	axisY := tlTop - 12
	for i := 0; i <= 5; i++ {
		t := t0 + uint64(float64(i)*span/5)
		label := "+" + Duration(time.Duration(t-t0))
		if i == 0 {
			label = "0"
			if !tl.Start.IsZero() {
				label = tl.Start.Add(-time.Duration(tl.Begin - t0)).Local().Format("15:04:05")
			}
		}
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#dddddd"/>`+"\n", x(t), axisY, x(t), tlTop+len(rows)*tlRow)
		anchor := "middle"
		if i == 5 {
			anchor = "end"
		}
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="%s" fill="#555555">%s</text>`+"\n", x(t), axisY-4, anchor, esc(label))
	}
	index := map[lineage.ID]int{}
	for i, r := range rows {
		index[r.p.ID] = i
		y := tlTop + i*tlRow
		p := r.p
		indent := indentOf(r.depth) // SVG text collapses spaces: depth is an offset
		full := labels[i]
		label := cutMiddle(full, int(float64(tlLabel-2*tlMargin-indent)/tlChar))
		fill := cmp.Or(roleFill(tl.Labels[p.ID]), "#eeeeee")
		end := t1
		if p.Exited && p.ExitTime != 0 {
			end = p.ExitTime
		}
		x0, x1 := x(p.ID.Start), x(end)
		fmt.Fprintf(&b, `<g class="proc" data-pid="%d">`, p.ID.PID)
		if label != full {
			fmt.Fprintf(&b, `<text x="%d" y="%d">%s<title>%s</title></text>`, tlMargin+indent, y+15, esc(label), esc(full))
		} else {
			fmt.Fprintf(&b, `<text x="%d" y="%d">%s</text>`, tlMargin+indent, y+15, esc(label))
		}
		fmt.Fprintf(&b, `<rect x="%.1f" y="%d" width="%.1f" height="14" rx="3" fill="%s" stroke="#888888"><title>%s</title></rect>`,
			x0, y+4, max(x1-x0, 2), fill, esc(fmt.Sprintf("%d %s %s\n%s", p.ID.PID, state(&p), age(&p, tl.Now), image(p.Current(), p.Comm, 200))))
		for _, im := range p.Images {
			if im.Time > p.ID.Start {
				fmt.Fprintf(&b, `<line class="exec" x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#333333" stroke-width="2"><title>%s</title></line>`,
					x(im.Time), y+2, x(im.Time), y+20, esc("exec "+image(im, p.Comm, 200)))
			}
		}
		b.WriteString("</g>\n")
	}
	for _, k := range tl.Kills {
		i, ok := index[k.Process]
		if !ok {
			continue
		}
		cx, cy := x(k.At), float64(tlTop+i*tlRow+11)
		fmt.Fprintf(&b, `<g class="kill"><path d="M%.1f %.1fL%.1f %.1fM%.1f %.1fL%.1f %.1f" stroke="#cc0000" stroke-width="3"/><title>%s</title></g>`+"\n",
			cx-6, cy-6, cx+6, cy+6, cx-6, cy+6, cx+6, cy-6, esc(k.What))
	}
	bottom := tlTop + len(rows)*tlRow
	for _, m := range tl.Markers {
		fmt.Fprintf(&b, `<g class="marker"><line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#e69138" stroke-width="2" stroke-dasharray="6 4"/><text x="%.1f" y="%d" fill="#e69138">%s</text></g>`+"\n",
			x(m.At), tlTop-6, x(m.At), bottom, x(m.At)+3, bottom+14, esc(m.What))
	}
	if tl.End != 0 {
		fmt.Fprintf(&b, `<g class="end"><line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#cc0000" stroke-width="2"/><text x="%.1f" y="%d" fill="#cc0000" text-anchor="end">%s</text></g>`+"\n",
			x(tl.End), tlTop-6, x(tl.End), bottom, x(tl.End)-3, bottom+28, esc("session ended ("+tl.EndWhy+")"))
	}
	// The legend.
	ly := height - 18
	lx := tlMargin
	for _, role := range []string{"host", "wrapper", "server", "container"} {
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="14" height="12" fill="%s" stroke="#888888"/><text x="%d" y="%d">%s</text>`, lx, ly-10, roleColors[role], lx+18, ly, role)
		lx += 40 + 8*len(role)
	}
	fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#333333" stroke-width="2"/><text x="%d" y="%d">exec</text>`, lx+4, ly-11, lx+4, ly+1, lx+10, ly)
	lx += 60
	fmt.Fprintf(&b, `<path d="M%d %dL%d %dM%d %dL%d %d" stroke="#cc0000" stroke-width="3"/><text x="%d" y="%d">killed by mcptrace</text>`, lx, ly-10, lx+10, ly, lx, ly, lx+10, ly-10, lx+16, ly)
	lx += 170
	fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#e69138" stroke-width="2" stroke-dasharray="6 4"/><text x="%d" y="%d">destroy marker</text>`, lx, ly-5, lx+24, ly-5, lx+30, ly)
	b.WriteString("\n</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// indentOf is the indent of a row at depth, in pixels.
func indentOf(depth int) int { return min(depth, 12) * tlIndent }

// cutMiddle shortens s to n runes by cutting its middle, so that its
// start and its end both show.
func cutMiddle(s string, n int) string {
	r := []rune(s)
	if len(r) <= n || n < 3 {
		return s
	}
	head := (n - 1) / 3
	tail := n - 1 - head
	return string(r[:head]) + "…" + string(r[len(r)-tail:])
}

type row struct {
	p     lineage.Process
	depth int
}

// treeOrder lists processes depth first along creator edges, children
// by start time then PID, each once.
func treeOrder(procs []lineage.Process) []row {
	byID := map[lineage.ID]lineage.Process{}
	for _, p := range procs {
		byID[p.ID] = p
	}
	kids := map[lineage.ID][]lineage.ID{}
	var roots []lineage.ID
	for id, p := range byID {
		if _, ok := byID[p.Creator]; ok && p.Creator != id {
			kids[p.Creator] = append(kids[p.Creator], id)
		} else {
			roots = append(roots, id)
		}
	}
	order := func(ids []lineage.ID) {
		slices.SortFunc(ids, func(a, b lineage.ID) int { return cmp.Or(cmp.Compare(a.Start, b.Start), cmp.Compare(a.PID, b.PID)) })
	}
	var out []row
	seen := map[lineage.ID]bool{}
	var walk func(id lineage.ID, depth int)
	walk = func(id lineage.ID, depth int) {
		if seen[id] {
			return
		}
		seen[id] = true
		out = append(out, row{byID[id], depth})
		order(kids[id])
		for _, k := range kids[id] {
			walk(k, depth+1)
		}
	}
	order(roots)
	for _, r := range roots {
		walk(r, 0)
	}
	return out
}

// esc is s as SVG text: each line made printable, then XML-escaped.
func esc(s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = printable(l)
	}
	var b strings.Builder
	xml.EscapeText(&b, []byte(strings.Join(lines, "\n")))
	return b.String()
}
