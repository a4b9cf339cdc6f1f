package main

import (
	"fmt"
	"html"
	"math"
	"strings"
)

// plotColors are the bar colors of the tracers, in config order after the
// baseline: as many as there are configurations (five today: the agent,
// its two variants, bpftrace, forkstat), each of its own hue, so that no
// two tracers share a color (with four, the fifth took the first's blue).
// Okabe and Ito's palette, told apart with any color vision.
var plotColors = []string{"#0072b2", "#e69f00", "#009e73", "#cc79a7", "#d55e00", "#56b4e9", "#f0e442", "#000000"}

// plotRatios draws the storm ratios as grouped bars: one group per
// workload, one bar per tracer, with lines at 1.0 (the baseline) and at
// the 0.97 target.
func plotRatios(s *stormResults) string {
	var tracers []string
	for _, c := range s.configs {
		if c != "baseline" {
			tracers = append(tracers, c)
		}
	}
	const (
		left, right, top, bottom = 70.0, 20.0, 70.0, 70.0
		plotH                    = 340.0
		barW, barGap, groupGap   = 34.0, 4.0, 30.0
	)
	groupW := float64(len(tracers))*(barW+barGap) - barGap
	plotW := float64(len(s.workloads))*(groupW+groupGap) + groupGap
	width, height := left+plotW+right, top+plotH+bottom

	ymax := 1.1
	for _, w := range s.workloads {
		for _, t := range tracers {
			if r := s.ratio(t, w.name); !math.IsNaN(r) && r+0.05 > ymax {
				ymax = math.Ceil((r+0.05)*10) / 10
			}
		}
	}
	y := func(v float64) float64 { return top + plotH - v/ymax*plotH }

	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	p(`<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" font-family="Helvetica, Arial, sans-serif" font-size="12">`, width, height, width, height)
	p(`<rect width="100%%" height="100%%" fill="white"/>`)
	p(`<text x="%.0f" y="24" font-size="16" font-weight="bold">Throughput with each tracer running, relative to no tracer</text>`, left)
	p(`<text x="%.0f" y="44" fill="#444">median of %d interleaved rounds, %g s per storm; higher is better, 1.0 = no cost</text>`, left, s.rounds, s.stormSecs)

	// Grid and y axis.
	step := 0.1
	if ymax > 2 {
		step = 0.5
	} else if ymax > 1.5 {
		step = 0.25
	}
	for v := 0.0; v <= ymax+1e-9; v += step {
		p(`<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#e5e7eb"/>`, left, left+plotW, y(v), y(v))
		p(`<text x="%.1f" y="%.1f" text-anchor="end" fill="#444">%g</text>`, left-6, y(v)+4, math.Round(v*100)/100)
	}
	p(`<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#111"/>`, left, left, top, top+plotH)
	p(`<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#111"/>`, left, left+plotW, top+plotH, top+plotH)
	p(`<text transform="translate(18 %.1f) rotate(-90)" text-anchor="middle" fill="#444">ratio to baseline (median)</text>`, top+plotH/2)

	// Bars.
	for i, w := range s.workloads {
		gx := left + groupGap + float64(i)*(groupW+groupGap)
		for j, t := range tracers {
			r := s.ratio(t, w.name)
			if math.IsNaN(r) {
				continue
			}
			x := gx + float64(j)*(barW+barGap)
			p(`<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"><title>%s, %s: %.3f</title></rect>`,
				x, y(r), barW, y(0)-y(r), plotColors[j%len(plotColors)], html.EscapeString(t), html.EscapeString(w.name), r)
			p(`<text x="%.1f" y="%.1f" text-anchor="middle" font-size="11">%.2f</text>`, x+barW/2, y(r)-4, r)
		}
		p(`<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`, gx+groupW/2, top+plotH+18, html.EscapeString(w.name))
	}

	// Reference lines, drawn over the bars.
	p(`<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#111" stroke-width="1.5"/>`, left, left+plotW, y(1), y(1))
	p(`<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#dc2626" stroke-width="1.5" stroke-dasharray="6 4"/>`, left, left+plotW, y(0.97), y(0.97))

	// Legend.
	lx, ly := left, top+plotH+44
	for j, t := range tracers {
		p(`<rect x="%.1f" y="%.1f" width="12" height="12" fill="%s"/>`, lx, ly-10, plotColors[j%len(plotColors)])
		p(`<text x="%.1f" y="%.1f">%s</text>`, lx+17, ly, html.EscapeString(t))
		lx += legendWidth(t)
	}
	p(`<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#111" stroke-width="1.5"/>`, lx, lx+24, ly-4, ly-4)
	p(`<text x="%.1f" y="%.1f">1.0 = no tracer</text>`, lx+30, ly)
	lx += 140
	p(`<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#dc2626" stroke-width="1.5" stroke-dasharray="6 4"/>`, lx, lx+24, ly-4, ly-4)
	p(`<text x="%.1f" y="%.1f">0.97 = the agent's target</text>`, lx+30, ly)
	p(`</svg>`)
	return b.String()
}

// legendWidth is the room a legend entry named t takes: its swatch, its
// text (about 7 px a character at the legend's size) and a gap, at least
// 110 px.
func legendWidth(t string) float64 { return max(110, 17+7*float64(len(t))+18) }
