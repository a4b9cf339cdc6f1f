package treeview

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcptrace/mcptrace/internal/testenv"
	"github.com/mcptrace/mcptrace/lineage"
)

// elements counts the elements of an XML document by name and, for each
// class attribute, by "name.class".
func elements(t *testing.T, doc []byte) map[string]int {
	t.Helper()
	n := map[string]int{}
	d := xml.NewDecoder(bytes.NewReader(doc))
	for {
		tok, err := d.Token()
		if err == io.EOF {
			return n
		}
		if err != nil {
			t.Fatalf("not well-formed XML: %v\n%s", err, doc)
		}
		if se, ok := tok.(xml.StartElement); ok {
			n[se.Name.Local]++
			for _, a := range se.Attr {
				if a.Name.Local == "class" {
					n[se.Name.Local+"."+a.Value]++
				}
			}
		}
	}
}

// tool is the path of a program the picture tests render with.
func tool(t *testing.T, name, pkg string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		testenv.Missing(t, name+" (Debian's "+pkg+")", "the test renders the picture with it; scripts/setup.sh test installs it")
	}
	return p
}

// sessionPicture is npxChain as a session: the node server killed, a
// marker before.
func sessionPicture() Timeline {
	procs := npxChain()[3:] // the host's session: claude and below
	for i := range procs {
		if procs[i].ID.PID == 4311 {
			procs[i] = exited(procs[i], 12*60*sec, 0, 15)
		}
	}
	begin := procs[0].ID.Start
	procs = append(procs, proc(4500, begin+2*sec, procs[0].ID, 1000, []string{"sh", "-c", "GITHUB_TOKEN=" + ghToken + " true"}))
	labels := map[lineage.ID]string{procs[0].ID: "host claude", procs[1].ID: "wrapper github", procs[2].ID: "wrapper github", procs[3].ID: "server github"}
	return Timeline{
		Title: "session claude-4242 (uid 1000, rule:claude): ended <&> \x1b[31m", Start: time.Date(2026, 11, 26, 9, 0, 0, 0, time.UTC),
		Begin: begin, End: procs[3].ExitTime - 5*ms, Now: now, EndWhy: "root-exit",
		Processes: procs, Labels: labels,
		Kills:   []TimelineMark{{Process: procs[3].ID, At: procs[3].ExitTime - ms, What: "killed by mcptrace SIGTERM after 1ms"}},
		Markers: []TimelineMark{{At: begin + 60*sec, What: "marker: generation 1 ended"}},
	}
}

// TestTimelineSVGDrawsEveryProcessKillAndMarkerAndRenders checks the
// picture's structure and has librsvg render it, as a viewer would.
func TestTimelineSVGDrawsEveryProcessKillAndMarkerAndRenders(t *testing.T) {
	tl := sessionPicture()
	var b bytes.Buffer
	if err := TimelineSVG(&b, tl); err != nil {
		t.Fatal(err)
	}
	n := elements(t, b.Bytes())
	want := map[string]int{"svg": 1, "g.proc": len(tl.Processes), "g.kill": 1, "g.marker": 1, "g.end": 1, "line.exec": 5}
	for k, v := range want {
		if n[k] != v {
			t.Errorf("%s: %d, want %d", k, n[k], v)
		}
	}
	if strings.Contains(b.String(), "\x1b") {
		t.Error("a terminal escape reached the picture")
	}
	if strings.Contains(b.String(), ghToken) {
		t.Error("a secret reached the picture")
	}
	rsvg := tool(t, "rsvg-convert", "librsvg2-bin")
	png := filepath.Join(t.TempDir(), "timeline.png")
	cmd := exec.Command(rsvg, "-o", png)
	cmd.Stdin = &b
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("rsvg-convert: %v\n%s", err, out)
	}
	img, err := os.ReadFile(png)
	if err != nil || len(img) < 24 || string(img[1:4]) != "PNG" {
		t.Fatalf("rsvg-convert wrote no PNG: %v", err)
	}
	if w := uint32(img[16])<<24 | uint32(img[17])<<16 | uint32(img[18])<<8 | uint32(img[19]); w != tlWidth {
		t.Errorf("the PNG is %d pixels wide, want %d", w, tlWidth)
	}
}

// TestDotIsAGraphGraphvizLaysOut renders the graph with Graphviz's dot
// and counts its nodes and edges.
func TestDotIsAGraphGraphvizLaysOut(t *testing.T) {
	procs := npxChain()
	procs = append(procs, proc(4400, now-sec, id(4242, now-12*60*sec-3*sec), 1000, []string{"sh", "-c", `echo "quoted \ back" GITHUB_TOKEN=` + ghToken}))
	var b bytes.Buffer
	labels := map[lineage.ID]string{procs[3].ID: "host claude", procs[6].ID: "server github"}
	notes := map[lineage.ID]string{procs[6].ID: "killed by mcptrace SIGTERM after 3ms"}
	if err := Dot(&b, procs, Options{Now: now, Labels: labels, Notes: notes}); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), ghToken) {
		t.Fatalf("a secret reached the graph:\n%s", b.String())
	}
	dot := tool(t, "dot", "graphviz")
	cmd := exec.Command(dot, "-Tsvg")
	cmd.Stdin = &b
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil || errb.Len() > 0 {
		t.Fatalf("dot: %v\n%s\n%s", err, errb.String(), b.String())
	}
	n := elements(t, out.Bytes())
	edges := 0
	have := map[lineage.ID]bool{}
	for _, p := range procs {
		have[p.ID] = true
	}
	for _, p := range procs {
		if have[p.Creator] {
			edges++
		}
	}
	if n["g.node"] != len(procs) || n["g.edge"] != edges {
		t.Errorf("dot drew %d nodes and %d edges, want %d and %d", n["g.node"], n["g.edge"], len(procs), edges)
	}
}

// Row labels are not cut: the label column widens to the longest one,
// and one longer than the widest column keeps its start and its end
// (the role, and the generation and wrapper chain), whole in a tooltip.
func TestTimelineLabelsShowTheirGeneration(t *testing.T) {
	tl := sessionPicture()
	long := "server @modelcontextprotocol/server-filesystem gen 1 (npx → npm exec → sh → node)"
	tl.Labels[tl.Processes[3].ID] = long
	huge := "server @scope/" + strings.Repeat("x", 200) + " gen 2 (npx → sh → node)"
	tl.Labels[tl.Processes[4].ID] = huge
	var b bytes.Buffer
	if err := TimelineSVG(&b, tl); err != nil {
		t.Fatal(err)
	}
	svg := b.String()
	if !strings.Contains(svg, ">4311 "+long+"<") {
		t.Errorf("the label %q is not whole in the picture", long)
	}
	if !strings.Contains(svg, "x gen 2 (npx → sh → node)<title>4500 "+huge+"</title>") || !strings.Contains(svg, ">4500 server @scope/x") || !strings.Contains(svg, "x…x") {
		t.Errorf("the over-long label lost its end or its tooltip:\n%s", svg)
	}
	var w int
	if _, err := fmt.Sscanf(svg[strings.Index(svg, `width="`):], `width="%d"`, &w); err != nil || w <= tlWidth || w > tlLabelMax+tlPlot {
		t.Errorf("the picture is %d pixels wide (%v), want wider than %d for its labels, at most %d", w, err, tlWidth, tlLabelMax+tlPlot)
	}
}
