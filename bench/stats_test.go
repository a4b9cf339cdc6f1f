package main

import (
	"math"
	"math/rand/v2"
	"testing"
)

func TestPercentile(t *testing.T) {
	tests := []struct {
		name string
		xs   []float64
		p    float64
		want float64
	}{
		{"median odd", []float64{3, 1, 2}, 50, 2},
		{"median even", []float64{4, 1, 3, 2}, 50, 2.5},
		{"one value", []float64{7}, 99, 7},
		{"p99 of 0..100", seq(101), 99, 99},
		{"p99 interpolated", []float64{0, 10}, 99, 9.9},
		{"min", []float64{5, 2, 9}, 0, 2},
		{"max", []float64{5, 2, 9}, 100, 9},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := percentile(tt.xs, tt.p); math.Abs(got-tt.want) > 1e-9 {
				t.Errorf("percentile(%v, %v) = %v, want %v", tt.xs, tt.p, got, tt.want)
			}
		})
	}
	if !math.IsNaN(median(nil)) {
		t.Error("median(nil) is not NaN")
	}
}

func seq(n int) []float64 {
	xs := make([]float64, n)
	for i := range xs {
		xs[i] = float64(i)
	}
	return xs
}

func TestMedianIntervalIsTheOrderStatisticsOfItsCoverage(t *testing.T) {
	tests := []struct {
		name          string
		xs            []float64
		lo, hi, cover float64
	}{
		{"nine values: the 2nd and 8th, 96.1%", []float64{9, 1, 8, 2, 7, 3, 6, 4, 5}, 2, 8, 1 - 2*10.0/512},
		{"six values: the whole range, 96.9%", []float64{6, 1, 5, 2, 4, 3}, 1, 6, 1 - 2/64.0},
		{"five values: the whole range, short of 95%", []float64{5, 1, 4, 2, 3}, 1, 5, 1 - 2/32.0},
		{"fifteen values: the 4th and 12th", seq(15), 3, 11, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lo, hi, cover := medianInterval(tt.xs)
			if lo != tt.lo || hi != tt.hi {
				t.Errorf("interval %v to %v, want %v to %v", lo, hi, tt.lo, tt.hi)
			}
			if tt.cover != 0 && math.Abs(cover-tt.cover) > 1e-9 {
				t.Errorf("coverage %v, want %v", cover, tt.cover)
			}
			if cover < 0.95 && len(tt.xs) >= 6 {
				t.Errorf("coverage %v below 95%% with %d values", cover, len(tt.xs))
			}
		})
	}
}

// TestMedianIntervalHoldsTheMedianAsOftenAsItSays draws samples of nine
// from a skewed distribution with a known median and counts how often
// the interval holds it.
func TestMedianIntervalHoldsTheMedianAsOftenAsItSays(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	trueMedian := math.Ln2 // of the exponential distribution with rate 1
	const trials = 20000
	held, claimed := 0, 0.0
	for range trials {
		xs := make([]float64, 9)
		for i := range xs {
			xs[i] = rng.ExpFloat64()
		}
		lo, hi, cover := medianInterval(xs)
		claimed = cover
		if lo <= trueMedian && trueMedian <= hi {
			held++
		}
	}
	if got := float64(held) / trials; math.Abs(got-claimed) > 0.01 {
		t.Errorf("the interval held the median in %.3f of %d samples, claimed %.3f", got, trials, claimed)
	}
}

func TestPairedDiffComparesRoundByRound(t *testing.T) {
	s := &stormResults{raw: map[string]map[string][]float64{
		"baseline": {"w": {100, 100, 100, 100, 100, 100, 100, 100, 100}},
		// Both agents drift from round to round together; a is 1 below b
		// in every round but one.
		"a": {"w": {90, 95, 100, 105, 110, 115, 120, 125, 130}},
		"b": {"w": {91, 96, 101, 106, 111, 116, 121, 126, 120}},
	}}
	d, lo, hi, cover := s.pairedDiff("a", "b", "w")
	if math.Abs(d+0.01) > 1e-9 || math.Abs(lo+0.01) > 1e-9 || math.Abs(hi+0.01) > 1e-9 {
		t.Errorf("paired difference %v (%v to %v), want -0.01 throughout", d, lo, hi)
	}
	if cover < 0.95 {
		t.Errorf("coverage %v", cover)
	}
}
