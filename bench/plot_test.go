package main

import (
	"encoding/xml"
	"fmt"
	"math"
	"regexp"
	"strings"
	"testing"
)

func TestPlotRatiosIsWellFormed(t *testing.T) {
	s := &stormResults{
		configs:   []string{"baseline", "mcptrace", "bpftrace"},
		workloads: []workload{{name: "fork <CPU 0>"}, {name: "exec"}},
		raw: map[string]map[string][]float64{
			"baseline": {"fork <CPU 0>": {100, 110}, "exec": {10}},
			"mcptrace": {"fork <CPU 0>": {98, 99}, "exec": {9.5}},
			"bpftrace": {"fork <CPU 0>": {250}, "exec": {8}},
		},
		rounds: 2, stormSecs: 3,
	}
	svg := plotRatios(s)
	d := xml.NewDecoder(strings.NewReader(svg))
	bars := 0
	for {
		tok, err := d.Token()
		if err != nil {
			if err.Error() != "EOF" {
				t.Fatalf("not well-formed XML: %v", err)
			}
			break
		}
		if se, ok := tok.(xml.StartElement); ok && se.Name.Local == "title" {
			bars++
		}
	}
	if bars != 4 {
		t.Errorf("%d bars, want 4 (2 workloads × 2 tracers)", bars)
	}
	// A ratio of 2.4 raises the axis above it.
	if !strings.Contains(svg, ">2.5</text>") || !strings.Contains(svg, ">1.5</text>") {
		t.Errorf("y axis does not reach 2.5 for a ratio of 2.4")
	}
}

// Every tracer's bars have a color of their own, far from every other's
// to the eye (CIE76 color difference in Lab; two blues that looked alike
// were a bug).
func TestPlotColorsTellTracersApart(t *testing.T) {
	lab := func(c string) [3]float64 {
		var v [3]int
		fmt.Sscanf(c, "#%02x%02x%02x", &v[0], &v[1], &v[2])
		var lin [3]float64
		for i, x := range v {
			f := float64(x) / 255
			if f <= 0.04045 {
				lin[i] = f / 12.92
			} else {
				lin[i] = math.Pow((f+0.055)/1.055, 2.4)
			}
		}
		xyz := [3]float64{
			(0.4124*lin[0] + 0.3576*lin[1] + 0.1805*lin[2]) / 0.95047,
			0.2126*lin[0] + 0.7152*lin[1] + 0.0722*lin[2],
			(0.0193*lin[0] + 0.1192*lin[1] + 0.9505*lin[2]) / 1.08883,
		}
		for i, f := range xyz {
			if f > 0.008856 {
				xyz[i] = math.Cbrt(f)
			} else {
				xyz[i] = 7.787*f + 16.0/116
			}
		}
		return [3]float64{116*xyz[1] - 16, 500 * (xyz[0] - xyz[1]), 200 * (xyz[1] - xyz[2])}
	}
	for i, a := range plotColors {
		for _, b := range plotColors[i+1:] {
			la, lb := lab(a), lab(b)
			if d := math.Hypot(math.Hypot(la[0]-lb[0], la[1]-lb[1]), la[2]-lb[2]); d < 25 {
				t.Errorf("colors %s and %s are %.0f apart (CIE76): too alike", a, b, d)
			}
		}
	}
	// The bench's five tracers (tracers_linux.go), five colors.
	s := &stormResults{configs: []string{"baseline", "mcptrace", "mcptrace, no containers", "mcptrace, no history", "bpftrace", "forkstat"},
		workloads: []workload{{name: "fork"}}, raw: map[string]map[string][]float64{}, rounds: 1, stormSecs: 1}
	for _, c := range s.configs {
		s.raw[c] = map[string][]float64{"fork": {100}}
	}
	fills := map[string]bool{}
	for _, m := range regexp.MustCompile(`<rect [^>]*fill="(#[0-9a-f]{6})"><title>`).FindAllStringSubmatch(plotRatios(s), -1) {
		fills[m[1]] = true
	}
	if len(fills) != 5 {
		t.Errorf("five tracers' bars have %d colors: %v", len(fills), fills)
	}
}
