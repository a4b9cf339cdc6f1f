package treeview

import (
	"fmt"
	"io"
	"strings"

	"github.com/mcptrace/mcptrace/lineage"
)

// Dot writes nodes as a Graphviz graph (render it with `dot -Tsvg`):
// one box per process with its label (Options.Labels), PID, state and
// command line, an edge from each creator to what it created. Exited
// processes are dashed and grey, those a note marks as killed are red,
// and boxes are filled by the role their label starts with (host,
// wrapper, server, container). Command lines are shortened to Width and
// redacted as in Tree.
func Dot(w io.Writer, nodes []lineage.Process, opts Options) error {
	if opts.Width == 0 {
		opts.Width = 60
	}
	var b strings.Builder
	b.WriteString("digraph lineage {\n\trankdir=LR;\n\tnode [shape=box, style=\"rounded,filled\", fillcolor=white, fontname=\"monospace\", fontsize=10];\n\tedge [color=\"#555555\"];\n")
	have := map[lineage.ID]bool{}
	for _, p := range nodes {
		have[p.ID] = true
	}
	seen := map[lineage.ID]bool{}
	for i := range nodes {
		p := &nodes[i]
		if seen[p.ID] || opts.HideKernel && p.Kernel {
			continue
		}
		seen[p.ID] = true
		var lines []string
		if l := opts.Labels[p.ID]; l != "" {
			lines = append(lines, l)
		}
		head := fmt.Sprintf("%d %s", p.ID.PID, state(p))
		if a := ageOf(p, opts); a != "" {
			head += " " + a
		}
		if !opts.NoUID {
			head += fmt.Sprintf(" uid=%d", p.UID)
		}
		lines = append(lines, head)
		lines = append(lines, image(p.Current(), p.Comm, opts.Width))
		if n := opts.Notes[p.ID]; n != "" {
			lines = append(lines, n)
		}
		attrs := []string{"label=" + dotQuote(strings.Join(lines, "\n"))}
		if fill := roleFill(opts.Labels[p.ID]); fill != "" {
			attrs = append(attrs, "fillcolor="+dotQuote(fill))
		}
		if p.Exited {
			attrs = append(attrs, `style="rounded,filled,dashed"`, `fontcolor="#666666"`)
		}
		if strings.Contains(opts.Notes[p.ID], "killed") {
			attrs = append(attrs, `color="#cc0000"`, "penwidth=2")
		}
		fmt.Fprintf(&b, "\t%s [%s];\n", dotID(p.ID), strings.Join(attrs, ", "))
	}
	for i := range nodes {
		p := &nodes[i]
		if seen[p.ID] && have[p.Creator] && seen[p.Creator] && p.Creator != p.ID {
			fmt.Fprintf(&b, "\t%s -> %s;\n", dotID(p.Creator), dotID(p.ID))
		}
	}
	b.WriteString("}\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// roleFill is the fill colour of a role, the first word of a label.
func roleFill(label string) string {
	role, _, _ := strings.Cut(label, " ")
	return roleColors[role]
}

// roleColors are the colours of the roles in both pictures.
var roleColors = map[string]string{
	"host":      "#cfe2f3",
	"wrapper":   "#eeeeee",
	"server":    "#d9ead3",
	"container": "#fff2cc",
}

func dotID(id lineage.ID) string { return fmt.Sprintf("p%d_%d", id.PID, id.Start) }

// dotQuote is s as a DOT string: quotes and backslashes escaped, lines
// broken with \n (left-justified), anything unprintable escaped first.
func dotQuote(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, line := range strings.Split(s, "\n") {
		line = printable(line)
		line = strings.ReplaceAll(line, `\`, `\\`)
		line = strings.ReplaceAll(line, `"`, `\"`)
		b.WriteString(line)
		b.WriteString(`\l`)
	}
	b.WriteByte('"')
	return b.String()
}
