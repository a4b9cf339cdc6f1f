package main

import (
	"encoding/xml"
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
